#pragma once

// What the page shows (`GET /api/status`): the latest `metrics` answer, or why there is none,
// and a point per sample for the last minutes, kept by isohost-web while it runs (the host
// keeps no history). Thread-safe: the sampler records, the HTTP threads read.
//
//   StatusHistory history(600, 1.0);
//   history.record(fetch_metrics(socket), now_unix_seconds());
//   history.to_json(since);   // {"latest": ..., "history": [points after `since`], ...}

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace isohost::web {

class StatusHistory {
 public:
  // Keeps at most `capacity` points, one every `interval_seconds` (600 at 1: ten minutes).
  StatusHistory(std::size_t capacity, double interval_seconds)
      : capacity_(capacity), interval_seconds_(interval_seconds) {}

  // A sample taken at `unix_seconds`: it becomes the latest, and its point joins the history.
  void record(nlohmann::ordered_json metrics, double unix_seconds);
  // A sample that failed: the latest answer stays (the page shows it as stale, with the reason),
  // and no point is added for that second.
  void record_failure(std::string reason, double unix_seconds);

  // {"latest": answer or null, "latest_at": t or null, "error": reason or null, "error_at",
  //  "interval_seconds", "capacity", "history": [points with t > since, oldest first]}.
  [[nodiscard]] nlohmann::ordered_json to_json(double since) const;

  // Pure: the point kept for one answer, RAM and VRAM per worker, zygote, host and device:
  // {"t", "workers": [{"env", "pid", "generation", "pss", "vram"}], "zygotes": [{"env", "pid",
  //  "pss"}], "host_pss", "devices": [{"index", "name", "total", "used", "free"}]}.
  // Unknown figures are null.
  static nlohmann::ordered_json point(const nlohmann::ordered_json& metrics, double unix_seconds);

 private:
  std::size_t capacity_;
  double interval_seconds_;
  mutable std::mutex mutex_;
  nlohmann::ordered_json latest_;
  std::optional<double> latest_at_;
  std::optional<std::string> error_;
  std::optional<double> error_at_;
  std::deque<nlohmann::ordered_json> points_;
};

}  // namespace isohost::web
