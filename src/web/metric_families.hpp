#pragma once

// The Prometheus view of one `metrics` answer (docs/live-view.md, "Metrics"): gauges of memory
// per worker, zygote, host and device, counters and duration histograms per environment.
//
//   HostCollectable host(socket);
//   auto families = host.Collect();   // one control request; throws HostUnavailable
//   prometheus::TextSerializer().Serialize(out, families);
//
// Names follow Prometheus's conventions: base units (bytes, seconds), counters end in _total,
// labels env, generation, pid, state, device. A figure the host does not know (null, as for a
// worker still starting) gives no sample rather than a made-up 0.

#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <nlohmann/json.hpp>

namespace isohost::web {

// Pure: the families for one answer ({"status", "envs", "uptime_seconds", ...}). Fields that are
// missing or of the wrong type are left out, never thrown on.
std::vector<prometheus::MetricFamily> metric_families(const nlohmann::ordered_json& metrics);

// A Collectable that asks the host once per Collect(), so each scrape is one control request
// (the host serves memory figures from a sample at most a second old).
class HostCollectable : public prometheus::Collectable {
 public:
  explicit HostCollectable(std::string socket_path) : socket_path_(std::move(socket_path)) {}
  // Throws HostUnavailable (web/host_client.hpp).
  [[nodiscard]] std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string socket_path_;
};

}  // namespace isohost::web
