#pragma once

// The time the pool's own timers and decisions read: idle steps, crash back-off, admission
// rounds and grant lifetimes, the RAM pressure sweep. Steady time in every host; in tests, time
// that moves only when told (ManualClock), so an idle reap an hour away or a back-off of 30 s is
// tested in microseconds and without sleeping. A worker's start and call deadlines keep real
// time: they wait on the outside world.
//
//   std::shared_ptr<LoopClock> clock = steady_loop_clock();
//   std::unique_ptr<Alarm> alarm = clock->alarm(io);
//   alarm->set(2s, [] { ... });  // on io's thread, once, unless cancelled or set again first

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <asio/io_context.hpp>

namespace isohost::pool {

// One wake-up on a loop; set and cancelled on that loop's thread.
class Alarm {
 public:
  using Fire = std::function<void()>;
  virtual ~Alarm() = default;  // cancels: `fire` never runs after
  Alarm() = default;
  Alarm(const Alarm&) = delete;
  Alarm& operator=(const Alarm&) = delete;

  // Runs `fire` on the loop once `after` has passed (at once if it is not positive), in place
  // of whatever was set before.
  virtual void set(std::chrono::steady_clock::duration after, Fire fire) = 0;
  // `fire` does not run, even if its time has come and it waits in the loop's queue.
  virtual void cancel() = 0;
};

class LoopClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~LoopClock() = default;
  [[nodiscard]] virtual time_point now() const = 0;
  virtual std::unique_ptr<Alarm> alarm(asio::io_context& io) = 0;
};

// std::chrono::steady_clock and asio's timers.
std::shared_ptr<LoopClock> steady_loop_clock();

// Time that stands still until `advance` moves it; it starts at the steady time of its making.
// Alarms that come due fire on their own loops, earliest deadline first. Any thread.
class ManualClock final : public LoopClock {
 public:
  ManualClock() = default;
  [[nodiscard]] time_point now() const override;
  std::unique_ptr<Alarm> alarm(asio::io_context& io) override;

  void advance(std::chrono::steady_clock::duration by);
  // Alarms set and neither fired nor cancelled.
  [[nodiscard]] std::size_t pending() const;
  // Waits (for real, up to `limit`) until some code sets an alarm due at or before
  // now() + `within`: a test advances time only once the pool has armed what it should.
  bool wait_for_alarm(std::chrono::steady_clock::duration within,
                      std::chrono::milliseconds limit = std::chrono::seconds(30));

  // One alarm's state; the clock sees it weakly (loop_clock.cpp).
  struct Armed {
    asio::io_context* io = nullptr;
    bool set = false;
    std::uint64_t generation = 0;
    time_point deadline;
    Alarm::Fire fire;
  };

 private:
  friend class ManualAlarm;
  void arm(const std::shared_ptr<Armed>& armed, std::chrono::steady_clock::duration after,
           Alarm::Fire fire);
  void disarm(Armed& armed);
  // Posts every due alarm's fire to its loop; the mutex is held.
  void fire_due();

  mutable std::mutex mutex_;
  std::condition_variable alarm_set_;
  time_point now_ = std::chrono::steady_clock::now();
  std::vector<std::weak_ptr<Armed>> alarms_;
};

}  // namespace isohost::pool
