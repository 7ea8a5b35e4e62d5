#include "pool/loop_clock.hpp"

#include <algorithm>
#include <system_error>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace isohost::pool {

namespace {

// asio's timer, with a generation so that a wait which completed but is still queued when the
// alarm is cancelled, set again or destroyed does not fire (asio would run it as a success).
class SteadyAlarm final : public Alarm {
 public:
  explicit SteadyAlarm(asio::io_context& io) : timer_(io) {}
  // The timer's own destructor cancels its wait (asio's cancel(), which may throw, has no
  // place in a destructor); a wait already completed finds generation_ gone.
  ~SteadyAlarm() override = default;

  void set(std::chrono::steady_clock::duration after, Fire fire) override {
    const auto generation = ++*generation_;
    timer_.expires_after(after);
    timer_.async_wait([current = std::weak_ptr<std::uint64_t>(generation_), generation,
                       fire = std::move(fire)](const std::error_code& ec) {
      const auto alive = current.lock();
      if (ec || !alive || *alive != generation) return;
      fire();
    });
  }
  void cancel() override {
    ++*generation_;
    timer_.cancel();
  }

 private:
  asio::steady_timer timer_;
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

class SteadyLoopClock final : public LoopClock {
 public:
  [[nodiscard]] time_point now() const override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Alarm> alarm(asio::io_context& io) override {
    return std::make_unique<SteadyAlarm>(io);
  }
};

}  // namespace

std::shared_ptr<LoopClock> steady_loop_clock() { return std::make_shared<SteadyLoopClock>(); }

class ManualAlarm final : public Alarm {
 public:
  ManualAlarm(ManualClock& clock, asio::io_context& io)
      : clock_(clock), armed_(std::make_shared<ManualClock::Armed>()) {
    armed_->io = &io;
  }
  ~ManualAlarm() override { cancel(); }
  void set(std::chrono::steady_clock::duration after, Fire fire) override {
    clock_.arm(armed_, after, std::move(fire));
  }
  void cancel() override { clock_.disarm(*armed_); }

 private:
  ManualClock& clock_;
  std::shared_ptr<ManualClock::Armed> armed_;
};

LoopClock::time_point ManualClock::now() const {
  const std::lock_guard lock(mutex_);
  return now_;
}

std::unique_ptr<Alarm> ManualClock::alarm(asio::io_context& io) {
  return std::make_unique<ManualAlarm>(*this, io);
}

void ManualClock::arm(const std::shared_ptr<Armed>& armed,
                      std::chrono::steady_clock::duration after, Alarm::Fire fire) {
  const std::lock_guard lock(mutex_);
  ++armed->generation;
  armed->set = true;
  armed->deadline = now_ + after;
  armed->fire = std::move(fire);
  if (std::none_of(alarms_.begin(), alarms_.end(),
                   [&](const std::weak_ptr<Armed>& a) { return a.lock() == armed; })) {
    alarms_.push_back(armed);
  }
  fire_due();
  alarm_set_.notify_all();
}

void ManualClock::disarm(Armed& armed) {
  const std::lock_guard lock(mutex_);
  ++armed.generation;
  armed.set = false;
  armed.fire = nullptr;
}

void ManualClock::advance(std::chrono::steady_clock::duration by) {
  const std::lock_guard lock(mutex_);
  now_ += by;
  fire_due();
}

void ManualClock::fire_due() {
  std::erase_if(alarms_, [](const std::weak_ptr<Armed>& a) { return a.expired(); });
  std::vector<std::shared_ptr<Armed>> due;
  for (const auto& weak : alarms_) {
    auto armed = weak.lock();
    if (armed->set && armed->deadline <= now_) due.push_back(std::move(armed));
  }
  std::sort(due.begin(), due.end(),
            [](const auto& a, const auto& b) { return a->deadline < b->deadline; });
  for (const auto& armed : due) {
    armed->set = false;
    asio::post(*armed->io, [this, weak = std::weak_ptr<Armed>(armed),
                            generation = armed->generation, fire = std::move(armed->fire)] {
      const auto alive = weak.lock();
      if (!alive) return;  // the alarm is gone, and perhaps its clock with it
      {
        const std::lock_guard lock(mutex_);
        if (alive->generation != generation) return;  // cancelled or set again meanwhile
      }
      fire();
    });
  }
}

std::size_t ManualClock::pending() const {
  const std::lock_guard lock(mutex_);
  return std::count_if(alarms_.begin(), alarms_.end(), [](const std::weak_ptr<Armed>& a) {
    const auto armed = a.lock();
    return armed && armed->set;
  });
}

bool ManualClock::wait_for_alarm(std::chrono::steady_clock::duration within,
                                 std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return alarm_set_.wait_for(lock, limit, [&] {
    return std::any_of(alarms_.begin(), alarms_.end(), [&](const std::weak_ptr<Armed>& a) {
      const auto armed = a.lock();
      return armed && armed->set && armed->deadline <= now_ + within;
    });
  });
}

}  // namespace isohost::pool
