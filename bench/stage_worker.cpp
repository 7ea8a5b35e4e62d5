#include "stage_worker.hpp"

namespace isohost::bench {

pool::Config stage_worker_config(const BenchOptions& options) {
  pool::Config config;
  config.host.idle_reap = std::chrono::milliseconds(0);
  config.host.idle_release = std::chrono::milliseconds(0);
  config.environments[kStageEnv] =
      pool::EnvironmentConfig{.name = kStageEnv, .python = options.python};
  return config;
}

nlohmann::ordered_json stage(pool::Pool& pool, const std::string& function,
                             nlohmann::ordered_json args) {
  return pool.call(kStageEnv, "isohost_worker.stages:" + function, std::move(args)).get();
}

}  // namespace isohost::bench
