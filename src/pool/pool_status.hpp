#pragma once

// What the pool says about itself: per worker and for the whole host, with memory when it was
// measured (Pool::status_with_memory), and for the live view (Pool::metrics). Rendered as JSON
// in control/status_json.hpp.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/snapshot.hpp"
#include "pool/env_metrics.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/zygote.hpp"
#include "probe/meminfo.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

// What a hibernated worker moved off the card, for ps and the admission ledger.
struct Hibernation {
  worker::Worker::Clock::time_point since;
  // What the driver moved: the worker's VRAM just before its checkpoint (NVML), after its sleep
  // (so the context and what sleep left); nullopt where NVML cannot see it.
  std::optional<std::uint64_t> vram_moved;
  // All it had on the card before: what its sleep moved and what the driver moved.
  std::optional<std::uint64_t> vram_before;
  // How much its RSS grew, the sleep's part included: the host RAM the GPU state now takes.
  std::optional<std::uint64_t> ram_grown;
  double seconds = 0;  // the driver's part; a sleep before it is timed in Sleep
  // Why the worker did not sleep first, so that the driver moved its models too (no torch, a
  // CUDA graph alive, the sleep failed); empty when it slept, and the driver moved what was left.
  std::string driver_only_because;
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

// What a worker's sleep moved into its own host RAM (docs/sleep.md), for ps, the admission of
// its wake and the planner's rates. Kept while it is asleep, and while it is hibernated after
// a sleep (the driver then moved only what was left on the card).
struct Sleep {
  worker::Worker::Clock::time_point since;
  std::uint64_t bytes = 0;  // torch storages moved, as the worker counted them
  std::uint64_t storages = 0;
  // What stayed on the card (not resizable, not torch's): its context holds it.
  std::uint64_t left_on_card = 0;
  double seconds = 0;  // the worker's whole sleep, as it timed it
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

struct WorkerStatus {
  std::string env;
  pid_t pid = -1;
  unsigned generation = 0;
  std::string state;
  worker::WorkerState worker_state = worker::WorkerState::starting;
  // The GPU it is booked on ([env.NAME] device, else 0).
  unsigned device = 0;
  double idle_seconds = 0;
  std::uint64_t calls = 0;
  worker::Worker::Clock::time_point spawned_at;
  std::optional<worker::Worker::Clock::time_point> ready_at;
  nlohmann::ordered_json hello;
  // Filled by status_with_memory: measured from outside, and the worker's own report.
  std::optional<ProcessMemory> memory;
  nlohmann::ordered_json report;
  // PSS when the worker said hello: the interpreter and its imports, its fixed RAM cost.
  std::optional<std::uint64_t> pss_at_ready;
  // Set while the worker is hibernated.
  std::optional<Hibernation> hibernation;
  // Set while its models are in its host RAM (asleep, or hibernated after a sleep).
  std::optional<Sleep> sleep;
  // Its environment's mean start to hello so far, what a reap's undo waits first; none yet: unset.
  std::optional<double> mean_start_seconds;
  // [env.NAME] hibernate.
  bool hibernate_allowed = true;
  // Its environment is kept (Request::Kind::keep): never reaped for admission, RAM or idleness.
  bool kept = false;
  // "zygote" when forked from its environment's zygote (zygote_pid), "spawn" when started fresh.
  std::string origin = "spawn";
  pid_t zygote_pid = -1;
};

struct PoolStatus {
  pid_t host_pid = -1;
  std::vector<WorkerStatus> workers;
  // One per environment with `preload`.
  std::vector<ZygoteStatus> zygotes;
  // With memory: the host process itself (it holds no CUDA context), the devices, the
  // machine's RAM, and the books made from them all (with the grants pending).
  std::optional<ProcessMemory> host_memory;
  std::vector<DeviceMemory> devices;
  std::string gpu_unavailable_reason;
  std::optional<probe::SystemMemory> system_memory;
  std::optional<memory::Snapshot> snapshot;
  // What sleeps, wakes and the driver took per GiB on this machine so far (the planner's prices).
  memory::TransferRates rates;
};

// The pool's state for the live view (`isohost top`, the metrics endpoint, the page): the status
// with memory from a recent sample, and what each environment has done since the host started.
struct PoolMetrics {
  PoolStatus status;
  // How old the memory figures are: a scrape walks no smaps_rollup younger than its max_age.
  double sample_age_seconds = 0;
  double uptime_seconds = 0;
  // RAM pressure sweeps done (ram_budget_mb or ram_floor_mb set), whatever they found.
  std::uint64_t ram_sweeps = 0;
  // Every configured environment, whether or not a worker runs.
  std::map<std::string, EnvMetrics> envs;
  std::chrono::steady_clock::time_point taken_at;
};

}  // namespace isohost::pool
