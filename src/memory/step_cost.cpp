#include "memory/step_cost.hpp"

#include <algorithm>
#include <chrono>

namespace isohost::memory {

namespace {

CostTerm moving(CostSource source, Bytes bytes, double seconds_per_gib) {
  const double gib = static_cast<double>(bytes) / static_cast<double>(kGiB);
  return {.source = source,
          .bytes = bytes,
          .seconds_per_gib = seconds_per_gib,
          .seconds = gib * seconds_per_gib};
}

// Terms for bytes at a rate, left out when there are no bytes: a hibernation of a worker
// with nothing allocated moves its context only.
void add_moving(std::vector<CostTerm>& terms, CostSource source, Bytes bytes,
                double seconds_per_gib) {
  if (bytes > 0) terms.push_back(moving(source, bytes, seconds_per_gib));
}

CostTerm start_of(const VramHolding& holding, const TransferRates& rates) {
  if (!holding.start_time) return {.source = CostSource::start_assumed, .seconds = rates.start};
  return {.source = CostSource::start_measured,
          .seconds = std::chrono::duration<double>(*holding.start_time).count()};
}

StepCost sleep_cost(const VramHolding& holding, const TransferRates& rates) {
  StepCost cost;
  add_moving(cost.now, CostSource::sleep_out, holding.held, rates.sleep_out);
  add_moving(cost.undo, CostSource::sleep_in, holding.held, rates.sleep_in);
  return cost;
}

// Out: sleep first, then the driver; in: the driver's restore, then the wake from sleep.
StepCost hibernate_cost(const VramHolding& holding, const TransferRates& rates) {
  const Bytes by_sleep = holding.hibernation_by_sleep();
  const Bytes by_driver = holding.hibernation_by_driver();
  StepCost cost;
  add_moving(cost.now, CostSource::sleep_out, by_sleep, rates.sleep_out);
  add_moving(cost.now, CostSource::driver_out, by_driver, rates.driver_out);
  add_moving(cost.undo, CostSource::driver_in, by_driver, rates.driver_in);
  add_moving(cost.undo, CostSource::sleep_in, by_sleep, rates.sleep_in);
  return cost;
}

// A fresh worker, then its model rebuilt: what it held on the card and, if asleep, what it had
// moved into its host RAM, less the wake it would have paid for the latter.
StepCost reap_cost(const VramHolding& holding, const TransferRates& rates) {
  StepCost cost;
  cost.undo.push_back(start_of(holding, rates));
  const bool asleep = holding.state == WorkerState::asleep;
  const Bytes model = holding.held + (asleep ? holding.slept_bytes : 0);
  add_moving(cost.undo, CostSource::reload, model, rates.reload);
  if (asleep && holding.slept_bytes > 0) {
    CostTerm owed = moving(CostSource::wake_owed, holding.slept_bytes, rates.sleep_in);
    owed.seconds = -owed.seconds;
    cost.undo.push_back(owed);
  }
  return cost;
}

double sum_of(const std::vector<CostTerm>& terms) noexcept {
  double sum = 0;
  for (const CostTerm& term : terms) sum += term.seconds;
  return sum;
}

}  // namespace

std::string_view to_string(StepKind kind) noexcept {
  switch (kind) {
    case StepKind::release:
      return "release";
    case StepKind::sleep:
      return "sleep";
    case StepKind::hibernate:
      return "hibernate";
    case StepKind::reap:
      return "reap";
  }
  return "unknown";
}

std::string_view to_string(CostSource source) noexcept {
  switch (source) {
    case CostSource::sleep_out:
      return "sleep out";
    case CostSource::sleep_in:
      return "sleep in";
    case CostSource::driver_out:
      return "driver out";
    case CostSource::driver_in:
      return "driver in";
    case CostSource::reload:
      return "reload";
    case CostSource::start_measured:
      return "start (its mean so far)";
    case CostSource::start_assumed:
      return "start (none measured)";
    case CostSource::wake_owed:
      return "wake it owes anyway";
  }
  return "unknown";
}

double StepCost::seconds_now() const noexcept { return sum_of(now); }

double StepCost::seconds_to_undo() const noexcept { return std::max(0.0, sum_of(undo)); }

StepCost price_step(StepKind kind, const VramHolding& holding, const TransferRates& rates) {
  switch (kind) {
    case StepKind::release:
      return {};
    case StepKind::sleep:
      return sleep_cost(holding, rates);
    case StepKind::hibernate:
      return hibernate_cost(holding, rates);
    case StepKind::reap:
      return reap_cost(holding, rates);
  }
  return {};
}

}  // namespace isohost::memory
