#pragma once

// How a thread that waits for a call's result waits: it polls first, then sleeps.
//
// The loop and the worker poll after each burst of work (loop_thread.hpp, the worker's
// --poll-microseconds), so a warm call pays no wake-up on their side; a caller that sleeps on
// its future still pays one when the result comes, on a VM the largest part of what is left
// (isohost bench rtt). A caller polls only where the machine has a core for it beside the loop
// and the worker: on two cores a third poller takes the core the worker needs, and the call
// took 2.4 times as long (docs/protocol.md#polling).

#include <chrono>
#include <future>

namespace isohost::pool {

// 100 us where this process may run on 4 CPUs or more (sched_getaffinity), else zero.
std::chrono::microseconds caller_poll_window();

// Polls `ready()` for up to `window`; returns whether it became true.
template <typename Ready>
bool poll_for(std::chrono::microseconds window, Ready ready) {
  if (window.count() <= 0) return ready();
  const auto until = std::chrono::steady_clock::now() + window;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
  }
  return true;
}

// Waits for `future` to be ready, polling it for caller_poll_window() first.
template <typename T>
void wait_polling(const std::future<T>& future) {
  static const auto window = caller_poll_window();
  const auto ready = [&] {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  if (!poll_for(window, ready)) future.wait();
}

}  // namespace isohost::pool
