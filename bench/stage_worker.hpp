#pragma once

// The one-environment pool the GPU benches drive (bench hibernate, bench sleep): a worker that is
// never released or reaped behind the bench's back, and the stages it runs
// (python/isohost_worker/stages.py).

#include <string>

#include <nlohmann/json.hpp>

#include "benchmarks.hpp"
#include "pool/pool.hpp"

namespace isohost::bench {

// The environment the stage worker runs in.
inline constexpr const char* kStageEnv = "bench";

// A config with kStageEnv on options.python, idle release and reap off.
pool::Config stage_worker_config(const BenchOptions& options);

// Runs isohost_worker.stages:`function` in kStageEnv's worker and returns its value.
nlohmann::ordered_json stage(pool::Pool& pool, const std::string& function,
                             nlohmann::ordered_json args = nlohmann::ordered_json::array());

}  // namespace isohost::bench
