#pragma once

// The tells and asks workers send while none of their calls is in flight (a thread or a task of
// their own between calls), queued on the pool's loop thread for the Python host's tell thread,
// which runs their handlers and answers the asks (docs/python-api.md, "Asks and interrupts").
//
//   options.on_tell = [tells](const auto& env, const auto& tell) { tells->push(env, tell); };
//   options.on_ask = [tells](const auto& env, const auto& ask, auto answer) {
//     tells->push(env, ask, std::move(answer)); };
//   while (auto batch = tells->take(1s)) for (auto& t : *batch) ... tells->answer(t.token, r);
//
// Bounded: past kMaxQueued waiting, a tell is dropped (logged) and an ask answered at once that
// the host is behind, so a worker that tells in a loop while the handler thread is stuck cannot
// grow the host without end. Until serve() (no handler thread yet) an ask is answered at once
// that this host serves none, so that no worker waits for a thread that never comes.
// Thread safety: every method on any thread.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace isohost::binding {

class IdleTells {
 public:
  using Answer = std::function<void(nlohmann::ordered_json)>;
  struct Tell {
    std::string env;
    nlohmann::ordered_json body;
    std::uint64_t token = 0;  // an ask's, for answer(); 0 for a tell
  };
  static constexpr std::size_t kMaxQueued = 4096;

  // From now on asks wait for take() and answer() (a handler thread exists).
  void serve();
  // A tell (no `answer`) or an ask, whose reply goes to `answer`.
  void push(const std::string& env, const nlohmann::ordered_json& body, Answer answer = nullptr);
  // What came since the last take, in order, waiting at most `limit` for the first (empty when
  // none came); nullopt once closed.
  std::optional<std::vector<Tell>> take(std::chrono::milliseconds limit);
  // Sends the reply of the ask `token` ({"ok": ...}); nothing for a token not waiting (answered
  // already, or dropped by close()).
  void answer(std::uint64_t token, nlohmann::ordered_json reply);
  // Wakes every take() for good; asks still waiting are dropped unanswered (their workers end
  // with the pool).
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Tell> queued_;
  std::map<std::uint64_t, Answer> waiting_;
  std::uint64_t next_token_ = 1;
  std::size_t dropped_ = 0;
  bool served_ = false;
  bool closed_ = false;
};

}  // namespace isohost::binding
