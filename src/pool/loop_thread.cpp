#include "pool/loop_thread.hpp"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

namespace isohost::pool {

void LoopThread::linger(std::chrono::microseconds window) {
  linger_until_ = std::max(linger_until_, Clock::now() + window);
}

// Runs `io` until it is stopped or runs out of work, polling `window` after each burst, or
// until the latest linger() if later.
void LoopThread::run_polling(std::chrono::microseconds window) {
  while (io_.run_one() > 0) {  // sleeps until something happens
    auto until = std::max(Clock::now() + window, linger_until_);
    while (Clock::now() < until && !io_.stopped()) {
      if (io_.poll() > 0) until = std::max(Clock::now() + window, linger_until_);
    }
  }
}

void LoopThread::start(std::chrono::microseconds poll_window) {
  thread_ = std::thread([this, poll_window] {
    for (;;) {
      try {
        run_polling(poll_window);
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
