// The RAM pressure sweep's rhythm without Python, without /proc and without waiting: time moves
// when the test says (ManualClock) and readings are handed back when it says, so arming, the
// failed reading, overlap and stop are seen one event at a time, beside the real-process tests
// of what a sweep reaps (pool_lifecycle_test.cpp).

#include "pool/ram_pressure_sweep.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <vector>

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;

class RamPressureSweepTest : public ::testing::Test {
 protected:
  // Lets one interval pass; true if that asked for a reading.
  bool next_read() {
    const auto before = pending.size();
    clock.advance(kInterval);
    io.restart();  // the loop stops each time it runs out of work, as while a reading is out
    io.poll();
    return pending.size() == before + 1;
  }
  // Hands back the oldest reading asked for, as the sampling thread would post it.
  void answer(PressureReading reading) {
    auto done = std::move(pending.front());
    pending.erase(pending.begin());
    done(std::move(reading));
  }
  static PressureReading with_meminfo(std::uint64_t available) {
    return {.system = probe::SystemMemory{.total = 1000, .available = available}, .pss = {{42, 7}}};
  }

  static constexpr auto kInterval = 2s;
  ManualClock clock;
  asio::io_context io;
  std::vector<std::function<void(PressureReading)>> pending;
  std::vector<std::uint64_t> relieved;  // `available` of each reading relieve saw
  RamPressureSweep sweep{
      clock.alarm(io), kInterval,
      [this](std::function<void(PressureReading)> done) { pending.push_back(std::move(done)); },
      [this](const PressureReading& r) { relieved.push_back(r.system->available); }};
};

TEST_F(RamPressureSweepTest, EachReadingIsRelievedAndArmsTheNext) {
  sweep.start();
  ASSERT_TRUE(next_read());
  answer(with_meminfo(100));
  ASSERT_TRUE(next_read());
  answer(with_meminfo(200));
  EXPECT_EQ(relieved, (std::vector<std::uint64_t>{100, 200}));
  EXPECT_EQ(sweep.sweeps(), 2u);
}

TEST_F(RamPressureSweepTest, AFailedReadingIsSkippedAndSweepsGoOn) {
  sweep.start();
  ASSERT_TRUE(next_read());
  answer({.error = "cannot open /proc/meminfo"});
  EXPECT_TRUE(relieved.empty());
  ASSERT_TRUE(next_read()) << "a failed reading ended the sweeps";
  answer(with_meminfo(300));
  EXPECT_EQ(relieved, (std::vector<std::uint64_t>{300}));
  EXPECT_EQ(sweep.sweeps(), 2u);
}

TEST_F(RamPressureSweepTest, NoNewReadingWhileOneIsOut) {
  sweep.start();
  ASSERT_TRUE(next_read());
  EXPECT_FALSE(next_read()) << "a second reading was asked for while the first was out";
  clock.advance(20 * kInterval);
  io.restart();
  io.poll();
  EXPECT_EQ(pending.size(), 1u);
  EXPECT_EQ(clock.pending(), 0u);
  answer(with_meminfo(100));
  ASSERT_TRUE(next_read());
  EXPECT_EQ(pending.size(), 1u);
}

TEST_F(RamPressureSweepTest, StopDropsTheReadingOutAndArmsNothing) {
  sweep.start();
  ASSERT_TRUE(next_read());
  sweep.stop();
  answer(with_meminfo(100));
  EXPECT_TRUE(relieved.empty());
  EXPECT_EQ(sweep.sweeps(), 0u);
  EXPECT_EQ(clock.pending(), 0u) << "an alarm was set after stop";
  EXPECT_FALSE(next_read());
}

// A reading is what a worker held as it was read: one read while busy, or that has run a call
// since (a new idle spell), is not reaped on it; one at rest throughout is seen as it is.
TEST(StateForRelief, AWorkerIsReapedOnAReadingOnlyIfItRestedThroughIt) {
  using memory::WorkerState;
  const auto spell = std::chrono::steady_clock::time_point{} + 5s;
  const auto later_spell = spell + 3s;
  for (const auto state : {WorkerState::idle, WorkerState::asleep, WorkerState::hibernated}) {
    EXPECT_EQ(state_for_relief(state, spell, spell), state) << to_string(state);
    EXPECT_EQ(state_for_relief(state, later_spell, spell), WorkerState::busy)
        << to_string(state) << ": a call ran since the reading began";
    EXPECT_EQ(state_for_relief(state, spell, std::nullopt), WorkerState::busy)
        << to_string(state) << ": busy as the reading began";
  }
  EXPECT_EQ(state_for_relief(WorkerState::busy, spell, spell), WorkerState::busy);
  EXPECT_EQ(state_for_relief(WorkerState::starting, spell, std::nullopt), WorkerState::starting);
}

}  // namespace
}  // namespace isohost::pool
