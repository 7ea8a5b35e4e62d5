#include "binding/idle_tells.hpp"

#include <spdlog/spdlog.h>

#include <utility>

namespace isohost::binding {

void IdleTells::push(const std::string& env, const nlohmann::ordered_json& body) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (queued_.size() >= kMaxQueued) {
      // Logged once per overflow, not once per tell: the log must not grow without end either.
      if (dropped_++ == 0) {
        spdlog::warn("worker '{}': tells dropped: {} wait for the host's handlers already", env,
                     kMaxQueued);
      }
      return;
    }
    dropped_ = 0;
    queued_.push_back(Tell{env, body});
  }
  arrived_.notify_one();
}

std::optional<std::vector<IdleTells::Tell>> IdleTells::take(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, limit, [this] { return closed_ || !queued_.empty(); });
  if (closed_) return std::nullopt;
  return std::exchange(queued_, {});
}

void IdleTells::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    queued_.clear();
  }
  arrived_.notify_all();
}

}  // namespace isohost::binding
