#include "memory/ledger.hpp"

#include <algorithm>

namespace isohost::memory {

namespace {

// The allocator's figures made consistent with each other and with NVML: reserved never
// above used, allocated never above reserved. Reports and NVML are read at different
// moments; clamping keeps fixed + held + reclaimable equal to what NVML saw.
struct AllocatorSplit {
  Bytes reserved = 0;
  Bytes allocated = 0;
};

AllocatorSplit clamped_allocator(const ProcessFigures& process, Bytes used) {
  const Bytes reserved = std::min(process.allocator_reserved.value_or(0), used);
  const Bytes allocated = std::min(process.allocator_allocated.value_or(reserved), reserved);
  return {reserved, allocated};
}

// What NVML's figure is, or the least the worker certainly holds when NVML has none.
Bytes used_or_lower_bound(const ProcessFigures& process) {
  if (process.vram_used) return *process.vram_used;
  return process.allocator_reserved.value_or(0);
}

template <typename Range, typename Field>
Bytes sum_of(const Range& range, Field field) noexcept {
  Bytes sum = 0;
  for (const auto& item : range) sum += field(item);
  return sum;
}

RamHolding ram_holding(const ProcessFigures& process) {
  const bool unseen = process.state == WorkerState::hibernated && !process.pss_counts_hibernated;
  return {.worker_id = process.worker_id,
          .pid = process.pid,
          .state = process.state,
          .last_used = process.last_used,
          .pss = process.pss,
          .hibernated_unseen = unseen ? process.hibernated_bytes : 0,
          .kept = process.kept};
}

DeviceLedger device_ledger(const DeviceFigures& figures, const Snapshot& snapshot,
                           std::span<const PendingGrant> pending) {
  DeviceLedger ledger{
      .device = figures.index,
      .total = figures.total,
      .free = std::min(figures.free, saturating_sub(figures.total, figures.foreign)),
      .foreign = figures.foreign,
      .reserve = snapshot.settings.vram_reserve};
  for (const PendingGrant& grant : pending) {
    if (grant.device == figures.index) ledger.pending += grant.bytes;
  }
  for (const ProcessFigures& process : snapshot.processes) {
    if (process.device == figures.index) ledger.holdings.push_back(vram_holding(process));
  }
  return ledger;
}

RamLedger ram_ledger(const Snapshot& snapshot) {
  RamLedger ledger{.mem_total = snapshot.host_ram.mem_total,
                   .budget = snapshot.settings.ram_budget,
                   .floor = snapshot.settings.ram_floor};
  ledger.holdings.reserve(snapshot.processes.size());
  Bytes unseen = 0;
  for (const ProcessFigures& process : snapshot.processes) {
    ledger.holdings.push_back(ram_holding(process));
    unseen += ledger.holdings.back().hibernated_unseen;
  }
  ledger.available = saturating_sub(snapshot.host_ram.mem_available, unseen);
  return ledger;
}

}  // namespace

VramHolding vram_holding(const ProcessFigures& process) {
  VramHolding holding{.worker_id = process.worker_id,
                      .pid = process.pid,
                      .state = process.state,
                      .last_used = process.last_used,
                      .hibernation = process.hibernation,
                      .vram_known = process.vram_used.has_value(),
                      .allocator_known = process.allocator_reserved.has_value(),
                      .can_sleep = process.can_sleep,
                      .kept = process.kept,
                      .slept_bytes = process.slept_bytes,
                      .start_time = process.start_time};
  if (process.state == WorkerState::hibernated) return holding;
  const Bytes used = used_or_lower_bound(process);
  const AllocatorSplit allocator = clamped_allocator(process, used);
  const Bytes dropped_by_release = std::min(process.release_can_free, allocator.allocated);
  holding.fixed = used - allocator.reserved;
  holding.held = allocator.allocated - dropped_by_release;
  holding.reclaimable = (allocator.reserved - allocator.allocated) + dropped_by_release;
  return holding;
}

Bytes DeviceLedger::workers_fixed() const noexcept {
  return sum_of(holdings, [](const VramHolding& h) { return h.fixed; });
}

Bytes DeviceLedger::workers_held() const noexcept {
  return sum_of(holdings, [](const VramHolding& h) { return h.held; });
}

Bytes DeviceLedger::workers_reclaimable() const noexcept {
  return sum_of(holdings, [](const VramHolding& h) { return h.reclaimable; });
}

Bytes DeviceLedger::workers_used() const noexcept {
  return sum_of(holdings, [](const VramHolding& h) { return h.used(); });
}

Bytes DeviceLedger::unattributed() const noexcept {
  return saturating_sub(saturating_sub(saturating_sub(total, free), foreign), workers_used());
}

std::string_view to_string(RamRoom room) noexcept {
  switch (room) {
    case RamRoom::enough:
      return "enough";
    case RamRoom::exceeds_available:
      return "more than MemAvailable";
    case RamRoom::below_floor:
      return "below the RAM floor";
    case RamRoom::over_budget:
      return "over the RAM budget";
  }
  return "unknown";
}

Bytes RamLedger::workers_total() const noexcept {
  return sum_of(holdings, [](const RamHolding& h) { return h.held(); });
}

RamRoom RamLedger::room_for(Bytes extra) const noexcept {
  if (extra > available) return RamRoom::exceeds_available;
  if (available - extra < floor) return RamRoom::below_floor;
  if (budget != 0 && workers_total() + extra > budget) return RamRoom::over_budget;
  return RamRoom::enough;
}

const DeviceLedger* Ledger::device(int index) const noexcept {
  const auto found = std::find_if(devices.begin(), devices.end(),
                                  [index](const DeviceLedger& d) { return d.device == index; });
  return found == devices.end() ? nullptr : &*found;
}

Ledger build_ledger(const Snapshot& snapshot) { return build_ledger(snapshot, snapshot.pending); }

Ledger build_ledger(const Snapshot& snapshot, std::span<const PendingGrant> pending) {
  Ledger ledger{.taken_at = snapshot.taken_at,
                .admission_wait = snapshot.settings.admission_wait,
                .rates = snapshot.settings.rates,
                .ram = ram_ledger(snapshot)};
  ledger.devices.reserve(snapshot.devices.size());
  for (const DeviceFigures& figures : snapshot.devices) {
    ledger.devices.push_back(device_ledger(figures, snapshot, pending));
  }
  return ledger;
}

}  // namespace isohost::memory
