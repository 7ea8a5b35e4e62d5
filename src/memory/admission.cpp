#include "memory/admission.hpp"

#include <algorithm>

namespace isohost::memory {

namespace {

// An idle (or asleep) worker the plan may act on, with the ways open to it, weakest first.
struct Candidate {
  const VramHolding* holding = nullptr;
  std::vector<AdmissionStep> ways{};  // each priced, its release included
  // Why a hibernation or sleep is not among its ways, where it is not.
  std::optional<HibernationBlock> hibernation_block{};
  std::optional<HibernationBlock> sleep_block{};
};

// Least recently used first; the name only makes the order total, so plans are repeatable.
bool used_less_recently(const VramHolding& a, const VramHolding& b) {
  if (a.last_used != b.last_used) return a.last_used < b.last_used;
  return a.worker_id < b.worker_id;
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

// The step `kind` on `holding` with all it gives back, its release included, and its price.
AdmissionStep priced_step(StepKind kind, const VramHolding& holding, const TransferRates& rates) {
  AdmissionStep step{.kind = kind,
                     .worker_id = holding.worker_id,
                     .pid = holding.pid,
                     .state = holding.state,
                     .held = holding.held,
                     .cache = holding.reclaimable,
                     .vram_known = holding.vram_known,
                     .cost = price_step(kind, holding, rates)};
  if (kind == StepKind::release) step.held = 0;
  if (kind == StepKind::hibernate || kind == StepKind::reap) step.fixed = holding.fixed;
  step.seconds_now = step.cost.seconds_now();
  step.seconds_to_undo = step.cost.seconds_to_undo();
  return step;
}

// Adds the way unless host RAM could not take it in even alone; returns why not.
std::optional<HibernationBlock> add_if_ram_takes(Candidate& candidate, AdmissionStep step,
                                                 const RamLedger& ram) {
  if (auto block = ram_block(ram.room_for(step.takes_in_ram()))) return block;
  candidate.ways.push_back(std::move(step));
  return std::nullopt;
}

// The ways open to one idle worker: release (it has a cache and is not asleep), sleep (it
// can, and has allocations), hibernate (the driver can, and host RAM could take it in alone),
// reap (unless its environment is kept).
Candidate candidate_for(const VramHolding& holding, const RamLedger& ram,
                        const TransferRates& rates) {
  Candidate candidate{.holding = &holding};
  const auto way = [&](StepKind kind) { return priced_step(kind, holding, rates); };
  if (holding.state == WorkerState::idle && holding.reclaimable > 0) {
    candidate.ways.push_back(way(StepKind::release));
  }
  if (holding.sleeps_now() && holding.held > 0) {
    candidate.sleep_block = add_if_ram_takes(candidate, way(StepKind::sleep), ram);
  }
  candidate.hibernation_block = support_block(holding);
  if (!candidate.hibernation_block && holding.hibernation_moves() > 0) {
    candidate.hibernation_block = add_if_ram_takes(candidate, way(StepKind::hibernate), ram);
  }
  if (!holding.kept) candidate.ways.push_back(way(StepKind::reap));
  return candidate;
}

// Idle and asleep workers on the device holding VRAM, the requester excepted, least recently
// used first.
std::vector<Candidate> candidates_on(const DeviceLedger& device, std::string_view requester,
                                     const RamLedger& ram, const TransferRates& rates) {
  std::vector<const VramHolding*> idle;
  for (const VramHolding& holding : device.holdings) {
    const bool at_rest = holding.state == WorkerState::idle || holding.state == WorkerState::asleep;
    if (at_rest && holding.worker_id != requester && holding.used() > 0) idle.push_back(&holding);
  }
  std::sort(idle.begin(), idle.end(),
            [](const VramHolding* a, const VramHolding* b) { return used_less_recently(*a, *b); });
  std::vector<Candidate> candidates;
  candidates.reserve(idle.size());
  for (const VramHolding* holding : idle) candidates.push_back(candidate_for(*holding, ram, rates));
  return candidates;
}

std::vector<RoomCandidate> room_candidates(const std::vector<Candidate>& candidates) {
  std::vector<RoomCandidate> rooms;
  rooms.reserve(candidates.size());
  for (const Candidate& candidate : candidates) {
    RoomCandidate& room = rooms.emplace_back();
    for (const AdmissionStep& way : candidate.ways) {
      room.options.push_back({.kind = way.kind,
                              .gives = way.gives_back(),
                              .ram_in = way.takes_in_ram(),
                              .seconds = way.seconds()});
    }
  }
  return rooms;
}

// Whether a hibernation moves the worker's allocations by its own sleep first (which empties
// the cache without running its release callbacks).
bool sleeps_first(const AdmissionStep& way) {
  return std::any_of(way.cost.now.begin(), way.cost.now.end(),
                     [](const CostTerm& term) { return term.source == CostSource::sleep_out; });
}

// The chosen way as the pool carries it out: the hibernation of an idle worker that cannot
// sleep is its release, then the hibernation of what is left (so host RAM takes in fixed +
// held, not the cache). One that sleeps first drops its cache in the sleep, keeping the model
// caches a release's callbacks would drop.
void add_steps_for(std::vector<AdmissionStep>& steps, const AdmissionStep& way) {
  if (way.kind != StepKind::hibernate || way.state == WorkerState::asleep || way.cache == 0 ||
      sleeps_first(way)) {
    steps.push_back(way);
    return;
  }
  steps.push_back({.kind = StepKind::release,
                   .worker_id = way.worker_id,
                   .pid = way.pid,
                   .state = way.state,
                   .cache = way.cache,
                   .vram_known = way.vram_known});
  AdmissionStep hibernation = way;
  hibernation.cache = 0;
  steps.push_back(std::move(hibernation));
}

// The chosen steps in carrying-out order: weakest kind first, then largest first, least
// recently used on ties (the sort is stable over candidates in that order).
std::vector<AdmissionStep> steps_in_order(const std::vector<Candidate>& candidates,
                                          const RoomChoice& choice) {
  std::vector<AdmissionStep> steps;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (choice.picked[c]) add_steps_for(steps, candidates[c].ways[*choice.picked[c]]);
  }
  std::stable_sort(steps.begin(), steps.end(), [](const AdmissionStep& a, const AdmissionStep& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    return a.gives_back() > b.gives_back();
  });
  return steps;
}

// The other ways open to each worker the plan acts on. A release is left out beside a
// stronger chosen way: that way includes it.
std::vector<AdmissionStep> alternatives_to(const std::vector<Candidate>& candidates,
                                           const RoomChoice& choice) {
  std::vector<AdmissionStep> alternatives;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (!choice.picked[c]) continue;
    const std::vector<AdmissionStep>& ways = candidates[c].ways;
    for (std::size_t w = 0; w < ways.size(); ++w) {
      if (w == *choice.picked[c] || ways[w].kind == StepKind::release) continue;
      alternatives.push_back(ways[w]);
    }
  }
  return alternatives;
}

// Why `kind` was not open to a reaped worker: its own block, or host RAM unable to take it in
// beside what the plan's other sleeps and hibernations move.
std::optional<HibernationBlock> passed_over_because(const Candidate& candidate, StepKind kind,
                                                    const RoomChoice& choice,
                                                    const RamLedger& ram) {
  const auto own = kind == StepKind::sleep ? candidate.sleep_block : candidate.hibernation_block;
  if (own) return own;
  for (const AdmissionStep& way : candidate.ways) {
    if (way.kind == kind) return ram_block(ram.room_for(choice.ram_in + way.takes_in_ram()));
  }
  return std::nullopt;  // not a way for it at all (nothing to move)
}

SkippedHibernation skipped(const VramHolding& holding, StepKind kind, HibernationBlock why) {
  return {.worker_id = holding.worker_id,
          .bytes = kind == StepKind::sleep ? holding.held : holding.hibernation_moves(),
          .why = why,
          .passed_over = kind};
}

// Why each reaped worker was not hibernated (or, where it can sleep, slept) instead.
std::vector<SkippedHibernation> reaped_not_hibernated(const std::vector<Candidate>& candidates,
                                                      const RoomChoice& choice,
                                                      const RamLedger& ram) {
  std::vector<SkippedHibernation> passed;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const Candidate& candidate = candidates[c];
    if (!choice.picked[c] || candidate.ways[*choice.picked[c]].kind != StepKind::reap) continue;
    const VramHolding& holding = *candidate.holding;
    if (holding.hibernation_moves() > 0) {
      if (auto why = passed_over_because(candidate, StepKind::hibernate, choice, ram)) {
        passed.push_back(skipped(holding, StepKind::hibernate, *why));
      }
    }
    if (holding.sleeps_now() && holding.held > 0) {
      if (auto why = passed_over_because(candidate, StepKind::sleep, choice, ram)) {
        passed.push_back(skipped(holding, StepKind::sleep, *why));
      }
    }
  }
  return passed;
}

AdmissionOutcome outcome_of(StepKind kind) {
  switch (kind) {
    case StepKind::release:
      return AdmissionOutcome::release_then_grant;
    case StepKind::sleep:
      return AdmissionOutcome::sleep_then_grant;
    case StepKind::hibernate:
      return AdmissionOutcome::hibernate_then_grant;
    case StepKind::reap:
      return AdmissionOutcome::reap_then_grant;
  }
  return AdmissionOutcome::reap_then_grant;
}

AdmissionOutcome strongest(const std::vector<AdmissionStep>& steps) {
  AdmissionOutcome outcome = AdmissionOutcome::grant;
  for (const AdmissionStep& step : steps) {
    outcome = std::max(outcome, outcome_of(step.kind));
  }
  return outcome;
}

// The plan with the books' figures copied in, before any decision.
AdmissionPlan plan_with_figures(const Ledger& ledger, const DeviceLedger* device,
                                const AdmissionRequest& request) {
  AdmissionPlan plan{
      .request = request,
      .device_found = device != nullptr,
      .rates = ledger.rates,
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

// Nothing idle is enough: wait if busy workers will hold enough, else refuse.
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
    case AdmissionOutcome::sleep_then_grant:
      return "sleep_then_grant";
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
    if (step.kind == StepKind::hibernate) moved += step.takes_in_ram();
  }
  return moved;
}

Bytes AdmissionPlan::slept_bytes() const noexcept {
  Bytes moved = 0;
  for (const AdmissionStep& step : steps) {
    if (step.kind == StepKind::sleep) moved += step.takes_in_ram();
  }
  return moved;
}

Bytes AdmissionPlan::ram_taken_in() const noexcept { return hibernated_bytes() + slept_bytes(); }

double AdmissionPlan::seconds_now() const noexcept {
  double sum = 0;
  for (const AdmissionStep& step : steps) sum += step.seconds_now;
  return sum;
}

double AdmissionPlan::seconds_to_undo() const noexcept {
  double sum = 0;
  for (const AdmissionStep& step : steps) sum += step.seconds_to_undo;
  return sum;
}

AdmissionPlan plan_admission(const Ledger& ledger, const AdmissionRequest& request) {
  const DeviceLedger* device = ledger.device(request.device);
  AdmissionPlan plan = plan_with_figures(ledger, device, request);
  if (device == nullptr) return plan;  // refuse: no such device
  if (plan.grantable >= request.bytes) {
    plan.outcome = AdmissionOutcome::grant;
    return plan;
  }
  const std::vector<Candidate> candidates =
      candidates_on(*device, request.requester, ledger.ram, ledger.rates);
  const std::vector<RoomCandidate> rooms = room_candidates(candidates);
  Bytes idle_can_give = 0;
  for (const RoomCandidate& room : rooms) idle_can_give += room.most_it_gives();
  const Bytes short_by = plan.short_by();
  // Reaps take no host RAM in, so whenever reaping them all is enough a choice covers.
  const RoomChoice choice =
      idle_can_give >= short_by ? cheapest_choice(rooms, short_by, ledger.ram) : RoomChoice{};
  if (!choice.covers) {
    wait_or_refuse(plan, *device, idle_can_give);
    return plan;
  }
  plan.candidates = candidates.size();
  plan.searched_every_combination = candidates.size() <= kExhaustiveCandidates;
  plan.expected = plan.grantable + choice.gives;
  plan.steps = steps_in_order(candidates, choice);
  plan.alternatives = alternatives_to(candidates, choice);
  plan.not_hibernated = reaped_not_hibernated(candidates, choice, ledger.ram);
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
