#pragma once
// Admission: a worker asks for N bytes on a device before a load; the plan says how to make
// room, in this order, stopping as soon as there is enough:
//   1. grant from what is grantable now (free - reserve - pending);
//   2. release idle workers, largest reclaimable first (their caches go, they stay warm);
//   3. hibernate idle workers that can be, largest first, only while host RAM stays at or
//      above the floor and within the budget after taking in their VRAM;
//   4. reap idle workers, largest fixed + held first, least recently used on ties;
//   5. if busy workers hold enough to cover the rest once they finish, wait (up to the bound);
//   6. otherwise refuse, with the numbers.
// A plan may combine steps (release 'a', then reap 'b'); its outcome is the strongest step.
// Steps made unnecessary by a stronger one are dropped (a release that a later reap covers).
// The requester itself is never released, hibernated or reaped, nor waited for.
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
// Cost: O(n log n) in the workers on the device; a few small allocations per plan.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/grant_book.hpp"
#include "memory/ledger.hpp"
#include "memory/snapshot.hpp"
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
  hibernate_then_grant,  // fits once idle workers are hibernated (some perhaps released)
  reap_then_grant,       // fits once idle workers are ended (others perhaps released/hibernated)
  wait,                  // idle workers cannot make room but busy ones hold enough: plan
                         // again when one turns idle, until the wait bound runs out
  refuse,                // cannot fit even then, the wait bound ran out, or no such device
};

std::string_view to_string(AdmissionOutcome outcome) noexcept;

enum class StepKind {
  release,    // ask the worker to drop caches; gives back `cache`
  hibernate,  // move its GPU state into its host RAM; gives back `fixed + held`
  reap,       // end it; gives back all it holds
};

std::string_view to_string(StepKind kind) noexcept;

// One thing to do to one idle worker, with the bytes it is expected to give back.
struct AdmissionStep {
  StepKind kind = StepKind::release;
  std::string worker_id{};
  std::int32_t pid = 0;
  Bytes fixed = 0;
  Bytes held = 0;
  Bytes cache = 0;
  bool vram_known = true;  // false: the bytes are a lower bound (NVML had no figure)

  constexpr Bytes gives_back() const noexcept { return fixed + held + cache; }
};

// Why an idle worker holding VRAM was not hibernated.
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
  Bytes bytes = 0;  // what hibernating it would have moved
  HibernationBlock why = HibernationBlock::env_disallows;
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

  // In order: releases, then hibernations, then reaps. Empty for grant, wait and refuse.
  std::vector<AdmissionStep> steps{};
  // grantable + what the steps give back; at least request.bytes when the plan grants.
  Bytes expected = 0;
  // Why each reaped worker was not hibernated instead (a worker whose environment allows
  // hibernation, on a driver without the API, says so here).
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
