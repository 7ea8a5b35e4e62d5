// Which idle steps a worker may still take, without Python or timers: the decision the pool's
// idle timers are armed from (docs/lifecycle.md, "An environment's states").

#include "pool/idle_spell.hpp"

#include <gtest/gtest.h>

namespace isohost::pool {
namespace {

using worker::WorkerState;

constexpr IdleStepsLeft kAll{.release = true, .sleep = true, .hibernate = true, .reap = true};
constexpr IdleStepsLeft kReapOnly{.reap = true};
constexpr IdleStepsLeft kNone{};

TEST(IdleStepsLeft, AFreshSpellOfAnAwakeWorkerHasEveryStep) {
  EXPECT_EQ(idle_steps_left(WorkerState::ready, IdleStep::none, true), kAll);
  EXPECT_EQ(idle_steps_left(WorkerState::ready, IdleStep::none, false),
            (IdleStepsLeft{.release = true, .sleep = true, .reap = true}));
}

TEST(IdleStepsLeft, NoStepIsTakenTwiceNorAShallowerOneAfterADeeperOne) {
  EXPECT_EQ(idle_steps_left(WorkerState::ready, IdleStep::released, true),
            (IdleStepsLeft{.sleep = true, .hibernate = true, .reap = true}));
  // Woken without a call (`isohost wake`) after a sleep or a hibernation in this spell.
  EXPECT_EQ(idle_steps_left(WorkerState::ready, IdleStep::slept, true),
            (IdleStepsLeft{.hibernate = true, .reap = true}));
  EXPECT_EQ(idle_steps_left(WorkerState::ready, IdleStep::hibernated, true), kReapOnly);
}

TEST(IdleStepsLeft, AnAsleepWorkerMayStillBeHibernatedWhereItsEnvironmentAllows) {
  EXPECT_EQ(idle_steps_left(WorkerState::asleep, IdleStep::slept, true),
            (IdleStepsLeft{.hibernate = true, .reap = true}));
  EXPECT_EQ(idle_steps_left(WorkerState::asleep, IdleStep::slept, false), kReapOnly);
  EXPECT_EQ(idle_steps_left(WorkerState::hibernated, IdleStep::hibernated, true), kReapOnly);
}

TEST(IdleStepsLeft, AWorkerThatIsNotIdleTakesNone) {
  for (auto state : {WorkerState::starting, WorkerState::busy, WorkerState::stopping,
                     WorkerState::dead, WorkerState::hibernating, WorkerState::waking}) {
    EXPECT_EQ(idle_steps_left(state, IdleStep::none, true), kNone)
        << worker::worker_state_name(state);
  }
}

}  // namespace
}  // namespace isohost::pool
