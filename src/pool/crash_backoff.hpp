#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace isohost::pool {

// Bounded back-off for an environment whose workers keep failing (crash, timeout, protocol
// error, failed start). The first failures restart at once, since a single crash is usually
// the caller's input; from the `free_failures`-th failure in a row, restarts wait 1 s, 2 s,
// 4 s ... up to `max_delay`. One successful request clears the count. Time is passed in, so
// the arithmetic is tested without sleeping.
class CrashBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CrashBackoff(int free_failures = 3,
                        std::chrono::milliseconds base_delay = std::chrono::seconds(1),
                        std::chrono::milliseconds max_delay = std::chrono::seconds(30))
      : free_failures_(free_failures), base_delay_(base_delay), max_delay_(max_delay) {}

  void record_failure(Clock::time_point now, std::string reason);
  void record_success() { failures_ = 0; }

  // When a start must wait: a message for the caller saying so; nullopt when it may start.
  [[nodiscard]] std::optional<std::string> refusal(Clock::time_point now,
                                                   const std::string& env_name) const;

  [[nodiscard]] int consecutive_failures() const { return failures_; }
  [[nodiscard]] std::chrono::milliseconds current_delay() const;

 private:
  int free_failures_;
  std::chrono::milliseconds base_delay_;
  std::chrono::milliseconds max_delay_;
  int failures_ = 0;
  Clock::time_point last_failure_{};
  std::string last_reason_;
};

}  // namespace isohost::pool
