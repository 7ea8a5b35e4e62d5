#pragma once

// The RAM pressure sweep's rhythm: every `interval`, one reading of host RAM and the workers'
// (taken off the loop by whoever `read` hands it to), then `relieve` on the loop with what it
// found. The next sweep is armed when a reading comes back, whatever it found, so sweeps never
// overlap and one that fails does not end them. What to reap is decided elsewhere
// (memory::plan_ram_relief, through the pool's relieve_ram_pressure).
//
//   RamPressureSweep sweep(clock->alarm(io), 2s, read_on_sampling_thread, relieve);
//   sweep.start();  // first reading after one interval
//   ...
//   sweep.stop();   // on the loop; a reading in flight is dropped when it comes back
//
// Loop-thread only.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <memory>

#include "memory/snapshot.hpp"
#include "pool/loop_clock.hpp"
#include "probe/meminfo.hpp"

namespace isohost::pool {

struct PressureReading {
  std::optional<probe::SystemMemory> system;  // unset: meminfo could not be read (`error`)
  std::string error;
  // PSS by worker pid less its pages given back lazily (MADV_FREE: a sleep's kept or prepared
  // host buffer), which the kernel takes back before anything else and a budget does not
  // limit; read only when the cheap figures say a limit may be broken.
  std::map<pid_t, std::uint64_t> pss;
  // When the idle spell of each worker at rest (idle, asleep, hibernated) as the reading began
  // had begun; a worker busy or starting then has none.
  std::map<pid_t, LoopClock::time_point> at_rest_since;
};

// Whether a worker in `state` is at rest: idle, asleep or hibernated, neither busy nor starting.
bool at_rest(memory::WorkerState state);

// The state the relief planner is to see for a worker now in `state`, idle since `idle_since`,
// given when it was at rest since as the reading began (unset: busy or starting). One read
// while busy, or that has run a call since, may hold other than what was read (a call's last
// step may give back pages the reading counted) and counts as busy: not reaped on that
// reading; the next sweep reads it again. Pure.
memory::WorkerState state_for_relief(memory::WorkerState state, LoopClock::time_point idle_since,
                                     std::optional<LoopClock::time_point> at_rest_since);

class RamPressureSweep {
 public:
  // Takes one reading and hands it to `done`, on the loop, once.
  using Read = std::function<void(std::function<void(PressureReading)> done)>;
  // What to do with a reading whose meminfo was read.
  using Relieve = std::function<void(const PressureReading&)>;

  RamPressureSweep(std::unique_ptr<Alarm> alarm, std::chrono::milliseconds interval, Read read,
                   Relieve relieve)
      : alarm_(std::move(alarm)),
        interval_(interval),
        read_(std::move(read)),
        relieve_(std::move(relieve)) {}
  RamPressureSweep(const RamPressureSweep&) = delete;
  RamPressureSweep& operator=(const RamPressureSweep&) = delete;

  void start() {
    stopped_ = false;
    arm();
  }
  void stop() {
    stopped_ = true;
    alarm_->cancel();
  }
  // Readings that came back, failed ones included.
  [[nodiscard]] std::uint64_t sweeps() const { return sweeps_; }

 private:
  void arm();
  void sweep();

  std::unique_ptr<Alarm> alarm_;
  std::chrono::milliseconds interval_;
  Read read_;
  Relieve relieve_;
  bool stopped_ = true;
  std::uint64_t sweeps_ = 0;
};

}  // namespace isohost::pool
