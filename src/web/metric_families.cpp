#include "web/metric_families.hpp"

#include <array>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "web/host_client.hpp"

namespace isohost::web {
namespace {

using json = nlohmann::ordered_json;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// The states a worker reports (worker_state_name), each a series of isohost_worker_state.
constexpr std::array<const char*, 8> kWorkerStates{
    "starting", "ready", "busy", "stopping", "hibernating", "hibernated", "waking", "asleep"};

// A family made from one field of each environment in the `metrics` answer.
struct EnvField {
  const char* key;  // in envs.NAME (counters) or envs.NAME.histograms (histograms)
  const char* name;
  const char* help;
};
constexpr std::array<EnvField, 10> kCounters{{
    {"calls", "isohost_calls_total", "Calls answered by a worker, with a value or an error."},
    {"call_errors", "isohost_call_errors_total",
     "Calls that failed: raised, crashed or timed out."},
    {"crashes", "isohost_worker_crashes_total", "Workers that ended without being asked to."},
    {"starts", "isohost_worker_starts_total", "Workers that started and said hello."},
    {"releases", "isohost_releases_total", "Releases of a worker's caches."},
    {"sleeps", "isohost_sleeps_total", "Sleeps: a worker's models moved into its RAM by itself."},
    {"hibernations", "isohost_hibernations_total",
     "Hibernations: a worker's GPU state moved into its RAM."},
    {"wakes", "isohost_wakes_total", "Wakes of an asleep or hibernated worker."},
    {"reaps", "isohost_reaps_total", "Workers ended by the host: asked, idle, RAM or admission."},
    {"refusals", "isohost_admission_refusals_total", "VRAM admissions refused."},
}};

constexpr std::array<EnvField, 5> kHistograms{{
    {"call_seconds", "isohost_call_duration_seconds", "Time of a call, as its caller waited."},
    {"start_seconds", "isohost_worker_start_duration_seconds",
     "Time from spawn or fork to a worker's hello."},
    {"sleep_seconds", "isohost_sleep_duration_seconds",
     "Time for a worker to move its models into its RAM."},
    {"hibernate_seconds", "isohost_hibernate_duration_seconds",
     "Time to move a worker's GPU state into its RAM."},
    {"wake_seconds", "isohost_wake_duration_seconds", "Time to restore a worker's GPU state."},
}};

const json& field(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::optional<double> number(const json& object, const char* key) {
  const auto& v = field(object, key);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

// A label value from a string or a number field; empty when neither.
std::string label_text(const json& object, const char* key) {
  const auto& v = field(object, key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  return "";
}

const json& array_field(const json& object, const char* key) {
  static const json kEmpty = json::array();
  const auto& v = field(object, key);
  return v.is_array() ? v : kEmpty;
}

const json& object_field(const json& object, const char* key) {
  static const json kEmpty = json::object();
  const auto& v = field(object, key);
  return v.is_object() ? v : kEmpty;
}

class Families {
 public:
  MetricFamily& get(const char* name, const char* help, MetricType type) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(name, families_.size()).first;
      families_.push_back(MetricFamily{name, help, type, {}});
    }
    return families_[it->second];
  }

  // One gauge sample when `value` is known.
  void gauge(const char* name, const char* help, Labels labels, std::optional<double> value) {
    sample(name, help, MetricType::Gauge, std::move(labels), value);
  }

  void counter(const char* name, const char* help, Labels labels, std::optional<double> value) {
    sample(name, help, MetricType::Counter, std::move(labels), value);
  }

  // A gauge's or a counter's sample; the family is listed even when `value` is unknown.
  void sample(const char* name, const char* help, MetricType type, Labels labels,
              std::optional<double> value) {
    auto& family = get(name, help, type);
    if (!value) return;
    ClientMetric metric;
    metric.label = std::move(labels);
    (type == MetricType::Counter ? metric.counter.value : metric.gauge.value) = *value;
    family.metric.push_back(std::move(metric));
  }

  // {"buckets": [[bound, cumulative], ...], "count": N, "sum": S}; +Inf is the count.
  void histogram(const char* name, const char* help, Labels labels, const json& h) {
    auto& family = get(name, help, MetricType::Histogram);
    const auto count = number(h, "count");
    if (!count) return;
    ClientMetric metric;
    metric.label = std::move(labels);
    metric.histogram.sample_count = static_cast<std::uint64_t>(*count);
    metric.histogram.sample_sum = number(h, "sum").value_or(0);
    for (const auto& bucket : array_field(h, "buckets")) {
      if (!bucket.is_array() || bucket.size() != 2 || !bucket[0].is_number() ||
          !bucket[1].is_number()) {
        continue;
      }
      metric.histogram.bucket.push_back({.cumulative_count = bucket[1].get<std::uint64_t>(),
                                         .upper_bound = bucket[0].get<double>()});
    }
    metric.histogram.bucket.push_back({.cumulative_count = metric.histogram.sample_count,
                                       .upper_bound = std::numeric_limits<double>::infinity()});
    family.metric.push_back(std::move(metric));
  }

  // The families with at least one sample: a metric the host cannot give now (no GPU, no
  // worker yet) is absent rather than announced empty.
  std::vector<MetricFamily> take() {
    std::vector<MetricFamily> out;
    for (auto& f : families_) {
      if (!f.metric.empty()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::vector<MetricFamily> families_;
  std::map<std::string, std::size_t> index_;
};

void add_workers(Families& out, const json& status, const json& envs) {
  // Workers of each environment per state: one worker is 1 in its state; while a generation
  // stops and the next starts, two are counted, and each (env, state) stays one series.
  std::map<std::string, std::map<std::string, int>> states;
  for (const auto& [env, ignored] : envs.items()) states[env];
  for (const auto& w : array_field(status, "workers")) {
    const auto env = label_text(w, "env");
    const Labels labels{
        {"env", env}, {"generation", label_text(w, "generation")}, {"pid", label_text(w, "pid")}};
    out.gauge("isohost_worker_pss_bytes",
              "Proportional set size of a worker: its share of every page it maps.", labels,
              number(w, "pss"));
    out.gauge("isohost_worker_private_bytes",
              "A worker's private RAM: pages no other process maps, given back when it ends.",
              labels, number(w, "private"));
    out.gauge("isohost_worker_rss_bytes", "Resident set size of a worker, shared pages in full.",
              labels, number(w, "rss"));
    out.gauge("isohost_worker_vram_bytes", "GPU memory a worker holds, context included.", labels,
              number(w, "vram"));
    const auto& state = field(w, "state");
    if (state.is_string()) states[env][state.get<std::string>()] += 1;
  }
  auto& family = out.get("isohost_worker_state",
                         "Workers of an environment in each state (1 for the current one).",
                         MetricType::Gauge);
  for (const auto& [env, counts] : states) {
    for (const char* state : kWorkerStates) {
      const auto it = counts.find(state);
      ClientMetric metric;
      metric.label = {{"env", env}, {"state", state}};
      metric.gauge.value = it == counts.end() ? 0 : it->second;
      family.metric.push_back(std::move(metric));
    }
  }
}

void add_processes(Families& out, const json& status) {
  for (const auto& z : array_field(status, "zygotes")) {
    out.gauge("isohost_zygote_pss_bytes",
              "Proportional set size of a zygote, the process workers are forked from.",
              {{"env", label_text(z, "env")}, {"pid", label_text(z, "pid")}}, number(z, "pss"));
  }
  const auto& host = object_field(status, "host");
  out.gauge("isohost_host_pss_bytes", "Proportional set size of the host process.", {},
            number(host, "pss"));
  for (const auto& d : array_field(status, "devices")) {
    const Labels labels{{"device", label_text(d, "index")}, {"name", label_text(d, "name")}};
    out.gauge("isohost_device_total_bytes", "A GPU's memory.", labels, number(d, "total"));
    out.gauge("isohost_device_used_bytes", "A GPU's memory in use, by any process.", labels,
              number(d, "used"));
    out.gauge("isohost_device_free_bytes", "A GPU's free memory.", labels, number(d, "free"));
  }
  const auto& machine = object_field(status, "system_memory");
  out.gauge("isohost_machine_memory_total_bytes", "The machine's RAM (MemTotal).", {},
            number(machine, "total"));
  out.gauge("isohost_machine_memory_available_bytes",
            "RAM that can be allocated without swapping (MemAvailable).", {},
            number(machine, "available"));
}

void add_envs(Families& out, const json& envs) {
  for (const auto& c : kCounters) {
    out.get(c.name, c.help, MetricType::Counter);
    for (const auto& [env, e] : envs.items())
      out.counter(c.name, c.help, {{"env", env}}, number(e, c.key));
  }
  for (const auto& h : kHistograms) {
    out.get(h.name, h.help, MetricType::Histogram);
    for (const auto& [env, e] : envs.items()) {
      out.histogram(h.name, h.help, {{"env", env}}, field(object_field(e, "histograms"), h.key));
    }
  }
}

}  // namespace

std::vector<MetricFamily> metric_families(const json& metrics) {
  Families out;
  const auto& status = object_field(metrics, "status");
  const auto& envs = object_field(metrics, "envs");
  add_workers(out, status, envs);
  add_processes(out, status);
  add_envs(out, envs);
  out.gauge("isohost_uptime_seconds", "Time since the host started.", {},
            number(metrics, "uptime_seconds"));
  out.gauge("isohost_memory_sample_age_seconds",
            "Age of the memory figures in this scrape (the host samples at most once a second).",
            {}, number(metrics, "sample_age_seconds"));
  return out.take();
}

std::vector<MetricFamily> HostCollectable::Collect() const {
  return metric_families(fetch_metrics(socket_path_));
}

}  // namespace isohost::web
