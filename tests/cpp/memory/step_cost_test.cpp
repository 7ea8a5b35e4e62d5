// The price of each step on one worker: which bytes move at which rate, both ways.

#include "memory/step_cost.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace isohost::memory {
namespace {

// 1 GiB context, 4 GiB held, 1 GiB cache: round figures for round prices.
VramHolding worker(WorkerState state = WorkerState::idle, bool can_sleep = true) {
  return {.worker_id = "w",
          .state = state,
          .fixed = kGiB,
          .held = 4 * kGiB,
          .reclaimable = kGiB,
          .can_sleep = can_sleep};
}

TEST(StepCost, ReleaseCostsNothing) {
  const StepCost cost = price_step(StepKind::release, worker(), TransferRates{});
  EXPECT_TRUE(cost.now.empty());
  EXPECT_TRUE(cost.undo.empty());
  EXPECT_EQ(cost.seconds(), 0.0);
}

TEST(StepCost, SleepMovesHeldAtBusRatesBothWays) {
  const StepCost cost =
      price_step(StepKind::sleep, worker(), {.sleep_out = 0.02, .sleep_in = 0.03});
  EXPECT_DOUBLE_EQ(cost.seconds_now(), 4 * 0.02);
  EXPECT_DOUBLE_EQ(cost.seconds_to_undo(), 4 * 0.03);
}

TEST(StepCost, HibernationSleepsFirstWhereItCan) {
  const TransferRates rates{};
  const StepCost sleeps = price_step(StepKind::hibernate, worker(), rates);
  EXPECT_DOUBLE_EQ(sleeps.seconds_now(), 4 * rates.sleep_out + 1 * rates.driver_out);
  EXPECT_DOUBLE_EQ(sleeps.seconds_to_undo(), 1 * rates.driver_in + 4 * rates.sleep_in);
  const StepCost driver_only =
      price_step(StepKind::hibernate, worker(WorkerState::idle, false), rates);
  EXPECT_DOUBLE_EQ(driver_only.seconds_now(), 5 * rates.driver_out);
  EXPECT_DOUBLE_EQ(driver_only.seconds_to_undo(), 5 * rates.driver_in);
}

TEST(StepCost, ReapStartsAFreshWorkerAndRebuildsWhatItHeld) {
  VramHolding measured = worker();
  measured.start_time = std::chrono::milliseconds(1500);
  const StepCost cost = price_step(StepKind::reap, measured, {.reload = 0.25});
  EXPECT_EQ(cost.seconds_now(), 0.0);
  EXPECT_DOUBLE_EQ(cost.seconds_to_undo(), 1.5 + 4 * 0.25);
  EXPECT_EQ(cost.undo.front().source, CostSource::start_measured);
  EXPECT_EQ(price_step(StepKind::reap, worker(), {}).undo.front().source,
            CostSource::start_assumed);
}

TEST(StepCost, AsleepWorkersOwnTheirWakeAlready) {
  VramHolding z = worker(WorkerState::asleep);
  z.held = 0;
  z.reclaimable = 0;
  z.slept_bytes = 8 * kGiB;
  const TransferRates rates{};
  EXPECT_DOUBLE_EQ(price_step(StepKind::hibernate, z, rates).seconds(),
                   rates.driver_out + rates.driver_in);
  EXPECT_DOUBLE_EQ(price_step(StepKind::reap, z, rates).seconds_to_undo(),
                   rates.start + 8 * rates.reload - 8 * rates.sleep_in);
  // A credit cancels a cost but never pays for the step.
  EXPECT_EQ(
      price_step(StepKind::reap, z, {.sleep_in = 10, .reload = 0, .start = 1}).seconds_to_undo(),
      0.0);
}

}  // namespace
}  // namespace isohost::memory
