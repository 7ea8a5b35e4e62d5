// The pool's side of the RAM pressure sweep (ram_pressure_sweep.hpp keeps its rhythm): the
// books come from /proc (read on the sampling thread), the decision from
// memory::plan_ram_relief, the reaps from the pool.

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "memory/ram_relief.hpp"
#include "pool/memory_snapshot.hpp"
#include "pool/pool.hpp"
#include "probe/probe_error.hpp"
#include "probe/proc_status.hpp"

namespace isohost::pool {
namespace {

PressureReading read_pressure(const std::vector<pid_t>& workers, std::uint64_t budget,
                              std::uint64_t floor) {
  PressureReading out;
  try {
    out.system = probe::read_system_memory();
  } catch (const probe::ProbeError& e) {
    out.error = e.what();
    return out;
  }
  // RSS bounds PSS from above and costs a fraction of smaps_rollup: read PSS only when the
  // cheap figures say a limit may be broken.
  std::uint64_t rss_sum = 0;
  for (pid_t pid : workers) {
    try {
      rss_sum += probe::read_rss_counters(pid).rss;
    } catch (const probe::ProbeError&) {
    }
  }
  const bool over_budget = budget != 0 && rss_sum > budget;
  const bool under_floor = floor != 0 && out.system->available < floor;
  if (!over_budget && !under_floor) return out;
  for (pid_t pid : workers) {
    try {
      const auto footprint = probe::read_footprint(pid);
      out.pss[pid] = footprint.pss - std::min(footprint.lazy_free, footprint.pss);
    } catch (const probe::ProbeError&) {
      // Gone since the first pass: it holds nothing any more.
    }
  }
  return out;
}

}  // namespace

RamPressureSweep::Read Pool::pressure_reading() {
  return [this](std::function<void(PressureReading)> done) {
    std::vector<pid_t> workers;
    std::map<pid_t, LoopClock::time_point> at_rest_since;
    for (const auto& [name, slot] : slots_) {
      if (!slot.worker) continue;
      workers.push_back(slot.worker->pid());
      if (at_rest(memory_state(slot.worker->state()))) {
        at_rest_since[slot.worker->pid()] = slot.idle->since;
      }
    }
    sampling_.run<PressureReading>(
        [workers, at_rest_since = std::move(at_rest_since), budget = config_.host.ram_budget,
         floor = config_.host.ram_floor](MemorySampler&) {
          auto reading = read_pressure(workers, budget, floor);
          reading.at_rest_since = at_rest_since;
          return reading;
        },
        std::move(done));
  };
}

void Pool::relieve_ram_pressure(const PressureReading& reading) {
  const auto& pss = reading.pss;
  if (pss.empty()) return;  // no limit broken, or no worker left to read
  memory::RamLedger ram{.mem_total = reading.system->total,
                        .available = reading.system->available,
                        .budget = config_.host.ram_budget,
                        .floor = config_.host.ram_floor};
  for (const auto& [name, slot] : slots_) {
    if (!slot.worker) continue;
    const pid_t pid = slot.worker->pid();
    const auto it = pss.find(pid);
    if (it == pss.end()) continue;  // started since the sample, or gone
    const auto rest = reading.at_rest_since.find(pid);
    std::optional<LoopClock::time_point> at_rest_since;
    if (rest != reading.at_rest_since.end()) at_rest_since = rest->second;
    const auto state =
        state_for_relief(memory_state(slot.worker->state()), slot.idle->since, at_rest_since);
    ram.holdings.push_back({.worker_id = name,
                            .pid = pid,
                            .state = state,
                            .last_used = slot.idle->since,
                            .pss = it->second,
                            .kept = slot.kept});
  }
  const auto plan = memory::plan_ram_relief(ram);
  if (!plan.needed) return;
  spdlog::warn("RAM pressure: {}", plan.explain());
  for (const auto& reap : plan.reaps) {
    auto it = slots_.find(reap.worker_id);
    if (it == slots_.end() || !it->second.worker || it->second.worker->pid() != reap.pid) continue;
    retire(it->second, fmt::format("reaped for RAM pressure ({:.0f} MB)", reap.gives_back / 1e6));
  }
}

}  // namespace isohost::pool
