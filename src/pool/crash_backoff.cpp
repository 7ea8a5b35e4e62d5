#include "pool/crash_backoff.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace isohost::pool {

void CrashBackoff::record_failure(Clock::time_point now, std::string reason) {
  ++failures_;
  last_failure_ = now;
  last_reason_ = std::move(reason);
}

std::chrono::milliseconds CrashBackoff::current_delay() const {
  if (failures_ < free_failures_) return std::chrono::milliseconds(0);
  const int doublings = std::min(failures_ - free_failures_, 30);
  const auto delay = base_delay_ * (int64_t{1} << doublings);
  return std::min<std::chrono::milliseconds>(delay, max_delay_);
}

std::optional<std::string> CrashBackoff::refusal(Clock::time_point now,
                                                 const std::string& env_name) const {
  const auto ready_at = last_failure_ + current_delay();
  if (failures_ < free_failures_ || now >= ready_at) return std::nullopt;
  const auto wait = std::chrono::duration<double>(ready_at - now).count();
  return fmt::format(
      "environment '{}' failed {} times in a row; not restarting it for another {:.1f} s "
      "(back-off {:g} s). Last failure: {}",
      env_name, failures_, wait, std::chrono::duration<double>(current_delay()).count(),
      last_reason_);
}

}  // namespace isohost::pool
