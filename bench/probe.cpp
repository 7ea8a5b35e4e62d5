#include <chrono>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "elapsed.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/pool.hpp"
#include "probe/proc_status.hpp"

namespace isohost::bench {
namespace {

// Reading the footprint (smaps_rollup, and NVML where there is a GPU) of 16 live workers, as
// `isohost ps` does, beside the cheapest per-process read of the same pids; with `module` imported in each first, since the cost grows with the
// memory a process maps.
Figure sample_sixteen(const BenchOptions& options, const std::string& module, const std::string& name) {
  constexpr int kWorkers = 16;
  pool::Config config;
  for (int i = 0; i < kWorkers; ++i) {
    const auto env = "p" + std::to_string(i);
    config.environments[env] = pool::EnvironmentConfig{.name = env, .python = options.python};
  }
  pool::Pool pool(config, {.sweep_orphans = false});
  std::vector<std::future<nlohmann::ordered_json>> ready;
  for (int i = 0; i < kWorkers; ++i) {
    ready.push_back(module.empty() ? pool.call("p" + std::to_string(i), "os:getpid")
                                   : pool.call("p" + std::to_string(i), "isohost_worker.stages:import_module", {module}));
  }
  for (auto& f : ready) f.get();
  std::vector<pool::ProcessQuery> queries;
  for (const auto& w : pool.status().get().workers) queries.push_back({w.pid, false});
  pool::MemorySampler sampler;
  std::vector<double> samples;
  std::vector<double> floor_samples;
  for (int i = 0; i < 50; ++i) {
    auto start = Clock::now();
    sampler.sample(queries);
    samples.push_back(elapsed<std::milli>(start));
    // The floor: the kernel's cheapest per-process read, /proc/PID/status, for the same pids.
    start = Clock::now();
    for (const auto& q : queries) probe::read_rss_counters(q.pid);
    floor_samples.push_back(elapsed<std::milli>(start));
  }
  auto figure = summarize(name, "ms", samples);
  figure.limit = summarize("", "ms", floor_samples).median;
  figure.limit_name = "16 x /proc/PID/status";
  return figure;
}

}  // namespace

std::vector<Figure> bench_probe(const BenchOptions& options) {
  return {sample_sixteen(options, "", "probe.16_processes"),
          sample_sixteen(options, "torch", "probe.16_processes_torch")};
}

}  // namespace isohost::bench
