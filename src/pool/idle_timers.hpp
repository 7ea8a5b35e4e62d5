#pragma once

// The timers of one environment's idle spell, one per idle step (docs/lifecycle.md, "Idle
// reap, reap, release"): each fires once the worker has been idle for its window.

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

namespace isohost::pool {

struct IdleTimers {
  explicit IdleTimers(asio::io_context& io) : release(io), sleep(io), hibernate(io), reap(io) {}

  void cancel() {
    release.cancel();
    sleep.cancel();
    hibernate.cancel();
    reap.cancel();
  }

  asio::steady_timer release;
  asio::steady_timer sleep;
  asio::steady_timer hibernate;
  asio::steady_timer reap;
};

}  // namespace isohost::pool
