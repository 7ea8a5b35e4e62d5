#include "memory/admission.hpp"

#include <algorithm>

namespace isohost::memory {

namespace {

// An idle worker the plan may act on, and what it has chosen to do to it so far.
struct Candidate {
  const VramHolding* holding = nullptr;
  bool released = false;
  bool hibernated = false;
  bool reaped = false;
  std::optional<HibernationBlock> not_hibernated_because{};  // set when step 3 passed it over
};

using CandidateOrder = std::vector<Candidate*>;

// Idle workers on the device holding VRAM, the requester excepted.
std::vector<Candidate> idle_candidates(const DeviceLedger& device, std::string_view requester) {
  std::vector<Candidate> candidates;
  candidates.reserve(device.holdings.size());
  for (const VramHolding& holding : device.holdings) {
    if (holding.state != WorkerState::idle || holding.worker_id == requester) continue;
    if (holding.used() == 0) continue;
    candidates.push_back({.holding = &holding});
  }
  return candidates;
}

// Least recently used first; the name only makes the order total, so plans are repeatable.
bool used_less_recently(const VramHolding& a, const VramHolding& b) {
  if (a.last_used != b.last_used) return a.last_used < b.last_used;
  return a.worker_id < b.worker_id;
}

// The candidates picked by `keep`, largest `size` first, least recently used on ties.
template <typename Keep, typename Size>
CandidateOrder largest_first(std::vector<Candidate>& candidates, Keep keep, Size size) {
  CandidateOrder order;
  order.reserve(candidates.size());
  for (Candidate& candidate : candidates) {
    if (keep(candidate)) order.push_back(&candidate);
  }
  std::sort(order.begin(), order.end(), [&size](const Candidate* a, const Candidate* b) {
    const Bytes size_a = size(*a->holding);
    const Bytes size_b = size(*b->holding);
    if (size_a != size_b) return size_a > size_b;
    return used_less_recently(*a->holding, *b->holding);
  });
  return order;
}

Bytes reclaimable_of(const VramHolding& h) { return h.reclaimable; }
Bytes after_release_of(const VramHolding& h) { return h.after_release(); }

// Step 2: marks releases until `short_by` is covered; returns the bytes they give.
Bytes choose_releases(const CandidateOrder& by_reclaimable, Bytes short_by) {
  Bytes got = 0;
  for (Candidate* candidate : by_reclaimable) {
    if (got >= short_by || candidate->holding->reclaimable == 0) break;
    candidate->released = true;
    got += candidate->holding->reclaimable;
  }
  return got;
}

std::optional<HibernationBlock> support_block(const VramHolding& holding) {
  const HibernationSupport& support = holding.hibernation;
  if (!support.env_allows) return HibernationBlock::env_disallows;
  if (!support.driver_supports) return HibernationBlock::driver_lacks_api;
  if (!support.has_cuda_context) return HibernationBlock::no_cuda_context;
  if (!holding.vram_known) return HibernationBlock::vram_unknown;
  return std::nullopt;
}

std::optional<HibernationBlock> ram_block(RamRoom room) {
  switch (room) {
    case RamRoom::enough:
      return std::nullopt;
    case RamRoom::exceeds_available:
      return HibernationBlock::exceeds_available;
    case RamRoom::below_floor:
      return HibernationBlock::below_ram_floor;
    case RamRoom::over_budget:
      return HibernationBlock::over_ram_budget;
  }
  return HibernationBlock::exceeds_available;
}

// Step 3: marks hibernations until `short_by` is covered, as long as host RAM can take in
// what they move, and notes why the others were passed over. Runs only after every cache was
// released, so each moves fixed + held.
Bytes choose_hibernations(const CandidateOrder& by_size, const RamLedger& ram, Bytes short_by) {
  Bytes got = 0;
  for (Candidate* candidate : by_size) {
    if (got >= short_by) break;
    const VramHolding& holding = *candidate->holding;
    const Bytes moves = holding.after_release();
    if (moves == 0) continue;
    std::optional<HibernationBlock> block = support_block(holding);
    if (!block) block = ram_block(ram.room_for(got + moves));
    if (block) {
      candidate->not_hibernated_because = block;
      continue;
    }
    candidate->hibernated = true;
    got += moves;
  }
  return got;
}

// Step 4: marks reaps (of workers not hibernated) until `short_by` is covered; returns what
// they give beyond their releases, which are already counted.
Bytes choose_reaps(const CandidateOrder& by_size, Bytes short_by) {
  Bytes got = 0;
  for (Candidate* candidate : by_size) {
    if (got >= short_by) break;
    const Bytes gives = candidate->holding->after_release();
    if (candidate->hibernated || gives == 0) continue;
    candidate->reaped = true;
    got += gives;
  }
  return got;
}

// Drops hibernations, then releases, that the plan does not need after all (a reap chosen
// later may cover them), smallest first. A release before a hibernation stays: it is what
// keeps the hibernation's RAM cost at fixed + held. Returns the bytes still expected.
Bytes drop_unneeded(std::vector<Candidate>& candidates, Bytes have, Bytes need) {
  const auto smallest_first = [](CandidateOrder order) {
    std::reverse(order.begin(), order.end());
    return order;
  };
  const auto hibernated = [](const Candidate& c) { return c.hibernated; };
  for (Candidate* c : smallest_first(largest_first(candidates, hibernated, after_release_of))) {
    if (have - c->holding->after_release() < need) break;
    c->hibernated = false;
    have -= c->holding->after_release();
  }
  const auto lone_release = [](const Candidate& c) {
    return c.released && !c.hibernated && !c.reaped;
  };
  for (Candidate* c : smallest_first(largest_first(candidates, lone_release, reclaimable_of))) {
    if (have - c->holding->reclaimable < need) break;
    c->released = false;
    have -= c->holding->reclaimable;
  }
  return have;
}

AdmissionStep step_for(StepKind kind, const VramHolding& holding) {
  AdmissionStep step{.kind = kind,
                     .worker_id = holding.worker_id,
                     .pid = holding.pid,
                     .vram_known = holding.vram_known};
  if (kind != StepKind::release) {
    step.fixed = holding.fixed;
    step.held = holding.held;
  }
  if (kind != StepKind::hibernate) step.cache = holding.reclaimable;
  return step;
}

// The chosen steps in carrying-out order; a reaped worker's release is part of its reap.
std::vector<AdmissionStep> steps_in_order(const CandidateOrder& by_reclaimable,
                                          const CandidateOrder& by_size) {
  std::vector<AdmissionStep> steps;
  for (const Candidate* c : by_reclaimable) {
    if (c->released && !c->reaped) steps.push_back(step_for(StepKind::release, *c->holding));
  }
  for (const Candidate* c : by_size) {
    if (c->hibernated) steps.push_back(step_for(StepKind::hibernate, *c->holding));
  }
  for (const Candidate* c : by_size) {
    if (c->reaped) steps.push_back(step_for(StepKind::reap, *c->holding));
  }
  return steps;
}

// Why each reaped worker was not hibernated instead; others passed over do not matter.
std::vector<SkippedHibernation> reaped_not_hibernated(const CandidateOrder& by_size) {
  std::vector<SkippedHibernation> skipped;
  for (const Candidate* c : by_size) {
    if (!c->reaped || !c->not_hibernated_because) continue;
    skipped.push_back({.worker_id = c->holding->worker_id,
                       .bytes = c->holding->after_release(),
                       .why = *c->not_hibernated_because});
  }
  return skipped;
}

AdmissionOutcome strongest(const std::vector<AdmissionStep>& steps) {
  AdmissionOutcome outcome = AdmissionOutcome::grant;
  for (const AdmissionStep& step : steps) {
    const AdmissionOutcome needs =
        step.kind == StepKind::release     ? AdmissionOutcome::release_then_grant
        : step.kind == StepKind::hibernate ? AdmissionOutcome::hibernate_then_grant
                                           : AdmissionOutcome::reap_then_grant;
    outcome = std::max(outcome, needs);
  }
  return outcome;
}

// The plan with the books' figures copied in, before any decision.
AdmissionPlan plan_with_figures(const Ledger& ledger, const DeviceLedger* device,
                                const AdmissionRequest& request) {
  AdmissionPlan plan{
      .request = request,
      .device_found = device != nullptr,
      .ram_available = ledger.ram.available,
      .ram_floor = ledger.ram.floor,
      .ram_budget = ledger.ram.budget,
      .ram_workers = ledger.ram.workers_total(),
      .waited =
          std::max(Duration::zero(), ledger.taken_at - request.asked_at.value_or(ledger.taken_at)),
      .wait_bound = ledger.admission_wait};
  if (device == nullptr) return plan;
  plan.free = device->free;
  plan.reserve = device->reserve;
  plan.pending = device->pending;
  plan.foreign = device->foreign;
  plan.grantable = device->grantable();
  plan.expected = plan.grantable;
  for (const VramHolding& holding : device->holdings) {
    const bool counts =
        holding.worker_id != request.requester && holding.state != WorkerState::hibernated;
    if (counts && !holding.vram_known) plan.vram_unknown.push_back(holding.worker_id);
  }
  return plan;
}

// Step 5 or 6: nothing idle is enough; wait if busy workers will hold enough, else refuse.
void wait_or_refuse(AdmissionPlan& plan, const DeviceLedger& device, Bytes idle_can_give) {
  plan.idle_can_give = idle_can_give;
  for (const VramHolding& holding : device.holdings) {
    const bool busy = holding.state == WorkerState::busy || holding.state == WorkerState::starting;
    if (!busy || holding.worker_id == plan.request.requester) continue;
    plan.busy_hold += holding.used();
    plan.busy_workers.push_back(holding.worker_id);
  }
  const bool enough_eventually =
      plan.grantable + plan.idle_can_give + plan.busy_hold >= plan.request.bytes;
  const bool may_wait = plan.waited < plan.wait_bound;
  plan.outcome = enough_eventually && may_wait ? AdmissionOutcome::wait : AdmissionOutcome::refuse;
}

}  // namespace

std::string_view to_string(AdmissionOutcome outcome) noexcept {
  switch (outcome) {
    case AdmissionOutcome::grant:
      return "grant";
    case AdmissionOutcome::release_then_grant:
      return "release_then_grant";
    case AdmissionOutcome::hibernate_then_grant:
      return "hibernate_then_grant";
    case AdmissionOutcome::reap_then_grant:
      return "reap_then_grant";
    case AdmissionOutcome::wait:
      return "wait";
    case AdmissionOutcome::refuse:
      return "refuse";
  }
  return "unknown";
}

std::string_view to_string(StepKind kind) noexcept {
  switch (kind) {
    case StepKind::release:
      return "release";
    case StepKind::hibernate:
      return "hibernate";
    case StepKind::reap:
      return "reap";
  }
  return "unknown";
}

std::string_view to_string(HibernationBlock why) noexcept {
  switch (why) {
    case HibernationBlock::env_disallows:
      return "its environment does not allow hibernation";
    case HibernationBlock::driver_lacks_api:
      return "the driver has no checkpoint API";
    case HibernationBlock::no_cuda_context:
      return "it has no CUDA context";
    case HibernationBlock::vram_unknown:
      return "its VRAM is unknown to NVML";
    case HibernationBlock::exceeds_available:
      return "more than MemAvailable";
    case HibernationBlock::below_ram_floor:
      return "MemAvailable would fall below the floor";
    case HibernationBlock::over_ram_budget:
      return "workers' RAM would exceed the budget";
  }
  return "unknown";
}

Bytes AdmissionPlan::hibernated_bytes() const noexcept {
  Bytes moved = 0;
  for (const AdmissionStep& step : steps) {
    if (step.kind == StepKind::hibernate) moved += step.gives_back();
  }
  return moved;
}

AdmissionPlan plan_admission(const Ledger& ledger, const AdmissionRequest& request) {
  const DeviceLedger* device = ledger.device(request.device);
  AdmissionPlan plan = plan_with_figures(ledger, device, request);
  if (device == nullptr) return plan;  // refuse: no such device
  const Bytes need = request.bytes;
  Bytes have = plan.grantable;
  if (have >= need) {
    plan.outcome = AdmissionOutcome::grant;
    return plan;
  }

  std::vector<Candidate> candidates = idle_candidates(*device, request.requester);
  const auto any = [](const Candidate&) { return true; };
  const CandidateOrder by_reclaimable = largest_first(candidates, any, reclaimable_of);
  const CandidateOrder by_size = largest_first(candidates, any, after_release_of);
  have += choose_releases(by_reclaimable, need - have);
  if (have < need) have += choose_hibernations(by_size, ledger.ram, need - have);
  if (have < need) have += choose_reaps(by_size, need - have);
  if (have < need) {  // even reaping every idle worker is short
    wait_or_refuse(plan, *device, have - plan.grantable);
    return plan;
  }
  plan.expected = drop_unneeded(candidates, have, need);
  plan.steps = steps_in_order(by_reclaimable, by_size);
  plan.not_hibernated = reaped_not_hibernated(by_size);
  plan.outcome = strongest(plan.steps);
  return plan;
}

AdmissionPlan plan_admission(const Snapshot& snapshot, const AdmissionRequest& request) {
  return plan_admission(build_ledger(snapshot), request);
}

AdmissionPlan admit(const Snapshot& snapshot, const AdmissionRequest& request, GrantBook& book) {
  AdmissionPlan plan = plan_admission(build_ledger(snapshot, book.outstanding()), request);
  if (plan.grants()) {
    plan.grant_id = book.add(request.requester, request.device, request.bytes, snapshot.taken_at);
  }
  return plan;
}

}  // namespace isohost::memory
