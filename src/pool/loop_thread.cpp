#include "pool/loop_thread.hpp"

#include <exception>

#include <spdlog/spdlog.h>

namespace isohost::pool {

namespace {

// Runs `io` until it is stopped or runs out of work, polling `window` after each burst.
void run_polling(asio::io_context& io, std::chrono::microseconds window) {
  using Clock = std::chrono::steady_clock;
  while (io.run_one() > 0) {  // sleeps until something happens
    auto until = Clock::now() + window;
    while (Clock::now() < until && !io.stopped()) {
      if (io.poll() > 0) until = Clock::now() + window;
    }
  }
}

}  // namespace

void LoopThread::start(std::chrono::microseconds poll_window) {
  thread_ = std::thread([this, poll_window] {
    for (;;) {
      try {
        run_polling(io_, poll_window);
        return;
      } catch (const std::exception& e) {
        spdlog::error("event loop: unexpected error, continuing: {}", e.what());
      }
    }
  });
}

void LoopThread::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace isohost::pool
