#include "pool/ram_pressure_sweep.hpp"

#include <spdlog/spdlog.h>

namespace isohost::pool {

void RamPressureSweep::arm() {
  alarm_->set(interval_, [this] {
    if (!stopped_) sweep();
  });
}

void RamPressureSweep::sweep() {
  // The owner's loop runs every reading's `done` before it ends (the sampling thread holds it
  // open), so the sweep outlives them.
  read_([this](PressureReading reading) {
    if (stopped_) return;
    arm();
    ++sweeps_;
    if (!reading.system) {
      spdlog::warn("RAM pressure sweep skipped: {}", reading.error);
      return;
    }
    relieve_(reading);
  });
}

bool at_rest(memory::WorkerState state) {
  return state != memory::WorkerState::busy && state != memory::WorkerState::starting;
}

memory::WorkerState state_for_relief(memory::WorkerState state, LoopClock::time_point idle_since,
                                     std::optional<LoopClock::time_point> at_rest_since) {
  if (at_rest(state) && at_rest_since != idle_since) return memory::WorkerState::busy;
  return state;
}

}  // namespace isohost::pool
