// RAM pressure: which idle workers to reap so all workers fit the budget and MemAvailable is
// back at or above the floor. Largest first, least recently used on ties.

#include "memory/ram_relief.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/ledger.hpp"
#include "memory_fixtures.hpp"

namespace isohost::memory {
namespace {

using testing::at;
using enum WorkerState;

struct RamWorker {
  std::string id;
  WorkerState state = idle;
  Bytes pss_mib = 600;
  int last_used_s = 0;
  Bytes hibernated_mib = 0;  // not yet in the PSS reading
  bool kept = false;
};

struct ReliefCase {
  std::string name;
  std::vector<RamWorker> workers;
  Bytes available_mib = 0;
  Bytes floor_mib = 0;
  Bytes budget_mib = 0;
  std::vector<std::string> reaps{};
  bool needed = false;
  bool enough = true;
};

RamLedger ram_of(const ReliefCase& row) {
  RamLedger ram{.mem_total = mib(65536),
                .available = mib(row.available_mib),
                .budget = mib(row.budget_mib),
                .floor = mib(row.floor_mib)};
  for (const RamWorker& w : row.workers) {
    ram.holdings.push_back({.worker_id = w.id,
                            .state = w.state,
                            .last_used = at(w.last_used_s),
                            .pss = mib(w.pss_mib),
                            .hibernated_unseen = mib(w.hibernated_mib),
                            .kept = w.kept});
  }
  return ram;
}

std::vector<std::string> reap_names(const RamReliefPlan& plan) {
  std::vector<std::string> names;
  for (const RamReap& reap : plan.reaps) names.push_back(reap.worker_id);
  return names;
}

const std::vector<ReliefCase> kCases = {
    {.name = "within_limits",
     .workers = {{.id = "a"}, {.id = "b"}},
     .available_mib = 8000,
     .floor_mib = 1024,
     .budget_mib = 4000},
    {.name = "no_budget_no_floor", .workers = {{.id = "a", .pss_mib = 90000}}, .available_mib = 10},
    {.name = "over_budget_reaps_largest_first",
     .workers = {{.id = "a", .pss_mib = 600},
                 {.id = "b", .pss_mib = 2000},
                 {.id = "c", .pss_mib = 900}},
     .available_mib = 8000,
     .budget_mib = 2500,
     .reaps = {"b"},
     .needed = true},
    {.name = "over_budget_reaps_until_within",
     .workers = {{.id = "a", .pss_mib = 600},
                 {.id = "b", .pss_mib = 2000},
                 {.id = "c", .pss_mib = 900}},
     .available_mib = 8000,
     .budget_mib = 1000,
     .reaps = {"b", "c"},
     .needed = true},
    {.name = "under_floor_reaps_until_above",
     .workers = {{.id = "a", .pss_mib = 600},
                 {.id = "b", .pss_mib = 500},
                 {.id = "c", .pss_mib = 400}},
     .available_mib = 500,
     .floor_mib = 1500,
     .reaps = {"a", "b"},
     .needed = true},
    {.name = "least_recently_used_on_ties",
     .workers = {{.id = "a", .last_used_s = 30},
                 {.id = "b", .last_used_s = 10},
                 {.id = "c", .last_used_s = 20}},
     .available_mib = 8000,
     .budget_mib = 1000,
     .reaps = {"b", "c"},
     .needed = true},
    {.name = "hibernated_worker_counts_what_it_took_off_the_card",
     .workers = {{.id = "a", .pss_mib = 1500},
                 {.id = "h", .state = hibernated, .pss_mib = 600, .hibernated_mib = 4000}},
     .available_mib = 8000,
     .budget_mib = 5000,
     .reaps = {"h"},
     .needed = true},
    {.name = "asleep_worker_counts_its_models_in_ram",
     .workers = {{.id = "a", .pss_mib = 1500},
                 {.id = "z", .state = asleep, .pss_mib = 10840}},  // 10240 MiB slept
     .available_mib = 8000,
     .budget_mib = 10000,
     .reaps = {"z"},
     .needed = true},
    {.name = "kept_workers_are_never_reaped",
     .workers = {{.id = "k", .pss_mib = 5000, .kept = true}, {.id = "a", .pss_mib = 600}},
     .available_mib = 8000,
     .budget_mib = 4000,
     .reaps = {"a"},
     .needed = true,
     .enough = false},
    {.name = "busy_and_starting_are_never_reaped",
     .workers = {{.id = "p", .state = busy, .pss_mib = 5000},
                 {.id = "s", .state = starting, .pss_mib = 3000},
                 {.id = "a", .pss_mib = 600}},
     .available_mib = 8000,
     .budget_mib = 7000,
     .reaps = {"a"},
     .needed = true,
     .enough = false},
};

class RamRelief : public ::testing::TestWithParam<ReliefCase> {};

TEST_P(RamRelief, ReapsTheRightWorkers) {
  const ReliefCase& row = GetParam();
  const RamReliefPlan plan = plan_ram_relief(ram_of(row));
  EXPECT_EQ(reap_names(plan), row.reaps) << plan.explain();
  EXPECT_EQ(plan.needed, row.needed) << plan.explain();
  EXPECT_EQ(plan.enough, row.enough) << plan.explain();
}

INSTANTIATE_TEST_SUITE_P(Planner, RamRelief, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(RamReliefExplain, SaysBeforeAndAfter) {
  const ReliefCase row{.name = "x",
                       .workers = {{.id = "a", .pss_mib = 600}, {.id = "b", .pss_mib = 2000}},
                       .available_mib = 500,
                       .floor_mib = 1024,
                       .budget_mib = 2000};
  const RamReliefPlan plan = plan_ram_relief(ram_of(row));
  EXPECT_EQ(plan.workers_after, mib(600));
  EXPECT_EQ(plan.available_after, mib(2500));
  EXPECT_EQ(plan.explain(),
            "workers hold 2600 MiB of budget 2000 MiB, MemAvailable 500 MiB (floor 1024 MiB); "
            "reaping 'b' (idle, 2000 MiB) -> workers hold 600 MiB of budget 2000 MiB, "
            "MemAvailable 2500 MiB (floor 1024 MiB): within limits");
}

TEST(RamReliefExplain, SaysWhatBusyWorkersHoldWhenNotEnough) {
  const ReliefCase row{.name = "x",
                       .workers = {{.id = "p", .state = busy, .pss_mib = 5000}},
                       .available_mib = 100,
                       .floor_mib = 1024};
  const RamReliefPlan plan = plan_ram_relief(ram_of(row));
  EXPECT_FALSE(plan.enough);
  EXPECT_EQ(plan.busy_hold, mib(5000));
  const std::string words = plan.explain();
  EXPECT_NE(words.find("no idle worker to reap"), std::string::npos) << words;
  EXPECT_NE(words.find("still over, busy workers hold 5000 MiB"), std::string::npos) << words;
}

TEST(RamReliefExplain, NothingToDo) {
  const ReliefCase row{.name = "x", .workers = {{.id = "a"}}, .available_mib = 8000};
  EXPECT_EQ(plan_ram_relief(ram_of(row)).explain(),
            "workers hold 600 MiB (no budget), MemAvailable 8000 MiB (floor 0 MiB): within limits, "
            "nothing to reap");
}

// From a snapshot: the RAM ledger the pool would build, hibernated worker included.
TEST(RamReliefFromSnapshot, CountsHibernatedBytesNotYetSeen) {
  Snapshot snapshot = testing::snapshot_of(
      {{.id = "a", .pss_mib = 700}, {.id = "h", .state = hibernated, .pss_mib = 600}}, 20000);
  snapshot.processes[1].hibernated_bytes = mib(4708);
  snapshot.host_ram.mem_available = mib(6000);
  snapshot.settings.ram_floor = mib(2048);
  const RamReliefPlan plan = plan_ram_relief(build_ledger(snapshot).ram);
  // MemAvailable 6000 - 4708 not yet seen = 1292 < 2048: reaping h gives back 5308.
  EXPECT_EQ(plan.available_before, mib(1292));
  EXPECT_EQ(reap_names(plan), std::vector<std::string>{"h"});
  EXPECT_EQ(plan.available_after, mib(6600));
}

}  // namespace
}  // namespace isohost::memory
