// The RAM pressure sweep's rhythm without Python and without /proc: readings are handed back
// when the test says, so arming, the failed reading, overlap and stop are seen one event at a
// time, beside the real-process tests of what a sweep reaps (pool_lifecycle_test.cpp).

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
  // Runs the loop until a reading is asked for (the timer fired); false if none within 10 s.
  bool next_read() {
    const auto before = pending.size();
    io.restart();  // the loop stops each time it runs out of work, as while a reading is out
    while (pending.size() == before) {
      if (io.run_one_for(10s) == 0) return false;
    }
    return true;
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

  asio::io_context io;
  std::vector<std::function<void(PressureReading)>> pending;
  std::vector<std::uint64_t> relieved;  // `available` of each reading relieve saw
  RamPressureSweep sweep{
      io, 1ms,
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
  io.restart();
  io.run_for(20ms);  // up to twenty intervals: nothing may be armed while the reading is out
  EXPECT_EQ(pending.size(), 1u);
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
  io.restart();
  EXPECT_EQ(io.run_for(20ms), 0u) << "a timer was armed after stop";
  EXPECT_TRUE(pending.empty());
}

}  // namespace
}  // namespace isohost::pool
