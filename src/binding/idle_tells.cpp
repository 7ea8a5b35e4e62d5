#include "binding/idle_tells.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "worker/worker.hpp"

namespace isohost::binding {

void IdleTells::serve() {
  std::lock_guard lock(mutex_);
  served_ = true;
}

void IdleTells::push(const std::string& env, const nlohmann::ordered_json& body, Answer answer) {
  nlohmann::ordered_json refused;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (answer && !served_) {
      refused = worker::failed_answer(
          "Unsupported",
          "no call is in flight to ask, and this host has no handler for asks "
          "between calls");
    } else if (queued_.size() >= kMaxQueued) {
      // Logged once per overflow, not once per tell: the log must not grow without end either.
      if (dropped_++ == 0) {
        spdlog::warn("worker '{}': tells dropped: {} wait for the host's handlers already", env,
                     kMaxQueued);
      }
      if (!answer) return;
      refused =
          worker::failed_answer("Busy", std::to_string(kMaxQueued) +
                                            " tells and asks wait for the host's handlers already");
    } else {
      dropped_ = 0;
      Tell tell{env, body};
      if (answer) {
        tell.token = next_token_++;
        waiting_.emplace(tell.token, std::move(answer));
      }
      queued_.push_back(std::move(tell));
    }
  }
  if (!refused.is_null()) {
    answer(std::move(refused));
    return;
  }
  arrived_.notify_one();
}

std::optional<std::vector<IdleTells::Tell>> IdleTells::take(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, limit, [this] { return closed_ || !queued_.empty(); });
  if (closed_) return std::nullopt;
  return std::exchange(queued_, {});
}

void IdleTells::answer(std::uint64_t token, nlohmann::ordered_json reply) {
  Answer answer;
  {
    std::lock_guard lock(mutex_);
    auto found = waiting_.find(token);
    if (found == waiting_.end()) return;
    answer = std::move(found->second);
    waiting_.erase(found);
  }
  answer(std::move(reply));
}

void IdleTells::close() {
  std::map<std::uint64_t, Answer> dropped;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    queued_.clear();
    dropped = std::exchange(waiting_, {});
  }
  arrived_.notify_all();
}

}  // namespace isohost::binding
