#include "memory/ram_relief.hpp"

#include <algorithm>

namespace isohost::memory {

namespace {

bool within_limits(Bytes workers, Bytes available, Bytes budget, Bytes floor) {
  return (budget == 0 || workers <= budget) && available >= floor;
}

bool reapable(const RamHolding& holding) {
  if (holding.kept) return false;
  return holding.state == WorkerState::idle || holding.state == WorkerState::hibernated ||
         holding.state == WorkerState::asleep;
}

// Reapable workers, largest RAM first, least recently used on ties (name last, for a total
// order).
std::vector<const RamHolding*> reap_order(const RamLedger& ram) {
  std::vector<const RamHolding*> order;
  order.reserve(ram.holdings.size());
  for (const RamHolding& holding : ram.holdings) {
    if (reapable(holding) && holding.held() > 0) order.push_back(&holding);
  }
  std::sort(order.begin(), order.end(), [](const RamHolding* a, const RamHolding* b) {
    if (a->held() != b->held()) return a->held() > b->held();
    if (a->last_used != b->last_used) return a->last_used < b->last_used;
    return a->worker_id < b->worker_id;
  });
  return order;
}

Bytes busy_ram(const RamLedger& ram) {
  Bytes sum = 0;
  for (const RamHolding& holding : ram.holdings) {
    if (!reapable(holding)) sum += holding.held();
  }
  return sum;
}

std::string limits_words(const RamReliefPlan& plan, Bytes workers, Bytes available) {
  std::string text = "workers hold " + mib_text(workers);
  text += plan.budget == 0 ? " (no budget)" : " of budget " + mib_text(plan.budget);
  return text + ", MemAvailable " + mib_text(available) + " (floor " + mib_text(plan.floor) + ")";
}

}  // namespace

RamReliefPlan plan_ram_relief(const RamLedger& ram) {
  RamReliefPlan plan{.budget = ram.budget,
                     .floor = ram.floor,
                     .workers_before = ram.workers_total(),
                     .available_before = ram.available};
  plan.workers_after = plan.workers_before;
  plan.available_after = plan.available_before;
  plan.needed = !within_limits(plan.workers_after, plan.available_after, plan.budget, plan.floor);
  for (const RamHolding* holding : reap_order(ram)) {
    if (within_limits(plan.workers_after, plan.available_after, plan.budget, plan.floor)) break;
    plan.reaps.push_back({.worker_id = holding->worker_id,
                          .pid = holding->pid,
                          .state = holding->state,
                          .gives_back = holding->held()});
    plan.workers_after -= holding->held();
    plan.available_after += holding->held();
  }
  plan.enough = within_limits(plan.workers_after, plan.available_after, plan.budget, plan.floor);
  if (!plan.enough) plan.busy_hold = busy_ram(ram);
  return plan;
}

std::string RamReliefPlan::explain() const {
  std::string text = limits_words(*this, workers_before, available_before);
  if (!needed) return text + ": within limits, nothing to reap";
  for (std::size_t i = 0; i < reaps.size(); ++i) {
    text += i == 0 ? "; reaping " : ", ";
    text += "'" + reaps[i].worker_id + "' (" + std::string(to_string(reaps[i].state)) + ", " +
            mib_text(reaps[i].gives_back) + ")";
  }
  if (reaps.empty()) text += "; no idle worker to reap";
  text += " -> " + limits_words(*this, workers_after, available_after);
  if (enough) return text + ": within limits";
  return text + ": still over, busy workers hold " + mib_text(busy_hold);
}

}  // namespace isohost::memory
