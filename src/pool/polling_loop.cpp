#include "pool/polling_loop.hpp"

namespace isohost::pool {

void run_polling(asio::io_context& io, std::chrono::microseconds window) {
  using Clock = std::chrono::steady_clock;
  while (io.run_one() > 0) {  // sleeps until something happens
    auto until = Clock::now() + window;
    while (Clock::now() < until && !io.stopped()) {
      if (io.poll() > 0) until = Clock::now() + window;
    }
  }
}

}  // namespace isohost::pool
