#pragma once

// One request submitted by the Python API, completed on the pool's loop thread and read on a
// Python thread.
//
//   auto pending = std::make_shared<PendingCall>();
//   pool.submit(request, [pending](Outcome o) { pending->complete(std::move(o)); });
//   pending->wait_event(100ms, pool::caller_poll_window());   // with the GIL released
//   const Outcome& outcome = pending->wait();
//
// A call's asks (docs/protocol.md, "Asks") are served on the thread that waits for it:
// wait_event() wakes for them too, take_asks() hands them over, answer() replies.
//
// asyncio waits without a thread: event_fd() becomes readable once the outcome is in, and
// whenever an ask comes (the reader drains it).
// Thread safety: complete() and ask() on the loop thread, everything else on any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "error/error.hpp"
#include "wire/unique_fd.hpp"
#include "worker/outcome.hpp"

namespace isohost::binding {

class PendingCall {
 public:
  using Answer = std::function<void(nlohmann::ordered_json reply)>;
  // An ask or tell from the worker, waiting for the caller's thread to serve it.
  struct Ask {
    std::uint64_t token;
    nlohmann::ordered_json body;
  };
  enum class Event { done, asks, timeout };

  // Loop thread, once: stores the outcome and wakes every waiter. Asks not yet answered are
  // dropped: the call that made them has ended. `output_read`: how many lines of the workers'
  // output the host had read by then (OutputQueue::pushed()), which the caller may wait for.
  void complete(worker::Outcome outcome, std::uint64_t output_read = 0);

  // Loop thread: the worker asked something during the call; wakes a waiter to serve it.
  void ask(nlohmann::ordered_json body, Answer answer);
  // Any thread: the asks that came since the last take, in order.
  std::vector<Ask> take_asks();
  // Any thread: answers an ask taken earlier; an unknown token (a tell, or a call that ended)
  // does nothing.
  void answer(std::uint64_t token, nlohmann::ordered_json reply);
  // Waits at most `limit` for the outcome or an ask, after polling for `poll_window`.
  Event wait_event(std::chrono::milliseconds limit, std::chrono::microseconds poll_window);

  // Blocks until complete() has run. The Outcome lives as long as this object.
  const worker::Outcome& wait();

  [[nodiscard]] bool done() const;

  // complete()'s `output_read`; 0 until then.
  [[nodiscard]] std::uint64_t output_read() const;

  // The pool's name for the call (Pool::interrupt); 0 for other requests.
  std::uint64_t ticket = 0;

  // An eventfd that is readable once the outcome is in; made on first use. Throws
  // std::system_error.
  int event_fd();

 private:
  void signal_event_locked();

  mutable std::mutex mutex_;
  std::condition_variable completed_;
  std::vector<Ask> asks_;
  std::map<std::uint64_t, Answer> answers_;
  std::uint64_t next_token_ = 1;
  // Set while asks_ is not empty, for wait_event's poll, which takes no lock.
  std::atomic<bool> asked_flag_{false};
  std::optional<worker::Outcome> outcome_;
  std::uint64_t output_read_ = 0;
  // Set once outcome_ is in, for wait_event's poll, which takes no lock.
  std::atomic<bool> completed_flag_{false};
  wire::UniqueFd event_;
};

}  // namespace isohost::binding
