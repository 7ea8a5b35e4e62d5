#pragma once

// What happened in one environment since the host started, for `isohost top`, the metrics
// endpoint and the page (docs/live-view.md): counters and duration histograms kept on the loop
// thread, whatever worker generation did the work. Pure bookkeeping: no clock of its own, no
// I/O, so the arithmetic is tested without processes.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace isohost::pool {

// Seconds in fixed buckets, as Prometheus histograms count them: cumulative counts per upper
// bound, with the overall count standing for +Inf.
class DurationHistogram {
 public:
  // From half a millisecond (a warm call's trip) to two minutes (a cold start of torch, a
  // hibernation of a large model through the driver).
  static constexpr std::array<double, 16> kBounds{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};

  // A negative or non-finite figure is a bug upstream; it is counted as zero, never dropped,
  // so the count still matches the counter beside it.
  void observe(double seconds);
  [[nodiscard]] std::uint64_t count() const { return count_; }
  [[nodiscard]] double sum() const { return sum_; }
  // {"buckets": [[bound, cumulative count], ...], "count": N, "sum": S}
  [[nodiscard]] nlohmann::ordered_json to_json() const;

 private:
  std::array<std::uint64_t, kBounds.size()> in_bucket_{};  // not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// The last thing admission did to an environment's worker to make room for another.
struct AdmissionAction {
  std::string action;  // "released", "slept", "hibernated" or "reaped"
  std::string for_env;
  std::chrono::steady_clock::time_point at;
};

struct EnvMetrics {
  std::uint64_t calls = 0;        // answered by a worker, with a value or the function's error
  std::uint64_t call_errors = 0;  // of those, the ones that failed (raised, crashed, timed out)
  std::uint64_t crashes = 0;      // workers that ended without being asked to
  std::uint64_t starts = 0;       // workers that said hello
  std::uint64_t releases = 0;
  std::uint64_t sleeps = 0;  // workers that moved their models into their host RAM
  std::uint64_t hibernations = 0;
  std::uint64_t wakes = 0;     // from sleep or hibernation
  std::uint64_t reaps = 0;     // workers retired: asked, idle, RAM pressure or admission
  std::uint64_t refusals = 0;  // VRAM admissions refused to this environment
  DurationHistogram call_seconds;
  DurationHistogram start_seconds;  // from spawn or fork to hello
  DurationHistogram sleep_seconds;  // the `sleep` request, as the host timed it
  DurationHistogram hibernate_seconds;
  DurationHistogram wake_seconds;
  std::optional<AdmissionAction> last_admission;

  [[nodiscard]] nlohmann::ordered_json to_json(std::chrono::steady_clock::time_point now) const;
};

}  // namespace isohost::pool
