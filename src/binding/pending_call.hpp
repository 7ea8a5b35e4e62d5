#pragma once

// One request submitted by the Python API, completed on the pool's loop thread and read on a
// Python thread.
//
//   auto pending = std::make_shared<PendingCall>();
//   pool.submit(request, [pending](Outcome o) { pending->complete(std::move(o)); });
//   pending->poll(pool::caller_poll_window());   // with the GIL released
//   const Outcome& outcome = pending->wait();
//
// asyncio waits without a thread: event_fd() becomes readable once the outcome is in.
// Thread safety: complete() on the loop thread, everything else on any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "wire/unique_fd.hpp"
#include "worker/error.hpp"

namespace isohost::binding {

class PendingCall {
 public:
  // Loop thread, once: stores the outcome and wakes every waiter.
  void complete(worker::Outcome outcome);

  // Blocks until complete() has run. The Outcome lives as long as this object.
  const worker::Outcome& wait();

  [[nodiscard]] bool done() const;

  // Polls for up to `window` without sleeping (pool/caller_polling.hpp); returns done().
  bool poll(std::chrono::microseconds window) const;

  // Waits at most `limit`; returns whether the outcome is in.
  bool wait_for(std::chrono::milliseconds limit);

  // An eventfd that is readable once the outcome is in; made on first use. Throws
  // std::system_error.
  int event_fd();

 private:
  void signal_event_locked();

  mutable std::mutex mutex_;
  std::condition_variable completed_;
  std::optional<worker::Outcome> outcome_;
  // Set once outcome_ is in, for poll(), which takes no lock.
  std::atomic<bool> completed_flag_{false};
  wire::UniqueFd event_;
};

}  // namespace isohost::binding
