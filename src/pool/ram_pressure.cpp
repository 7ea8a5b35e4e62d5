// The pool's RAM pressure sweep: the books come from /proc, the decision from
// memory::plan_ram_relief, the reaps from the pool.

#include <spdlog/spdlog.h>

#include "memory/ram_relief.hpp"
#include "pool/memory_snapshot.hpp"
#include "pool/pool.hpp"
#include "probe/meminfo.hpp"
#include "probe/probe_error.hpp"
#include "probe/proc_status.hpp"

namespace isohost::pool {

void Pool::arm_pressure_check() {
  if (config_.host.ram_budget == 0 && config_.host.ram_floor == 0) return;
  pressure_timer_.expires_after(options_.pressure_interval);
  pressure_timer_.async_wait([this](const asio::error_code& ec) {
    if (ec || phase_ != Phase::serving) return;
    // Re-armed first: a sweep that fails (meminfo unreadable) must not end the sweeps.
    arm_pressure_check();
    try {
      check_ram_pressure();
    } catch (const std::exception& e) {
      spdlog::warn("RAM pressure sweep skipped: {}", e.what());
    }
    ++ram_sweeps_;
  });
}

void Pool::check_ram_pressure() {
  const auto system = probe::read_system_memory();
  memory::RamLedger ram{.mem_total = system.total,
                        .available = system.available,
                        .budget = config_.host.ram_budget,
                        .floor = config_.host.ram_floor};
  // RSS bounds PSS from above and costs a fraction of smaps_rollup: read PSS only when the
  // cheap figures say a limit may be broken.
  std::uint64_t rss_sum = 0;
  for (const auto& [name, slot] : slots_) {
    if (!slot.worker) continue;
    try {
      rss_sum += probe::read_rss_counters(slot.worker->pid()).rss;
    } catch (const probe::ProbeError&) {
    }
  }
  const bool over_budget = ram.budget != 0 && rss_sum > ram.budget;
  const bool under_floor = ram.floor != 0 && ram.available < ram.floor;
  if (!over_budget && !under_floor) return;
  for (const auto& [name, slot] : slots_) {
    if (!slot.worker) continue;
    try {
      ram.holdings.push_back({.worker_id = name,
                              .pid = slot.worker->pid(),
                              .state = memory_state(slot.worker->state()),
                              .last_used = slot.idle_since,
                              .pss = probe::read_footprint(slot.worker->pid()).pss});
    } catch (const probe::ProbeError&) {
      // Gone since the first pass: it holds nothing any more.
    }
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
