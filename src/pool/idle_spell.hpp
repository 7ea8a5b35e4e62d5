#pragma once

// One environment's idle spell: when its worker last turned idle (ready, or after its last
// call), the deepest idle step taken since (env_state.hpp), and one timer per step still to
// come, each firing once the worker has been idle for its window (docs/lifecycle.md, "Idle
// reap, reap, release").

#include <chrono>
#include <memory>

#include <asio/io_context.hpp>

#include "pool/env_state.hpp"
#include "pool/loop_clock.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

// The idle steps a worker may still take in this spell, by its state and the deepest step it
// took (each at most once, and never a shallower one after a deeper one). Release and sleep
// need it awake; hibernation awake or asleep, where its environment allows; any idle worker,
// hibernated too, is reaped on time. A worker that is not idle (starting, busy, in a step,
// stopping) takes none. Pure.
struct IdleStepsLeft {
  bool release = false;
  bool sleep = false;
  bool hibernate = false;
  bool reap = false;

  bool operator==(const IdleStepsLeft&) const = default;
};

inline IdleStepsLeft idle_steps_left(worker::WorkerState state, IdleStep taken,
                                     bool hibernate_allowed) {
  using worker::WorkerState;
  const bool awake = state == WorkerState::ready;
  const bool asleep = state == WorkerState::asleep;
  if (!awake && !asleep && state != WorkerState::hibernated) return {};
  return {.release = awake && taken < IdleStep::released,
          .sleep = awake && taken < IdleStep::slept,
          .hibernate = (awake || asleep) && hibernate_allowed && taken < IdleStep::hibernated,
          .reap = true};
}

struct IdleSpell {
  IdleSpell(LoopClock& clock, asio::io_context& io)
      : since(clock.now()),
        release(clock.alarm(io)),
        sleep(clock.alarm(io)),
        hibernate(clock.alarm(io)),
        reap(clock.alarm(io)) {}

  // The worker turned idle at `now`: a new spell, no step taken in it yet.
  void begin(LoopClock::time_point now) {
    since = now;
    step = IdleStep::none;
  }
  void cancel_timers() {
    release->cancel();
    sleep->cancel();
    hibernate->cancel();
    reap->cancel();
  }

  LoopClock::time_point since;
  IdleStep step = IdleStep::none;
  std::unique_ptr<Alarm> release;
  std::unique_ptr<Alarm> sleep;
  std::unique_ptr<Alarm> hibernate;
  std::unique_ptr<Alarm> reap;
};

}  // namespace isohost::pool
