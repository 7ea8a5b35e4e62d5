#pragma once

// isohost-web's only way to the pool: one `metrics` request on the control socket per sample,
// like any client (docs/live-view.md). Nothing here can change the pool.

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace isohost::web {

// Why no sample came back, in words for a 503 body or a log line.
class HostUnavailable : public std::runtime_error {
 public:
  HostUnavailable(const std::string& message, bool gone)
      : std::runtime_error(message), gone_(gone) {}
  // True when nothing listens on the socket any more (no such file, or connection refused):
  // the host has ended, as opposed to a host that answered badly or slowly.
  [[nodiscard]] bool gone() const { return gone_; }

 private:
  bool gone_;
};

// The value of {"op": "metrics"}: {"status": <ps>, "sample_age_seconds", "uptime_seconds",
// "envs": {...}}. Blocking. Throws HostUnavailable when the host cannot be reached or answers
// with an error or something that is not an object.
nlohmann::ordered_json fetch_metrics(const std::string& socket_path);

// True when nothing listens on the socket (no such file, or connection refused): the host has
// ended. False while a host accepts, even one that answers slowly.
bool host_gone(const std::string& socket_path);

}  // namespace isohost::web
