#include <chrono>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/pool.hpp"

namespace isohost::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Reading the footprint (smaps_rollup, and NVML where there is a GPU) of 16 live workers, as
// `isohost ps` does; with `module` imported in each first, since the cost grows with the
// memory a process maps.
Figure sample_sixteen(const BenchOptions& options, const std::string& module, const std::string& name) {
  constexpr int kWorkers = 16;
  pool::Config config;
  for (int i = 0; i < kWorkers; ++i) {
    const auto env = "p" + std::to_string(i);
    config.environments[env] = pool::EnvironmentConfig{.name = env, .python = options.python};
  }
  pool::Pool pool(config, {.sweep_orphans = false});
  std::vector<std::future<nlohmann::json>> ready;
  for (int i = 0; i < kWorkers; ++i) {
    ready.push_back(module.empty() ? pool.call("p" + std::to_string(i), "os:getpid")
                                   : pool.call("p" + std::to_string(i), "isohost_worker.stages:import_module", {module}));
  }
  for (auto& f : ready) f.get();
  std::vector<pool::ProcessQuery> queries;
  for (const auto& w : pool.status().get().workers) queries.push_back({w.pid, false});
  pool::MemorySampler sampler;
  std::vector<double> samples;
  for (int i = 0; i < 50; ++i) {
    const auto start = Clock::now();
    sampler.sample(queries);
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return summarize(name, "ms", samples);
}

}  // namespace

std::vector<Figure> bench_probe(const BenchOptions& options) {
  return {sample_sixteen(options, "", "probe.16_processes"),
          sample_sixteen(options, "torch", "probe.16_processes_torch")};
}

}  // namespace isohost::bench
