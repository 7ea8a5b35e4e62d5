// The planner choosing by price: sleep against hibernation and reap, host RAM for what sleeps
// and hibernations take in, asleep workers, the driver-only path, ties, and the words that
// show the arithmetic. Figures in MiB, prices at the default rates (TransferRates) unless a
// test sets others: sleep 0.05 s/GiB each way, the driver 0.45 out and 0.18 in, a reap 5 s
// (no start measured) + 0.5 s per GiB held.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/admission.hpp"
#include "memory_fixtures.hpp"

namespace isohost::memory {
namespace {

using testing::request_for;
using testing::snapshot_of;
using testing::step_names;
using testing::WorkerRow;
using enum AdmissionOutcome;
using enum WorkerState;

constexpr double kGiBs = static_cast<double>(kGiB);

// Seconds to move `mib_moved` at `seconds_per_gib`.
double at_rate(Bytes mib_moved, double seconds_per_gib) {
  return static_cast<double>(mib(mib_moved)) / kGiBs * seconds_per_gib;
}

// A worker with a 10 GiB model whose runtime can sleep and whose driver can checkpoint.
WorkerRow sleeper(std::string id, int last_used_s = 0) {
  return {.id = std::move(id),
          .held_mib = 10240,
          .last_used_s = last_used_s,
          .hibernatable = true,
          .can_sleep = true};
}

// One worker, asleep: its 10 GiB in its host RAM, its 612 MiB context on the card.
WorkerRow asleep_worker(std::string id, bool hibernatable) {
  return {.id = std::move(id),
          .state = asleep,
          .hibernatable = hibernatable,
          .pss_mib = 600 + 10240,
          .can_sleep = true,
          .slept_mib = 10240};
}

void set_ram(Snapshot& s, Bytes available_mib, Bytes floor_mib) {
  s.host_ram.mem_available = mib(available_mib);
  s.settings.ram_floor = mib(floor_mib);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> alternative_names(const AdmissionPlan& plan) {
  std::vector<std::string> names;
  for (const AdmissionStep& step : plan.alternatives) {
    names.push_back(std::string(to_string(step.kind)) + " " + step.worker_id);
  }
  return names;
}

TEST(AdmissionCost, SleepChosenOverHibernateAndReapWhenItCovers) {
  // Short by 7312 MiB: the sleep gives 10240 MiB for 1.0 s, the hibernation 10852 MiB for
  // 1.0 s + the context at the driver's rates, the reap 10852 MiB for 5 s + 5 s.
  const AdmissionPlan plan = plan_admission(snapshot_of({sleeper("a")}, 1200), request_for(8000));
  EXPECT_EQ(plan.outcome, sleep_then_grant) << plan.explain();
  ASSERT_EQ(step_names(plan), std::vector<std::string>{"sleep a"});
  const AdmissionStep& sleep = plan.steps.front();
  EXPECT_EQ(sleep.held, mib(10240));
  EXPECT_EQ(sleep.fixed, 0u);  // the context stays on the card
  EXPECT_EQ(sleep.takes_in_ram(), mib(10240));
  EXPECT_DOUBLE_EQ(sleep.seconds_now, 0.5);
  EXPECT_DOUBLE_EQ(sleep.seconds_to_undo, 0.5);
  EXPECT_EQ(plan.expected, mib(688 + 10240));
  EXPECT_EQ(plan.slept_bytes(), mib(10240));
  EXPECT_EQ(alternative_names(plan), (std::vector<std::string>{"hibernate a", "reap a"}));
  EXPECT_DOUBLE_EQ(plan.alternatives[0].seconds(), 1.0 + at_rate(612, 0.45 + 0.18));
  EXPECT_DOUBLE_EQ(plan.alternatives[1].seconds(), 5.0 + 5.0);
  EXPECT_TRUE(plan.not_hibernated.empty());
}

TEST(AdmissionCost, SleepTakesItsCacheAlongAndGoesAfterAnotherWorkersRelease) {
  // b's cache (free) and a's sleep together cover 2000 + 4000 + 500; a's hibernation or reap
  // alone would cover too, at a higher price.
  const Snapshot snapshot = snapshot_of(
      {{.id = "a", .held_mib = 4000, .cache_mib = 500, .hibernatable = true, .can_sleep = true},
       {.id = "b", .cache_mib = 2000}},
      1200);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(688 + 6300));
  EXPECT_EQ(plan.outcome, sleep_then_grant) << plan.explain();
  EXPECT_EQ(step_names(plan), (std::vector<std::string>{"release b", "sleep a"}));
  EXPECT_EQ(plan.steps[1].gives_back(), mib(4500));
  EXPECT_EQ(plan.steps[1].takes_in_ram(), mib(4000));  // the cache is dropped, not moved
}

TEST(AdmissionCost, HibernateChosenWhenSleepAloneIsShort) {
  // Short by 10540 MiB: the sleep gives 10240, so the context must go too.
  const AdmissionPlan plan =
      plan_admission(snapshot_of({sleeper("a")}, 1200), request_for(688 + 10540));
  EXPECT_EQ(plan.outcome, hibernate_then_grant) << plan.explain();
  ASSERT_EQ(step_names(plan), std::vector<std::string>{"hibernate a"});
  const AdmissionStep& hibernation = plan.steps.front();
  EXPECT_EQ(hibernation.gives_back(), mib(10852));
  EXPECT_DOUBLE_EQ(hibernation.seconds_now, 0.5 + at_rate(612, 0.45));  // sleep, then driver
  EXPECT_DOUBLE_EQ(hibernation.seconds_to_undo, at_rate(612, 0.18) + 0.5);
  ASSERT_EQ(hibernation.cost.now.size(), 2u);
  EXPECT_EQ(hibernation.cost.now[0].source, CostSource::sleep_out);
  EXPECT_EQ(hibernation.cost.now[0].bytes, mib(10240));
  EXPECT_EQ(hibernation.cost.now[1].source, CostSource::driver_out);
  EXPECT_EQ(hibernation.cost.now[1].bytes, mib(612));
  // The sleep is shown too: its 10240 MiB are what the reader sees fall short.
  EXPECT_EQ(alternative_names(plan), (std::vector<std::string>{"sleep a", "reap a"}));
}

TEST(AdmissionCost, ReapChosenWhenHostRamCannotTakeInASleep) {
  Snapshot snapshot = snapshot_of({sleeper("a")}, 1200);
  set_ram(snapshot, 8000, 0);  // 10240 MiB would not fit
  const AdmissionPlan plan = plan_admission(snapshot, request_for(8000));
  EXPECT_EQ(plan.outcome, reap_then_grant) << plan.explain();
  EXPECT_EQ(step_names(plan), std::vector<std::string>{"reap a"});
  ASSERT_EQ(plan.not_hibernated.size(), 2u) << plan.explain();
  EXPECT_EQ(plan.not_hibernated[0].passed_over, StepKind::hibernate);
  EXPECT_EQ(plan.not_hibernated[1].passed_over, StepKind::sleep);
  EXPECT_EQ(plan.not_hibernated[1].bytes, mib(10240));
  EXPECT_EQ(plan.not_hibernated[1].why, HibernationBlock::exceeds_available);
  EXPECT_TRUE(contains(plan.explain(),
                       "reaped, not slept: 'a' (10240 MiB: more than "
                       "MemAvailable 8000 MiB)"))
      << plan.explain();
}

TEST(AdmissionCost, HostRamIsCheckedForAllSleepsTogether) {
  // Each sleep fits alone (6000 MiB), both do not (12000 > 8000): one sleeps, the other is
  // reaped. The two cost the same either way round; a was used less recently, so it sleeps.
  Snapshot snapshot =
      snapshot_of({{.id = "a", .held_mib = 6000, .last_used_s = 10, .can_sleep = true},
                   {.id = "b", .held_mib = 6000, .last_used_s = 20, .can_sleep = true}},
                  1200);
  set_ram(snapshot, 8000, 0);
  const AdmissionPlan plan = plan_admission(snapshot, request_for(688 + 11000));
  EXPECT_EQ(step_names(plan), (std::vector<std::string>{"sleep a", "reap b"})) << plan.explain();
  EXPECT_EQ(plan.ram_taken_in(), mib(6000));
  ASSERT_EQ(plan.not_hibernated.size(), 2u) << plan.explain();  // b: hibernation, sleep
  EXPECT_EQ(plan.not_hibernated[1].worker_id, "b");
  EXPECT_EQ(plan.not_hibernated[1].passed_over, StepKind::sleep);
  EXPECT_EQ(plan.not_hibernated[1].why, HibernationBlock::exceeds_available);
}

TEST(AdmissionCost, ReapChosenOverSleepWhenAFreshStartIsCheaper) {
  // A slow bus (1 s/GiB each way) and a worker that starts in 0.1 s with 256 MiB to build:
  // the sleep costs 0.25 + 0.25 s, the reap 0.1 s + 0.125 s reload.
  Snapshot snapshot = snapshot_of(
      {{.id = "a", .held_mib = 256, .hibernatable = true, .can_sleep = true, .start_s = 0.1}},
      1200);
  snapshot.settings.rates.sleep_out = 1.0;
  snapshot.settings.rates.sleep_in = 1.0;
  const AdmissionPlan plan = plan_admission(snapshot, request_for(688 + 200));
  EXPECT_EQ(plan.outcome, reap_then_grant) << plan.explain();
  EXPECT_EQ(step_names(plan), std::vector<std::string>{"reap a"});
  EXPECT_DOUBLE_EQ(plan.steps.front().seconds_to_undo, 0.1 + 0.125);
  EXPECT_EQ(plan.steps.front().cost.undo.front().source, CostSource::start_measured);
  EXPECT_TRUE(plan.not_hibernated.empty()) << "a cheaper reap is a choice, not a block";
  EXPECT_EQ(alternative_names(plan), (std::vector<std::string>{"sleep a", "hibernate a"}));
  EXPECT_DOUBLE_EQ(plan.alternatives[0].seconds(), 0.5);
}

TEST(AdmissionCost, AsleepWorkerIsHibernatedMovingOnlyWhatIsLeftOnTheCard) {
  // Its next call pays the wake from sleep anyway: the hibernation costs the context at the
  // driver's rates (0.38 s); the reap 5 s + 5 s reload - 0.5 s wake it no longer owes.
  const AdmissionPlan plan =
      plan_admission(snapshot_of({asleep_worker("z", true)}, 1200), request_for(688 + 500));
  EXPECT_EQ(plan.outcome, hibernate_then_grant) << plan.explain();
  ASSERT_EQ(step_names(plan), std::vector<std::string>{"hibernate z"});
  const AdmissionStep& hibernation = plan.steps.front();
  EXPECT_EQ(hibernation.state, asleep);
  EXPECT_EQ(hibernation.takes_in_ram(), mib(612));
  EXPECT_DOUBLE_EQ(hibernation.seconds(), at_rate(612, 0.45 + 0.18));
  ASSERT_EQ(plan.alternatives.size(), 1u);  // never a sleep or a release
  EXPECT_EQ(plan.alternatives[0].kind, StepKind::reap);
  EXPECT_DOUBLE_EQ(plan.alternatives[0].seconds(), 5.0 + 5.0 - 0.5);
}

TEST(AdmissionCost, AsleepWorkerIsReapedWhenItCannotBeHibernated) {
  const AdmissionPlan plan =
      plan_admission(snapshot_of({asleep_worker("z", false)}, 1200), request_for(688 + 500));
  EXPECT_EQ(plan.outcome, reap_then_grant) << plan.explain();
  ASSERT_EQ(step_names(plan), std::vector<std::string>{"reap z"});
  EXPECT_DOUBLE_EQ(plan.steps.front().seconds_to_undo, 9.5);
  EXPECT_TRUE(contains(plan.explain(),
                       "reaping asleep 'z' (fixed 612 MiB + held 0 MiB) [now 0 s; to undo 5.00 s "
                       "start (none measured) + 5.00 s reload (10240 MiB at 0.50 s/GiB) - 0.50 s "
                       "wake it owes anyway (10240 MiB at 0.05 s/GiB) = 9.50 s]"))
      << plan.explain();
}

TEST(AdmissionCost, AsleepWorkerIsNeverReleasedNorSleptAgain) {
  // What sleep could not move (50 MiB allocated) and an allocator cache of 100 MiB: a release
  // would cover the 100 MiB short, but an asleep worker has nothing for one to give; its
  // hibernation moves all it holds.
  WorkerRow z = asleep_worker("z", true);
  z.held_mib = 50;
  z.cache_mib = 100;
  const AdmissionPlan plan = plan_admission(snapshot_of({z}, 1200), request_for(688 + 100));
  ASSERT_EQ(step_names(plan), std::vector<std::string>{"hibernate z"}) << plan.explain();
  EXPECT_EQ(plan.steps.front().gives_back(), mib(762));
  EXPECT_EQ(plan.steps.front().takes_in_ram(), mib(762));
  for (const AdmissionStep& step : plan.alternatives) {
    EXPECT_NE(step.kind, StepKind::sleep);
    EXPECT_NE(step.kind, StepKind::release);
  }
}

TEST(AdmissionCost, WorkerWithoutSleepIsHibernatedByTheDriverAtDriverRates) {
  const AdmissionPlan plan = plan_admission(
      snapshot_of({{.id = "a", .held_mib = 2000, .hibernatable = true}}, 1200), request_for(2500));
  EXPECT_EQ(plan.outcome, hibernate_then_grant) << plan.explain();
  ASSERT_EQ(plan.steps.size(), 1u);
  const StepCost& cost = plan.steps.front().cost;
  ASSERT_EQ(cost.now.size(), 1u);
  EXPECT_EQ(cost.now[0].source, CostSource::driver_out);
  EXPECT_EQ(cost.now[0].bytes, mib(2612));
  ASSERT_EQ(cost.undo.size(), 1u);
  EXPECT_EQ(cost.undo[0].source, CostSource::driver_in);
  EXPECT_DOUBLE_EQ(plan.steps.front().seconds_now, at_rate(2612, 0.45));
  EXPECT_DOUBLE_EQ(plan.steps.front().seconds_to_undo, at_rate(2612, 0.18));
  EXPECT_EQ(alternative_names(plan), std::vector<std::string>{"reap a"});
}

TEST(AdmissionCost, TiesGoToTheLeastRecentlyUsedThenTheName) {
  const auto sleeping = [](std::vector<WorkerRow> rows) {
    return step_names(plan_admission(snapshot_of(rows, 1200), request_for(8000)));
  };
  EXPECT_EQ(sleeping({sleeper("a", 20), sleeper("b", 10)}), std::vector<std::string>{"sleep b"});
  EXPECT_EQ(sleeping({sleeper("b", 10), sleeper("a", 20)}), std::vector<std::string>{"sleep b"});
  EXPECT_EQ(sleeping({sleeper("b", 10), sleeper("a", 10)}), std::vector<std::string>{"sleep a"});
  EXPECT_EQ(sleeping({sleeper("a", 10), sleeper("b", 10)}), std::vector<std::string>{"sleep a"});
}

TEST(AdmissionCost, OutcomeNamesSleep) {
  EXPECT_EQ(to_string(sleep_then_grant), "sleep_then_grant");
  EXPECT_EQ(to_string(StepKind::sleep), "sleep");
  EXPECT_LT(release_then_grant, sleep_then_grant);
  EXPECT_LT(sleep_then_grant, hibernate_then_grant);
  AdmissionPlan plan;
  plan.outcome = sleep_then_grant;
  EXPECT_TRUE(plan.grants());
}

TEST(AdmissionCostExplain, ShowsEachStepsArithmeticAndTheWaysNotTaken) {
  const AdmissionPlan plan = plan_admission(snapshot_of({sleeper("a")}, 1200), request_for(8000));
  const std::string words = plan.explain();
  for (const char* part :
       {"sleeping idle 'a' (held 10240 MiB into host RAM) [now 0.50 s sleep out (10240 MiB at "
        "0.05 s/GiB); to undo 0.50 s sleep in (10240 MiB at 0.05 s/GiB)]",
        "gives 688 MiB + 10240 MiB = 10928 MiB >= 8000 MiB",
        "host RAM takes in 10240 MiB: MemAvailable 32768 MiB - 10240 MiB = 22528 MiB",
        "costs 0.50 s now + 0.50 s to undo = 1.00 s, the least of the ways open to 1 idle worker "
        "(every combination weighed)",
        "not chosen: hibernating 'a' would give 10852 MiB for 0.50 s sleep out (10240 MiB at "
        "0.05 s/GiB) + 0.27 s driver out (612 MiB at 0.45 s/GiB) + 0.11 s driver in (612 MiB at "
        "0.18 s/GiB) + 0.50 s sleep in (10240 MiB at 0.05 s/GiB) = 1.38 s",
        "reaping 'a' would give 10852 MiB for 5.00 s start (none measured) + 5.00 s reload "
        "(10240 MiB at 0.50 s/GiB) = 10.00 s",
        "sleep, then grant"}) {
    EXPECT_TRUE(contains(words, part)) << part << "\nnot in: " << words;
  }
}

TEST(AdmissionCostExplain, HibernationShowsSleepThenTheDriver) {
  const AdmissionPlan plan =
      plan_admission(snapshot_of({sleeper("a")}, 1200), request_for(688 + 10540));
  EXPECT_TRUE(contains(plan.explain(),
                       "hibernating idle 'a' (fixed 612 MiB + held 10240 MiB into host RAM) [now "
                       "0.50 s sleep out (10240 MiB at 0.05 s/GiB) + 0.27 s driver out (612 MiB "
                       "at 0.45 s/GiB) = 0.77 s; to undo 0.11 s driver in (612 MiB at 0.18 s/GiB) "
                       "+ 0.50 s sleep in (10240 MiB at 0.05 s/GiB) = 0.61 s]"))
      << plan.explain();
}

TEST(AdmissionCostExplain, SaysWhenAMeasuredStartWasUsed) {
  const AdmissionPlan plan = plan_admission(
      snapshot_of({{.id = "a", .held_mib = 1024, .start_s = 2.5}}, 1200), request_for(1500));
  EXPECT_TRUE(contains(plan.explain(),
                       "to undo 2.50 s start (its mean so far) + 0.50 s reload "
                       "(1024 MiB at 0.50 s/GiB) = 3.00 s]"))
      << plan.explain();
}

// Beyond kExhaustiveCandidates idle workers a greedy pass chooses; its plan still covers, acts
// on each worker once, and says how it was chosen.
TEST(AdmissionCostScale, GreedyBeyondTheCandidateLimitCovers) {
  std::vector<WorkerRow> rows;
  for (int i = 0; i < static_cast<int>(kExhaustiveCandidates) + 2; ++i) {
    rows.push_back({.id = "w" + std::to_string(i),
                    .held_mib = static_cast<Bytes>(300 + 97 * i),
                    .cache_mib = static_cast<Bytes>(40 * (i % 3)),
                    .last_used_s = i,
                    .hibernatable = i % 2 == 0,
                    .can_sleep = i % 3 != 0});
  }
  for (const Bytes need_mib : {1500, 5000, 9000}) {
    const AdmissionPlan plan = plan_admission(snapshot_of(rows, 1200), request_for(need_mib));
    ASSERT_TRUE(plan.grants()) << plan.explain();
    EXPECT_FALSE(plan.searched_every_combination);
    EXPECT_EQ(plan.candidates, rows.size());
    EXPECT_GE(plan.expected, mib(need_mib));
    Bytes given = 0;
    for (const AdmissionStep& step : plan.steps) given += step.gives_back();
    EXPECT_EQ(plan.grantable + given, plan.expected);
    EXPECT_TRUE(contains(plan.explain(), "chosen greedily by seconds per byte among " +
                                             std::to_string(rows.size()) + " idle workers"));
  }
}

}  // namespace
}  // namespace isohost::memory
