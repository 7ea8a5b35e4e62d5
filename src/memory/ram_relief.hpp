#pragma once
// RAM pressure: which idle workers to reap so that all workers' RAM together fits the budget
// and MemAvailable is back at or above the floor.
//
// Candidates are idle, asleep and hibernated workers (an asleep or hibernated worker holds
// what it took off the card in RAM, so it is often the largest); busy and starting ones are
// never reaped for RAM. Largest RAM
// first, least recently used on ties; it stops as soon as both limits hold. When reaping
// every candidate is still not enough, the plan reaps them all and says so: the rest is
// held by busy workers.
//
//   RamReliefPlan relief = plan_ram_relief(build_ledger(snapshot).ram);
//   if (relief.needed) log(relief.explain());
//   for (const RamReap& reap : relief.reaps) pool.reap(reap.worker_id, "RAM pressure");

#include <cstdint>
#include <string>
#include <vector>

#include "memory/ledger.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

// One worker to end, with the RAM it is expected to give back (its PSS, plus hibernated
// bytes the PSS reading did not show yet).
struct RamReap {
  std::string worker_id{};
  std::int32_t pid = 0;
  WorkerState state = WorkerState::idle;
  Bytes gives_back = 0;
};

struct RamReliefPlan {
  Bytes budget = 0;  // 0 = none
  Bytes floor = 0;
  Bytes workers_before = 0;  // all workers' RAM
  Bytes available_before = 0;
  Bytes workers_after = 0;  // expected once the reaps are done
  Bytes available_after = 0;
  bool needed = false;           // a limit was broken
  bool enough = true;            // the reaps bring both limits back
  std::vector<RamReap> reaps{};  // in order
  Bytes busy_hold = 0;           // RAM of workers that could not be reaped (busy, starting)

  // The arithmetic in words and MiB.
  std::string explain() const;
};

// Plans the reaps for the RAM books. Pure.
RamReliefPlan plan_ram_relief(const RamLedger& ram);

}  // namespace isohost::memory
