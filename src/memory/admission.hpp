#pragma once
// Admission: a worker asks for N bytes on a device before a load; the plan says how to make
// room at the least cost:
//   1. grant from what is grantable now (free - reserve - pending);
//   2. otherwise choose, among the idle workers (asleep ones included), one way or none for
//      each: release (its cache), sleep (its allocations into its host RAM at bus speed),
//      hibernate (sleep, then the driver's checkpoint of the rest) or reap (end it). Each way
//      is priced in seconds: what carrying it out takes plus what the worker's next call pays
//      to undo it (step_cost.hpp, at MemorySettings::rates). The plan is the set of ways that
//      covers the shortfall at the least total price, with host RAM able to take in what its
//      sleeps and hibernations move (at or above the floor, within the budget: RamLedger's
//      rules); ties go to fewer steps, then to the least recently used worker, then its name
//      (room_search.hpp);
//   3. if even reaping every idle worker is short but busy workers hold enough to cover the
//      rest once they finish, wait (up to the bound);
//   4. otherwise refuse, with the numbers.
// Its outcome is the strongest step. The requester itself is never released, slept,
// hibernated or reaped, nor waited for.
//
// A plan is a decision, not an action: the pool carries out the steps in order, and should
// show the workers under a step as not idle to plans made meanwhile. Use admit() so the
// bytes are booked in the GrantBook at the moment they are promised.
//
//   AdmissionPlan plan = admit(snapshot, {.requester = "sdxl", .device = 0,
//                                         .bytes = mib(4096), .asked_at = asked}, book);
//   log(plan.explain());   // "need 4096 MiB on GPU 0: free 1200 MiB - reserve 512 MiB - ..."
//   for (const AdmissionStep& step : plan.steps) pool.carry_out(step);
//
// Cost: every combination up to kExhaustiveCandidates idle workers (pruned; well under a
// millisecond for a handful), a greedy pass beyond; a few small allocations per plan.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/grant_book.hpp"
#include "memory/ledger.hpp"
#include "memory/room_search.hpp"
#include "memory/snapshot.hpp"
#include "memory/step_cost.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

struct AdmissionRequest {
  std::string requester{};  // the asking worker's id
  int device = 0;
  Bytes bytes = 0;
  // When the worker first asked; unset means now (the snapshot's time). A request planned
  // again after a `wait` keeps its first time, so the wait is bounded by
  // MemorySettings::admission_wait.
  std::optional<TimePoint> asked_at{};
};

// What the requester gets; later values are stronger (costlier to undo).
enum class AdmissionOutcome {
  grant,                 // fits in what is grantable now
  release_then_grant,    // fits once idle workers release their caches
  sleep_then_grant,      // fits once idle workers are asleep (some perhaps released)
  hibernate_then_grant,  // fits once idle workers are hibernated (some perhaps released/asleep)
  reap_then_grant,       // fits once idle workers are ended (others perhaps released, asleep...)
  wait,                  // idle workers cannot make room but busy ones hold enough: plan
                         // again when one turns idle, until the wait bound runs out
  refuse,                // cannot fit even then, the wait bound ran out, or no such device
};

std::string_view to_string(AdmissionOutcome outcome) noexcept;

// One thing to do to one idle worker, with the bytes it is expected to give back and its
// price. StepKind is in step_cost.hpp.
struct AdmissionStep {
  StepKind kind = StepKind::release;
  std::string worker_id{};
  std::int32_t pid = 0;
  WorkerState state = WorkerState::idle;  // idle, or asleep
  Bytes fixed = 0;                        // the driver's part of a hibernation; a reap's context
  Bytes held = 0;          // allocations: what a sleep moves, a reap makes the worker build again
  Bytes cache = 0;         // dropped, not moved (moved only by an asleep worker's hibernation)
  bool vram_known = true;  // false: the bytes are a lower bound (NVML had no figure)
  double seconds_now = 0;  // what carrying it out takes (cost.seconds_now())
  double seconds_to_undo = 0;  // what the worker's next call pays for it (cost.seconds_to_undo())
  StepCost cost{};             // both, term by term

  constexpr Bytes gives_back() const noexcept { return fixed + held + cache; }
  // Host RAM the step moves into the worker: a sleep's allocations, a hibernation's all.
  constexpr Bytes takes_in_ram() const noexcept {
    if (kind == StepKind::sleep) return held;
    if (kind == StepKind::hibernate)
      return state == WorkerState::asleep ? gives_back() : fixed + held;
    return 0;
  }
  constexpr double seconds() const noexcept { return seconds_now + seconds_to_undo; }
};

// Why an idle worker holding VRAM was not hibernated (or not slept: the RAM reasons).
enum class HibernationBlock {
  env_disallows,      // [env.NAME] hibernate = false
  driver_lacks_api,   // no cuCheckpointProcess* in the driver (or no NVIDIA driver)
  no_cuda_context,    // nothing to checkpoint
  vram_unknown,       // NVML gave no figure: the RAM it needs cannot be checked
  exceeds_available,  // more than MemAvailable
  below_ram_floor,    // would take MemAvailable under ram_floor
  over_ram_budget,    // would take all workers' RAM over ram_budget
};

std::string_view to_string(HibernationBlock why) noexcept;

struct SkippedHibernation {
  std::string worker_id{};
  Bytes bytes = 0;  // what the passed-over step would have moved into host RAM
  HibernationBlock why = HibernationBlock::env_disallows;
  StepKind passed_over = StepKind::hibernate;  // hibernate, or sleep
};

// The decision for one request, with every figure it was made from.
struct AdmissionPlan {
  AdmissionOutcome outcome = AdmissionOutcome::refuse;
  AdmissionRequest request{};
  bool device_found = false;

  // The device's books when planned.
  Bytes free = 0;
  Bytes reserve = 0;
  Bytes pending = 0;
  Bytes foreign = 0;
  Bytes grantable = 0;

  // In order: releases, sleeps, hibernations (a worker's release first where it has a cache),
  // then reaps, each kind largest first. Empty for grant, wait and refuse.
  std::vector<AdmissionStep> steps{};
  // grantable + what the steps give back; at least request.bytes when the plan grants.
  Bytes expected = 0;
  // The other ways open to the workers the steps act on, each priced as the one step it would
  // have been (its release included), so the choice can be checked.
  std::vector<AdmissionStep> alternatives{};
  // Idle workers the choice was made among, and whether every combination was weighed
  // (kExhaustiveCandidates) or a greedy pass chose.
  std::size_t candidates = 0;
  bool searched_every_combination = true;
  TransferRates rates{};  // what the steps were priced at
  // Why each reaped worker was not hibernated (or slept) instead: the step was not open to it,
  // or host RAM could not take it in beside the plan's others. A reap merely cheaper than its
  // hibernation is not here; `alternatives` shows both prices. (A worker whose environment
  // allows hibernation, on a driver without the API, says so here.)
  std::vector<SkippedHibernation> not_hibernated{};
  // Workers on the device (besides the requester) whose VRAM NVML could not attribute; each
  // is counted at what its allocator reports, or 0.
  std::vector<std::string> vram_unknown{};

  // Host RAM when planned (what hibernation is checked against).
  Bytes ram_available = 0;
  Bytes ram_floor = 0;
  Bytes ram_budget = 0;
  Bytes ram_workers = 0;

  // Filled for wait and refuse: what every idle worker could give (all reaped) and what the
  // busy or starting ones hold.
  Bytes idle_can_give = 0;
  Bytes busy_hold = 0;
  std::vector<std::string> busy_workers{};
  Duration waited{};      // since request.asked_at
  Duration wait_bound{};  // MemorySettings::admission_wait

  // Set by admit() when it booked the grant.
  std::optional<GrantId> grant_id{};

  // Whether the requester gets its bytes (now, or once the steps are carried out).
  constexpr bool grants() const noexcept { return outcome <= AdmissionOutcome::reap_then_grant; }
  // request.bytes - grantable, or 0.
  constexpr Bytes short_by() const noexcept { return saturating_sub(request.bytes, grantable); }
  // Bytes the hibernate steps move into host RAM.
  Bytes hibernated_bytes() const noexcept;
  // Bytes the sleep steps move into host RAM.
  Bytes slept_bytes() const noexcept;
  // Both: what host RAM must take in (checked against MemAvailable, the floor and budget).
  Bytes ram_taken_in() const noexcept;
  // The steps' prices summed.
  double seconds_now() const noexcept;
  double seconds_to_undo() const noexcept;
  // The arithmetic in words and MiB, for logs and for the worker's refusal message.
  std::string explain() const;
};

// Plans `request` against the books. Pure: same ledger and request, same plan.
AdmissionPlan plan_admission(const Ledger& ledger, const AdmissionRequest& request);
// Builds the books from `snapshot` (with snapshot.pending) and plans.
AdmissionPlan plan_admission(const Snapshot& snapshot, const AdmissionRequest& request);

// Plans against the book's outstanding grants (snapshot.pending is ignored) and, when the
// plan grants, books request.bytes at snapshot.taken_at and sets plan.grant_id. The way the
// host's loop decides admissions: one call per request, one at a time, so two requests are
// never promised the same bytes.
AdmissionPlan admit(const Snapshot& snapshot, const AdmissionRequest& request, GrantBook& book);

}  // namespace isohost::memory
