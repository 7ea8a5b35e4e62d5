// The admission planner, table-driven: one row per situation, the outcome and the steps it
// must choose. Figures in MiB; the card is 24 GiB, the reserve 512 MiB, so a card with
// `free 1200` has 688 MiB grantable. The planner takes the cheapest set of steps that covers
// the shortfall, priced at the default rates (MemorySettings::rates): a release costs nothing,
// a hibernation without sleep 0.45 + 0.18 s per GiB it moves, a reap 5 s (no start measured)
// + 0.5 s per GiB held. Workers here cannot sleep unless a row says so; sleep's own cases are
// in admission_cost_test.cpp.

#include "memory/admission.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "memory_fixtures.hpp"

namespace isohost::memory {
namespace {

using testing::request_for;
using testing::snapshot_of;
using testing::step_names;
using testing::WorkerRow;
using enum AdmissionOutcome;
using enum WorkerState;

struct AdmissionCase {
  std::string name;
  std::vector<WorkerRow> workers;
  Bytes free_mib = 0;
  Bytes need_mib = 0;
  AdmissionOutcome outcome = grant;
  std::vector<std::string> steps{};
  Bytes expected_mib = 0;  // plan.expected; checked when the plan grants
  Bytes foreign_mib = 0;
  std::function<void(Snapshot&)> adjust = nullptr;
};

void set_ram(Snapshot& s, Bytes available_mib, Bytes floor_mib, Bytes budget_mib) {
  s.host_ram.mem_available = mib(available_mib);
  s.settings.ram_floor = mib(floor_mib);
  s.settings.ram_budget = mib(budget_mib);
}

const std::vector<AdmissionCase> kCases = {
    {.name = "grant_from_free",
     .workers = {},
     .free_mib = 2000,
     .need_mib = 1000,
     .outcome = grant,
     .expected_mib = 1488},
    {.name = "grant_up_to_the_reserve",
     .workers = {},
     .free_mib = 1512,
     .need_mib = 1000,
     .outcome = grant,
     .expected_mib = 1000},
    {.name = "reserve_kept", .workers = {}, .free_mib = 1500, .need_mib = 1000, .outcome = refuse},
    {.name = "release_then_grant",
     .workers = {{.id = "a", .cache_mib = 2048}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = release_then_grant,
     .steps = {"release a"},
     .expected_mib = 2736},
    // Only b's cache covers alone; releasing both would cost the same, in one more step.
    {.name = "release_the_cache_that_covers",
     .workers = {{.id = "a", .cache_mib = 500}, {.id = "b", .cache_mib = 3000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = release_then_grant,
     .steps = {"release b"},
     .expected_mib = 3688},
    // a and b cover together, and no single cache does; c would be a step too many.
    {.name = "release_several_until_enough",
     .workers = {{.id = "a", .cache_mib = 1000},
                 {.id = "b", .cache_mib = 800},
                 {.id = "c", .cache_mib = 200}},
     .free_mib = 1200,
     .need_mib = 2400,
     .outcome = release_then_grant,
     .steps = {"release a", "release b"},
     .expected_mib = 2488},
    {.name = "hibernate_then_grant",
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = hibernate_then_grant,
     .steps = {"hibernate a"},
     .expected_mib = 3300},
    {.name = "release_before_hibernating_the_same_worker",
     .workers = {{.id = "a", .cache_mib = 1000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = hibernate_then_grant,
     .steps = {"release a", "hibernate a"},
     .expected_mib = 2300},
    {.name = "hibernation_not_possible_goes_to_reap",
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = false}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 3300},
    {.name = "hibernation_blocked_by_ram_floor_goes_to_reap",
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 3300,
     .adjust = [](Snapshot& s) { set_ram(s, 3000, 1024, 0); }},
    {.name = "hibernation_blocked_by_ram_budget_goes_to_reap",
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 3300,
     .adjust = [](Snapshot& s) { set_ram(s, 32768, 0, 3000); }},
    {.name = "hibernation_never_takes_more_than_available",
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 3300,
     .adjust = [](Snapshot& s) { set_ram(s, 2000, 0, 0); }},
    {.name = "hibernate_the_smaller_that_covers",
     // Once hibernated the largest first (a, 3612 MiB: 2.22 s); b covers too and moves 1612 MiB
     // (0.99 s).
     .workers = {{.id = "a", .held_mib = 3000, .hibernatable = true},
                 {.id = "b", .held_mib = 1000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = hibernate_then_grant,
     .steps = {"hibernate b"},
     .expected_mib = 2300},
    {.name = "reap_when_a_fresh_start_is_cheaper_than_hibernating",
     // Once hibernated whenever it could be. Its environment starts in 0.5 s: the reap costs
     // 0.5 s + 2000 MiB x 0.5 s/GiB = 1.48 s, the hibernation 2612 MiB x 0.63 s/GiB = 1.61 s.
     .workers = {{.id = "a", .held_mib = 2000, .hibernatable = true, .start_s = 0.5}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 3300},
    {.name = "hibernate_the_one_that_fits_in_ram",
     .workers = {{.id = "a", .held_mib = 3000, .hibernatable = true},
                 {.id = "b", .held_mib = 1000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = hibernate_then_grant,
     .steps = {"hibernate b"},
     .expected_mib = 2300,
     .adjust = [](Snapshot& s) { set_ram(s, 4000, 1024, 0); }},
    // Only b covers alone; a and c together fall short.
    {.name = "reap_the_one_that_covers_alone",
     .workers = {{.id = "a", .held_mib = 1000},
                 {.id = "b", .held_mib = 3000},
                 {.id = "c", .held_mib = 500}},
     .free_mib = 1200,
     .need_mib = 4000,
     .outcome = reap_then_grant,
     .steps = {"reap b"},
     .expected_mib = 4300},
    {.name = "reap_the_smaller_that_covers",
     // Once reaped the largest first (b: 5 s + 1.46 s reload); a covers too and has less to
     // rebuild (5 s + 0.49 s).
     .workers = {{.id = "a", .held_mib = 1000}, {.id = "b", .held_mib = 3000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 2300},
    {.name = "reap_least_recently_used_on_ties",
     .workers = {{.id = "a", .held_mib = 1000, .last_used_s = 100},
                 {.id = "b", .held_mib = 1000, .last_used_s = 50},
                 {.id = "c", .held_mib = 1000, .last_used_s = 200}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = reap_then_grant,
     .steps = {"reap b"},
     .expected_mib = 2300},
    // c and one of a, b are needed; a and b cost the same, and b was used less recently.
    {.name = "reap_in_order_until_enough",
     .workers = {{.id = "a", .held_mib = 1000, .last_used_s = 100},
                 {.id = "b", .held_mib = 1000, .last_used_s = 50},
                 {.id = "c", .held_mib = 3000, .last_used_s = 200}},
     .free_mib = 1200,
     .need_mib = 5000,
     .outcome = reap_then_grant,
     .steps = {"reap c", "reap b"},
     .expected_mib = 5912},
    {.name = "release_then_reap_as_in_the_design",
     .workers = {{.id = "a", .cache_mib = 2048}, {.id = "b", .held_mib = 900}},
     .free_mib = 1200,
     .need_mib = 4096,
     .outcome = reap_then_grant,
     .steps = {"release a", "reap b"},
     .expected_mib = 4248},
    {.name = "reap_makes_a_release_unneeded",
     .workers = {{.id = "a", .cache_mib = 100}, {.id = "b", .held_mib = 5000}},
     .free_mib = 1200,
     .need_mib = 3000,
     .outcome = reap_then_grant,
     .steps = {"reap b"},
     .expected_mib = 6300},
    {.name = "reap_takes_the_workers_cache_too",
     .workers = {{.id = "a", .held_mib = 3000, .cache_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 4000,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 5300},
    {.name = "reap_makes_a_hibernation_unneeded",
     .workers = {{.id = "c", .held_mib = 400, .hibernatable = true}, {.id = "b", .held_mib = 5000}},
     .free_mib = 1200,
     .need_mib = 4000,
     .outcome = reap_then_grant,
     .steps = {"reap b"},
     .expected_mib = 6300},
    {.name = "hibernate_and_reap_both_needed",
     .workers = {{.id = "c", .held_mib = 2000, .hibernatable = true},
                 {.id = "b", .held_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 4500,
     .outcome = reap_then_grant,
     .steps = {"hibernate c", "reap b"},
     .expected_mib = 4912},
    {.name = "wait_for_busy_workers",
     .workers = {{.id = "p", .state = busy, .held_mib = 5000}, {.id = "a", .cache_mib = 100}},
     .free_mib = 1200,
     .need_mib = 4000,
     .outcome = wait},
    {.name = "wait_for_a_starting_worker",
     .workers = {{.id = "s", .state = starting, .held_mib = 3000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = wait},
    {.name = "refuse_when_busy_workers_hold_too_little",
     .workers = {{.id = "p", .state = busy, .held_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 4000,
     .outcome = refuse},
    {.name = "refuse_more_than_the_card",
     .workers = {{.id = "a", .held_mib = 2000}},
     .free_mib = 20000,
     .need_mib = 30000,
     .outcome = refuse},
    {.name = "requester_never_released",
     .workers = {{.id = "requester", .cache_mib = 5000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = refuse},
    {.name = "requester_never_reaped",
     .workers = {{.id = "requester", .held_mib = 5000, .hibernatable = true},
                 {.id = "a", .held_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 2300},
    // A kept environment's worker (a running job needs what it holds) is never reaped; it may
    // still hibernate, which keeps the process.
    {.name = "kept_worker_never_reaped",
     .workers = {{.id = "k", .held_mib = 5000}, {.id = "a", .held_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = reap_then_grant,
     .steps = {"reap a"},
     .expected_mib = 2300,
     .adjust = [](Snapshot& s) { s.processes[0].kept = true; }},
    {.name = "kept_worker_alone_refused",
     .workers = {{.id = "k", .held_mib = 5000}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = refuse,
     .adjust = [](Snapshot& s) { s.processes[0].kept = true; }},
    {.name = "kept_worker_still_hibernates",
     .workers = {{.id = "k", .held_mib = 2000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2500,
     .outcome = hibernate_then_grant,
     .steps = {"hibernate k"},
     .expected_mib = 3300,
     .adjust = [](Snapshot& s) { s.processes[0].kept = true; }},
    {.name = "requester_not_waited_for",
     .workers = {{.id = "requester", .state = busy, .held_mib = 5000}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = refuse},
    {.name = "foreign_usage_is_not_free",
     .workers = {},
     .free_mib = 4576,
     .need_mib = 4000,
     .outcome = grant,
     .expected_mib = 4064,
     .foreign_mib = 20000},
    {.name = "foreign_usage_caps_a_stale_free_figure",
     .workers = {},
     .free_mib = 10000,
     .need_mib = 4500,
     .outcome = refuse,
     .foreign_mib = 20000},
    {.name = "foreign_usage_is_not_waited_for",
     .workers = {{.id = "p", .state = busy, .held_mib = 1000}},
     .free_mib = 1200,
     .need_mib = 3000,
     .outcome = refuse,
     .foreign_mib = 20000},
    {.name = "workers_on_another_device_are_not_used",
     .workers = {{.id = "a", .held_mib = 5000, .device = 1}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = refuse},
    {.name = "hibernated_worker_holds_no_vram",
     .workers = {{.id = "h", .state = hibernated, .held_mib = 5000, .hibernatable = true}},
     .free_mib = 1200,
     .need_mib = 2000,
     .outcome = refuse},
    {.name = "pending_grants_are_not_grantable",
     .workers = {},
     .free_mib = 2000,
     .need_mib = 1000,
     .outcome = refuse,
     .adjust =
         [](Snapshot& s) { s.pending.push_back({.id = 1, .device = 0, .bytes = mib(1000)}); }},
    {.name = "pending_grants_on_another_device_do_not_count",
     .workers = {},
     .free_mib = 2000,
     .need_mib = 1000,
     .outcome = grant,
     .expected_mib = 1488,
     .adjust =
         [](Snapshot& s) { s.pending.push_back({.id = 1, .device = 1, .bytes = mib(1000)}); }},
    {.name = "zero_bytes_always_granted",
     .workers = {},
     .free_mib = 0,
     .need_mib = 0,
     .outcome = grant},
};

class AdmissionTable : public ::testing::TestWithParam<AdmissionCase> {};

TEST_P(AdmissionTable, ChoosesOutcomeAndSteps) {
  const AdmissionCase& row = GetParam();
  Snapshot snapshot = snapshot_of(row.workers, row.free_mib, row.foreign_mib);
  if (row.adjust) row.adjust(snapshot);

  const AdmissionPlan plan = plan_admission(snapshot, request_for(row.need_mib));

  EXPECT_EQ(to_string(plan.outcome), to_string(row.outcome)) << plan.explain();
  EXPECT_EQ(step_names(plan), row.steps) << plan.explain();
  if (plan.grants()) {
    EXPECT_EQ(plan.expected, mib(row.expected_mib)) << plan.explain();
    EXPECT_GE(plan.expected, plan.request.bytes);
  }
  EXPECT_FALSE(plan.explain().empty());
}

INSTANTIATE_TEST_SUITE_P(Planner, AdmissionTable, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// The design's own example, word for word, with each step's price and the way not taken.
TEST(AdmissionExplain, SaysTheArithmeticOfReleaseThenReap) {
  const Snapshot snapshot =
      snapshot_of({{.id = "a", .cache_mib = 2048}, {.id = "b", .held_mib = 900}}, 1200);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(4096));
  EXPECT_EQ(plan.explain(),
            "need 4096 MiB on GPU 0: free 1200 MiB - reserve 512 MiB - pending 0 MiB = 688 MiB "
            "grantable; short by 3408 MiB: releasing idle 'a' (cache 2048 MiB) [now 0 s; to undo "
            "0 s], then reaping idle 'b' (fixed 612 MiB + held 900 MiB) [now 0 s; to undo 5.00 s "
            "start (none measured) + 0.44 s reload (900 MiB at 0.50 s/GiB) = 5.44 s] gives "
            "688 MiB + 3560 MiB = 4248 MiB >= 4096 MiB; costs 0 s now + 5.44 s to undo = 5.44 s, "
            "the least of the ways open to 2 idle workers (every combination weighed); not "
            "chosen: reaping 'a' would give 2660 MiB for 5.00 s start (none measured); reap, then "
            "grant");
}

TEST(AdmissionExplain, StepsCarryTheBytesEachGivesBack) {
  const Snapshot snapshot =
      snapshot_of({{.id = "a", .cache_mib = 2048}, {.id = "b", .held_mib = 900}}, 1200);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(4096));
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].gives_back(), mib(2048));
  EXPECT_EQ(plan.steps[0].cache, mib(2048));
  EXPECT_EQ(plan.steps[1].fixed, mib(612));
  EXPECT_EQ(plan.steps[1].held, mib(900));
  EXPECT_EQ(plan.steps[1].gives_back(), mib(1512));
  EXPECT_NE(plan.steps[1].pid, 0);
}

TEST(AdmissionExplain, RefusalContainsTheNumbers) {
  const Snapshot snapshot =
      snapshot_of({{.id = "a", .held_mib = 2000}, {.id = "p", .state = busy, .held_mib = 1000}},
                  1200, /*foreign_mib=*/3000);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(9000));
  ASSERT_EQ(plan.outcome, refuse);
  const std::string words = plan.explain();
  for (const char* figure :
       {"need 9000 MiB", "free 1200 MiB", "reserve 512 MiB", "pending 0 MiB", "688 MiB grantable",
        "hold 3000 MiB", "at most 2612 MiB", "'p' hold 1612 MiB",
        "688 MiB + 2612 MiB + 1612 MiB = 4912 MiB < 9000 MiB", "refused"}) {
    EXPECT_NE(words.find(figure), std::string::npos) << figure << " not in: " << words;
  }
}

TEST(AdmissionExplain, HibernationSaysWhatHostRamTakesIn) {
  Snapshot snapshot = snapshot_of({{.id = "a", .held_mib = 2000, .hibernatable = true}}, 1200);
  set_ram(snapshot, 9000, 1024, 8192);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(2500));
  ASSERT_EQ(plan.outcome, hibernate_then_grant);
  EXPECT_EQ(plan.hibernated_bytes(), mib(2612));
  const std::string words = plan.explain();
  EXPECT_NE(words.find("hibernating idle 'a' (fixed 612 MiB + held 2000 MiB into host RAM)"),
            std::string::npos)
      << words;
  EXPECT_NE(words.find("MemAvailable 9000 MiB - 2612 MiB = 6388 MiB (floor 1024 MiB)"),
            std::string::npos)
      << words;
  EXPECT_NE(words.find("workers 600 MiB + 2612 MiB = 3212 MiB of budget 8192 MiB"),
            std::string::npos)
      << words;
}

// Table row for why hibernation was passed over, and what the plan says about it.
struct BlockCase {
  std::string name;
  WorkerRow worker;
  std::function<void(Snapshot&)> adjust;
  HibernationBlock why;
  std::string words;
};

class HibernationBlocked : public ::testing::TestWithParam<BlockCase> {};

TEST_P(HibernationBlocked, GoesStraightToReapAndSaysWhy) {
  const BlockCase& row = GetParam();
  Snapshot snapshot = snapshot_of({row.worker}, 1200);
  if (row.adjust) row.adjust(snapshot);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(2500));
  EXPECT_EQ(plan.outcome, reap_then_grant) << plan.explain();
  EXPECT_EQ(step_names(plan), std::vector<std::string>{"reap a"});
  ASSERT_EQ(plan.not_hibernated.size(), 1u) << plan.explain();
  EXPECT_EQ(plan.not_hibernated[0].why, row.why);
  EXPECT_EQ(plan.not_hibernated[0].bytes, mib(2612));
  if (row.words.empty()) {  // a choice, not news: not in the words
    EXPECT_EQ(plan.explain().find("not hibernated"), std::string::npos) << plan.explain();
  } else {
    EXPECT_NE(plan.explain().find(row.words), std::string::npos) << plan.explain();
  }
}

ProcessFigures& only_worker(Snapshot& s) { return s.processes.front(); }

INSTANTIATE_TEST_SUITE_P(
    Planner, HibernationBlocked,
    ::testing::Values(
        BlockCase{"env_disallows",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { only_worker(s).hibernation.env_allows = false; },
                  HibernationBlock::env_disallows,
                  ""},
        BlockCase{"driver_lacks_api",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { only_worker(s).hibernation.driver_supports = false; },
                  HibernationBlock::driver_lacks_api,
                  "reaped, not hibernated: 'a' (2612 MiB: the driver has no checkpoint API)"},
        BlockCase{"no_cuda_context",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { only_worker(s).hibernation.has_cuda_context = false; },
                  HibernationBlock::no_cuda_context,
                  "it has no CUDA context"},
        BlockCase{"ram_floor",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { set_ram(s, 3000, 1024, 0); },
                  HibernationBlock::below_ram_floor,
                  "MemAvailable would fall below the floor of 1024 MiB, MemAvailable 3000 MiB"},
        BlockCase{"ram_budget",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { set_ram(s, 32768, 0, 3000); },
                  HibernationBlock::over_ram_budget,
                  "workers' RAM would exceed the budget of 3000 MiB, workers hold 600 MiB"},
        BlockCase{"ram_not_there",
                  {.id = "a", .held_mib = 2000, .hibernatable = true},
                  [](Snapshot& s) { set_ram(s, 2000, 0, 0); },
                  HibernationBlock::exceeds_available,
                  "more than MemAvailable 2000 MiB"}),
    [](const auto& info) { return info.param.name; });

TEST(AdmissionExplain, OnlyReapedWorkersSayWhyTheyWereNotHibernated) {
  Snapshot snapshot = snapshot_of({{.id = "a", .held_mib = 3000, .hibernatable = true},
                                   {.id = "b", .held_mib = 1000, .hibernatable = true}},
                                  1200);
  set_ram(snapshot, 4000, 1024, 0);  // a does not fit in RAM, b does
  const AdmissionPlan fits = plan_admission(snapshot, request_for(2000));
  EXPECT_EQ(step_names(fits), std::vector<std::string>{"hibernate b"});
  EXPECT_TRUE(fits.not_hibernated.empty()) << fits.explain();

  const AdmissionPlan needs_a = plan_admission(snapshot, request_for(5000));
  EXPECT_EQ(step_names(needs_a), (std::vector<std::string>{"hibernate b", "reap a"}));
  ASSERT_EQ(needs_a.not_hibernated.size(), 1u);
  EXPECT_EQ(needs_a.not_hibernated[0].worker_id, "a");
  EXPECT_EQ(needs_a.not_hibernated[0].why, HibernationBlock::below_ram_floor);
}

TEST(AdmissionWait, CarriesTheBoundAndNoSteps) {
  const Snapshot snapshot = snapshot_of(
      {{.id = "p", .state = busy, .held_mib = 5000}, {.id = "a", .cache_mib = 100}}, 1200);
  AdmissionRequest request = request_for(4000);
  request.asked_at = testing::at(990);
  const AdmissionPlan plan = plan_admission(snapshot, request);
  ASSERT_EQ(plan.outcome, wait);
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_FALSE(plan.grants());
  EXPECT_EQ(plan.busy_workers, std::vector<std::string>{"p"});
  EXPECT_EQ(plan.busy_hold, mib(5612));
  EXPECT_EQ(plan.idle_can_give, mib(712));
  EXPECT_NE(plan.explain().find("waiting for them (waited 10 s of 30 s)"), std::string::npos)
      << plan.explain();
}

TEST(AdmissionWait, RefusedOnceTheBoundHasPassed) {
  const Snapshot snapshot = snapshot_of({{.id = "p", .state = busy, .held_mib = 5000}}, 1200);
  AdmissionRequest request = request_for(4000);
  request.asked_at = testing::at(970);
  const AdmissionPlan plan = plan_admission(snapshot, request);
  EXPECT_EQ(plan.outcome, refuse);
  EXPECT_NE(plan.explain().find("waited 30 s of 30 s"), std::string::npos) << plan.explain();
}

TEST(AdmissionWait, UnsetAskedAtMeansAskedNow) {
  const Snapshot snapshot = snapshot_of({{.id = "p", .state = busy, .held_mib = 5000}}, 1200);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(4000));
  EXPECT_EQ(plan.outcome, wait);
  EXPECT_EQ(plan.waited, Duration::zero());
}

TEST(AdmissionWait, RefusedAtOnceWhenWaitingIsOff) {
  Snapshot snapshot = snapshot_of({{.id = "p", .state = busy, .held_mib = 5000}}, 1200);
  snapshot.settings.admission_wait = Duration::zero();
  const AdmissionPlan plan = plan_admission(snapshot, request_for(4000));
  EXPECT_EQ(plan.outcome, refuse);
  EXPECT_NE(plan.explain().find("waiting is off"), std::string::npos) << plan.explain();
}

TEST(AdmissionUnknownVram, CountsWhatTheAllocatorReportsAsALowerBound) {
  Snapshot snapshot = snapshot_of({{.id = "u", .cache_mib = 2000}}, 1200);
  only_worker(snapshot).vram_used.reset();  // NVML could not attribute it
  const AdmissionPlan plan = plan_admission(snapshot, request_for(2000));
  EXPECT_EQ(plan.outcome, release_then_grant) << plan.explain();
  EXPECT_EQ(step_names(plan), std::vector<std::string>{"release u"});
  EXPECT_EQ(plan.vram_unknown, std::vector<std::string>{"u"});
  EXPECT_NE(plan.explain().find("NVML has no VRAM figure for 'u'"), std::string::npos);
}

TEST(AdmissionUnknownVram, IsNeverHibernatedSinceItsRamCostIsUnknown) {
  Snapshot snapshot = snapshot_of({{.id = "u", .held_mib = 3000, .hibernatable = true}}, 1200);
  only_worker(snapshot).vram_used.reset();
  const AdmissionPlan plan = plan_admission(snapshot, request_for(3000));
  EXPECT_EQ(plan.outcome, reap_then_grant) << plan.explain();
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_FALSE(plan.steps[0].vram_known);
  EXPECT_EQ(plan.steps[0].gives_back(), mib(3000));  // the context it surely has is not counted
  ASSERT_EQ(plan.not_hibernated.size(), 1u);
  EXPECT_EQ(plan.not_hibernated[0].why, HibernationBlock::vram_unknown);
  EXPECT_NE(plan.explain().find("at least: NVML has no figure"), std::string::npos);
}

TEST(AdmissionUnknownVram, NothingKnownMeansNothingCountedOn) {
  Snapshot snapshot = snapshot_of({{.id = "u", .held_mib = 3000}}, 1200);
  ProcessFigures& u = only_worker(snapshot);
  u.vram_used.reset();
  u.allocator_reserved.reset();
  u.allocator_allocated.reset();
  const AdmissionPlan plan = plan_admission(snapshot, request_for(2000));
  EXPECT_EQ(plan.outcome, refuse) << plan.explain();
  EXPECT_EQ(plan.vram_unknown, std::vector<std::string>{"u"});
}

TEST(AdmissionDevice, UnknownDeviceIsRefused) {
  const Snapshot snapshot = snapshot_of({}, 20000);
  AdmissionRequest request = request_for(100);
  request.device = 3;
  const AdmissionPlan plan = plan_admission(snapshot, request);
  EXPECT_EQ(plan.outcome, refuse);
  EXPECT_FALSE(plan.device_found);
  EXPECT_EQ(plan.explain(), "need 100 MiB on GPU 3: no such device; refused");
}

TEST(AdmissionDevice, ForeignUsageNamedInTheExplanation) {
  const AdmissionPlan plan = plan_admission(snapshot_of({}, 10000, 20000), request_for(4500));
  EXPECT_EQ(plan.free, mib(4576));
  EXPECT_NE(plan.explain().find("processes isohost does not manage hold 20000 MiB"),
            std::string::npos)
      << plan.explain();
}

// Sixteen workers, as `isohost bench admission` plans: the plan is well formed and leaves the
// busy ones alone. (Timing is the bench's job, not a unit test's.)
TEST(AdmissionScale, SixteenWorkers) {
  std::vector<WorkerRow> rows;
  for (int i = 0; i < 16; ++i) {
    rows.push_back({.id = "w" + std::to_string(i),
                    .state = i % 4 == 0 ? busy : idle,
                    .held_mib = static_cast<Bytes>(100 * i),
                    .cache_mib = static_cast<Bytes>(50 * (i % 5)),
                    .last_used_s = i,
                    .hibernatable = i % 3 == 0});
  }
  const AdmissionPlan plan = plan_admission(snapshot_of(rows, 1200), request_for(6000));
  EXPECT_TRUE(plan.grants()) << plan.explain();
  EXPECT_GE(plan.expected, mib(6000));
  for (const AdmissionStep& step : plan.steps) {
    const int index = std::stoi(step.worker_id.substr(1));
    EXPECT_NE(index % 4, 0) << step.worker_id << " is busy";
  }
}

}  // namespace
}  // namespace isohost::memory
