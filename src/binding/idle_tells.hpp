#pragma once

// The tells workers send while none of their calls is in flight (a thread or a task of their
// own between calls), queued on the pool's loop thread for the Python host's tell thread, which
// runs their handlers (docs/python-api.md, "Asks and interrupts").
//
//   options.on_tell = [tells](const auto& env, const auto& tell) { tells->push(env, tell); };
//   while (auto batch = tells->take(1s)) for (auto& t : *batch) ...;   // nullopt once closed
//
// Bounded: past kMaxQueued waiting, a tell is dropped (logged), so a worker that tells in a
// loop while the handler thread is stuck cannot grow the host without end.
// Thread safety: every method on any thread.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace isohost::binding {

class IdleTells {
 public:
  struct Tell {
    std::string env;
    nlohmann::ordered_json body;
  };
  static constexpr std::size_t kMaxQueued = 4096;

  void push(const std::string& env, const nlohmann::ordered_json& body);
  // What came since the last take, in order, waiting at most `limit` for the first (empty when
  // none came); nullopt once closed.
  std::optional<std::vector<Tell>> take(std::chrono::milliseconds limit);
  // Wakes every take() for good.
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Tell> queued_;
  std::size_t dropped_ = 0;
  bool closed_ = false;
};

}  // namespace isohost::binding
