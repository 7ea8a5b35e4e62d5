#pragma once

// The pool's event loop and the one thread that runs it. The loop is kept alive (a work guard)
// until `release`, then runs out once the last handler is done; a handler's exception is logged
// and the loop goes on (a bug in one handler must not take every worker down with the host).
//
// It is run so that a warm call pays as few thread wake-ups as possible. A call from another
// thread wakes the loop (the post), the loop wakes the worker (its socket), the worker wakes the
// loop (the reply) and the loop wakes the caller (the future): four wake-ups, against two for a
// bare socketpair round trip. On a virtual machine a wake-up of an idle CPU costs several
// microseconds, the largest part of a warm call (isohost bench rtt). So after each burst of work
// the loop keeps polling, without sleeping, for `poll_window`: the reply, and a caller's next
// request, usually arrive within it and find the loop awake. The cost is at most that window of
// one core after each burst; a zero window sleeps at once, as io_context::run. A handler may
// ask for a longer spell (linger): the pool does after a call returns, when the caller's next
// call is likely but the caller's own work in between outlasts the window, and stops it when
// the next call goes out, so that the loop does not spin while the worker runs it.

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <thread>

namespace isohost::pool {

class LoopThread {
 public:
  LoopThread() = default;
  // Joins a thread still running: release() first, or this waits for ever.
  ~LoopThread() { join(); }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  asio::io_context& io() { return io_; }
  void start(std::chrono::microseconds poll_window);
  // Loop thread: from now, poll for at least `window` before sleeping, unless stop_lingering()
  // comes first.
  void linger(std::chrono::microseconds window);
  // Loop thread: back to the usual window after each burst.
  void stop_lingering() { linger_until_ = {}; }
  // Loop thread: nothing more will be posted that matters; the loop ends when it runs out.
  void release() { work_.reset(); }
  // Any thread but the loop's: waits for the loop to end; returns at once if it never started.
  void join();
  [[nodiscard]] bool running() const { return thread_.joinable(); }
  [[nodiscard]] std::chrono::steady_clock::time_point started_at() const { return started_at_; }

 private:
  using Clock = std::chrono::steady_clock;
  void run_polling(std::chrono::microseconds window);

  asio::io_context io_;
  Clock::time_point linger_until_{};  // loop thread only
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

}  // namespace isohost::pool
