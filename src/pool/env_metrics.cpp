#include "pool/env_metrics.hpp"

#include <algorithm>
#include <cmath>

namespace isohost::pool {

void DurationHistogram::observe(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  ++count_;
  sum_ += seconds;
  const auto* bound = std::lower_bound(kBounds.begin(), kBounds.end(), seconds);
  if (bound != kBounds.end()) ++in_bucket_[static_cast<std::size_t>(bound - kBounds.begin())];
}

nlohmann::ordered_json DurationHistogram::to_json() const {
  auto buckets = nlohmann::ordered_json::array();
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += in_bucket_[i];
    buckets.push_back({kBounds[i], cumulative});
  }
  return {{"buckets", std::move(buckets)}, {"count", count_}, {"sum", sum_}};
}

nlohmann::ordered_json EnvMetrics::to_json(std::chrono::steady_clock::time_point now) const {
  nlohmann::ordered_json admission;
  if (last_admission) {
    admission = {{"action", last_admission->action},
                 {"for", last_admission->for_env},
                 {"seconds_ago", std::chrono::duration<double>(now - last_admission->at).count()}};
  }
  return {{"calls", calls},
          {"call_errors", call_errors},
          {"crashes", crashes},
          {"starts", starts},
          {"releases", releases},
          {"sleeps", sleeps},
          {"hibernations", hibernations},
          {"wakes", wakes},
          {"reaps", reaps},
          {"refusals", refusals},
          {"histograms",
           {{"call_seconds", call_seconds.to_json()},
            {"start_seconds", start_seconds.to_json()},
            {"sleep_seconds", sleep_seconds.to_json()},
            {"hibernate_seconds", hibernate_seconds.to_json()},
            {"wake_seconds", wake_seconds.to_json()}}},
          {"last_admission", std::move(admission)}};
}

}  // namespace isohost::pool
