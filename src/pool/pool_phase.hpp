#pragma once

// Where the pool is in its life: serving -> shutting_down (request_shutdown: every worker asked
// to end) -> stopped (the last one reaped, the zygotes gone; the loop then runs out of work).
// What waits for the stop (the control server closing its socket) runs once, when it comes.
// Loop thread only.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace isohost::pool {

class PoolPhase {
 public:
  [[nodiscard]] bool serving() const { return phase_ == Phase::serving; }
  [[nodiscard]] bool stopped() const { return phase_ == Phase::stopped; }
  // serving -> shutting_down; false if the pool had already left serving.
  bool begin_shutdown() {
    if (phase_ != Phase::serving) return false;
    phase_ = Phase::shutting_down;
    return true;
  }
  // -> stopped, then every hook, once.
  void stop() {
    phase_ = Phase::stopped;
    for (auto& hook : std::exchange(on_stopped_, {})) hook();
  }
  // Runs `hook` when the pool stops, or now if it has.
  void on_stopped(std::function<void()> hook) {
    if (stopped()) {
      hook();
    } else {
      on_stopped_.push_back(std::move(hook));
    }
  }

 private:
  enum class Phase : std::uint8_t { serving, shutting_down, stopped };
  Phase phase_ = Phase::serving;
  std::vector<std::function<void()>> on_stopped_;
};

}  // namespace isohost::pool
