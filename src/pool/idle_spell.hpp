#pragma once

// One environment's idle spell: when its worker last turned idle (ready, or after its last
// call), the deepest idle step taken since (env_state.hpp), and one timer per step still to
// come, each firing once the worker has been idle for its window (docs/lifecycle.md, "Idle
// reap, reap, release").

#include <chrono>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "pool/env_state.hpp"

namespace isohost::pool {

struct IdleSpell {
  using Clock = std::chrono::steady_clock;

  explicit IdleSpell(asio::io_context& io) : release(io), sleep(io), hibernate(io), reap(io) {}

  // The worker turned idle at `now`: a new spell, no step taken in it yet.
  void begin(Clock::time_point now) {
    since = now;
    step = IdleStep::none;
  }
  void cancel_timers() {
    release.cancel();
    sleep.cancel();
    hibernate.cancel();
    reap.cancel();
  }

  Clock::time_point since = Clock::now();
  IdleStep step = IdleStep::none;
  asio::steady_timer release;
  asio::steady_timer sleep;
  asio::steady_timer hibernate;
  asio::steady_timer reap;
};

}  // namespace isohost::pool
