#include "web/status_history.hpp"

namespace isohost::web {
namespace {

using json = nlohmann::ordered_json;

// The field's value when `object` is an object that has it, else null.
json value_of(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? json() : *it;
}

json list_of(const json& object, const char* key) {
  auto v = value_of(object, key);
  return v.is_array() ? v : json::array();
}

json pick(const json& from, std::initializer_list<const char*> keys) {
  json out = json::object();
  for (const char* key : keys) out[key] = value_of(from, key);
  return out;
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(); }

}  // namespace

json StatusHistory::point(const json& metrics, double unix_seconds) {
  const auto status = value_of(metrics, "status");
  json out{{"t", unix_seconds},
           {"workers", json::array()},
           {"zygotes", json::array()},
           {"devices", json::array()},
           {"host_pss", value_of(value_of(status, "host"), "pss")}};
  for (const auto& w : list_of(status, "workers")) {
    out["workers"].push_back(pick(w, {"env", "pid", "generation", "pss", "vram"}));
  }
  for (const auto& z : list_of(status, "zygotes")) {
    out["zygotes"].push_back(pick(z, {"env", "pid", "pss"}));
  }
  for (const auto& d : list_of(status, "devices")) {
    out["devices"].push_back(pick(d, {"index", "name", "total", "used", "free"}));
  }
  return out;
}

void StatusHistory::record(json metrics, double unix_seconds) {
  auto p = point(metrics, unix_seconds);
  std::lock_guard lock(mutex_);
  latest_ = std::move(metrics);
  latest_at_ = unix_seconds;
  error_.reset();
  error_at_.reset();
  points_.push_back(std::move(p));
  while (points_.size() > capacity_) points_.pop_front();
}

void StatusHistory::record_failure(std::string reason, double unix_seconds) {
  std::lock_guard lock(mutex_);
  error_ = std::move(reason);
  error_at_ = unix_seconds;
}

json StatusHistory::to_json(double since) const {
  std::lock_guard lock(mutex_);
  json history = json::array();
  for (const auto& p : points_) {
    if (p["t"].get<double>() > since) history.push_back(p);
  }
  return {{"latest", latest_},
          {"latest_at", optional_number(latest_at_)},
          {"error", error_ ? json(*error_) : json()},
          {"error_at", optional_number(error_at_)},
          {"interval_seconds", interval_seconds_},
          {"capacity", capacity_},
          {"history", std::move(history)}};
}

}  // namespace isohost::web
