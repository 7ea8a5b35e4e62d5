#pragma once
// The books: one ledger per GPU and one for host RAM, built from a Snapshot.
//
// A device ledger splits what each worker holds by what gives it back:
//   reclaimable  the allocator's cache (reserved - allocated) plus what the worker's
//                `release` drops; `release` gives it back, the worker lives on;
//   held         allocations in use (models, tensors); hibernate or reap gives it back;
//   fixed        the CUDA context (VRAM used - allocator reserved); hibernate or reap only.
// and says how much can be promised now: free - reserve - pending, never negative. Memory
// held by processes isohost does not manage (foreign) is never free and never reclaimable.
//
// A hibernated worker holds 0 VRAM; its host RAM has grown by what it took off the card. An
// asleep worker's torch storages are in its host RAM: what it still holds is its context and
// what sleep could not move, nearly all of it counted fixed.
//
//   Ledger ledger = build_ledger(snapshot);
//   if (const DeviceLedger* gpu = ledger.device(0)) log(mib_text(gpu->grantable()));

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/snapshot.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

// One worker's VRAM on its device, split by what gives it back; used() = fixed + held +
// reclaimable. When NVML could not attribute the worker's VRAM, the figures are a lower
// bound (what its allocator reports), so no plan counts on bytes it cannot see.
struct VramHolding {
  std::string worker_id{};
  std::int32_t pid = 0;
  WorkerState state = WorkerState::idle;
  TimePoint last_used{};
  HibernationSupport hibernation{};
  bool vram_known = true;       // false: NVML gave no figure; the split is a lower bound
  bool allocator_known = true;  // false: no worker report, so all of it is counted fixed
  Bytes fixed = 0;
  Bytes held = 0;
  Bytes reclaimable = 0;
  bool can_sleep = false;              // ProcessFigures::can_sleep
  bool kept = false;                   // ProcessFigures::kept: never reaped
  Bytes slept_bytes = 0;               // in its host RAM already (ProcessFigures::slept_bytes)
  std::optional<Duration> start_time;  // its environment's mean start-to-ready, if seen

  constexpr Bytes used() const noexcept { return fixed + held + reclaimable; }
  // What stays on the card after `release`: all that hibernate would move, or reap free.
  constexpr Bytes after_release() const noexcept { return fixed + held; }
  // Whether a sleep can take its allocations off the card now: its runtime can sleep and it
  // is idle (an asleep worker has already moved all that sleep can).
  constexpr bool sleeps_now() const noexcept { return can_sleep && state == WorkerState::idle; }
  // What a hibernation moves into host RAM. An idle worker is released first, so its cache is
  // dropped rather than moved; an asleep one is never released, so the driver takes it all.
  constexpr Bytes hibernation_moves() const noexcept {
    return state == WorkerState::asleep ? used() : after_release();
  }
  // Of that, what its sleep moves first at bus speed (its allocations); the driver's
  // checkpoint moves the rest (the context, and all of it for a worker that cannot sleep).
  constexpr Bytes hibernation_by_sleep() const noexcept { return sleeps_now() ? held : 0; }
  constexpr Bytes hibernation_by_driver() const noexcept {
    return hibernation_moves() - hibernation_by_sleep();
  }
};

// One GPU's books.
struct DeviceLedger {
  int device = 0;
  Bytes total = 0;
  Bytes free = 0;                       // NVML free, never more than total - foreign
  Bytes foreign = 0;                    // held by processes isohost does not manage
  Bytes reserve = 0;                    // kept free (MemorySettings::vram_reserve)
  Bytes pending = 0;                    // promised by grants not yet seen in use
  std::vector<VramHolding> holdings{};  // workers pinned to this device

  // What may be promised now: free - reserve - pending, never negative.
  constexpr Bytes grantable() const noexcept {
    return saturating_sub(saturating_sub(free, reserve), pending);
  }
  // The sums over holdings, as `isohost ps` shows them per device.
  Bytes workers_fixed() const noexcept;
  Bytes workers_held() const noexcept;
  Bytes workers_reclaimable() const noexcept;
  Bytes workers_used() const noexcept;
  // Used on the card but neither foreign nor attributed to a worker: the driver's own use,
  // workers whose VRAM NVML could not attribute, or figures read at different moments.
  Bytes unattributed() const noexcept;
};

// One worker's host RAM.
struct RamHolding {
  std::string worker_id{};
  std::int32_t pid = 0;
  WorkerState state = WorkerState::idle;
  TimePoint last_used{};
  Bytes pss = 0;
  Bytes hibernated_unseen = 0;  // hibernated bytes the PSS reading does not show yet
  bool kept = false;            // ProcessFigures::kept: never reaped

  constexpr Bytes held() const noexcept { return pss + hibernated_unseen; }
};

// Why (or whether) host RAM can take more bytes into workers.
enum class RamRoom {
  enough,
  exceeds_available,  // more than MemAvailable: the RAM is not there
  below_floor,        // MemAvailable would drop under ram_floor
  over_budget,        // all workers together would exceed ram_budget
};

std::string_view to_string(RamRoom room) noexcept;

// The host's RAM books.
struct RamLedger {
  Bytes mem_total = 0;
  // MemAvailable, less hibernated bytes the reading does not show yet.
  Bytes available = 0;
  Bytes budget = 0;  // 0 = none
  Bytes floor = 0;
  std::vector<RamHolding> holdings{};  // every worker, whatever its device

  Bytes workers_total() const noexcept;
  // Whether workers' RAM can grow by `extra` bytes (hibernation moving VRAM into it).
  RamRoom room_for(Bytes extra) const noexcept;
};

// All the books for one snapshot.
struct Ledger {
  TimePoint taken_at{};
  Duration admission_wait{};
  TransferRates rates{};  // what the planner prices its steps with
  std::vector<DeviceLedger> devices{};
  RamLedger ram{};

  // The device's ledger, or nullptr when the snapshot has no such device.
  const DeviceLedger* device(int index) const noexcept;
};

// Builds the books from the snapshot, with the snapshot's own pending grants.
Ledger build_ledger(const Snapshot& snapshot);
// Builds the books with `pending` in place of snapshot.pending (a GrantBook's outstanding
// grants, so the books cannot miss one).
Ledger build_ledger(const Snapshot& snapshot, std::span<const PendingGrant> pending);

// One worker's VRAM split, as the device ledger counts it (0 when hibernated).
VramHolding vram_holding(const ProcessFigures& process);

}  // namespace isohost::memory
