// The pool's clocks: alarms fire once, on their loop, in deadline order, and never after they
// were cancelled, set again or destroyed, even when their time had come and the fire waited in
// the loop's queue.

#include "pool/loop_clock.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;

class ManualClockTest : public ::testing::Test {
 protected:
  std::size_t run_ready() {
    io.restart();
    return io.poll();
  }
  ManualClock clock;
  asio::io_context io;
  std::string fired;
};

TEST_F(ManualClockTest, AlarmsFireOnTheirLoopOnceTheirTimeHasComeEarliestFirst) {
  const auto start = clock.now();
  auto late = clock.alarm(io);
  auto early = clock.alarm(io);
  late->set(2s, [&] { fired += "late "; });
  early->set(1s, [&] { fired += "early "; });
  clock.advance(999ms);
  run_ready();
  EXPECT_EQ(fired, "");
  EXPECT_EQ(clock.pending(), 2u);
  clock.advance(5s);
  EXPECT_EQ(fired, "") << "fired outside its loop";
  run_ready();
  EXPECT_EQ(fired, "early late ");
  EXPECT_EQ(clock.now() - start, 5999ms);
  EXPECT_EQ(clock.pending(), 0u);
  clock.advance(1h);
  run_ready();
  EXPECT_EQ(fired, "early late ") << "an alarm fired twice";
}

TEST_F(ManualClockTest, CancelledSetAgainOrDestroyedAfterItsTimeCameItDoesNotFire) {
  auto cancelled = clock.alarm(io);
  auto set_again = clock.alarm(io);
  auto destroyed = clock.alarm(io);
  cancelled->set(1s, [&] { fired += "cancelled "; });
  set_again->set(1s, [&] { fired += "first "; });
  destroyed->set(1s, [&] { fired += "destroyed "; });
  clock.advance(1s);  // all three fires now wait in the loop's queue
  cancelled->cancel();
  set_again->set(1s, [&] { fired += "second "; });
  destroyed.reset();
  run_ready();
  EXPECT_EQ(fired, "");
  clock.advance(1s);
  run_ready();
  EXPECT_EQ(fired, "second ");
}

TEST_F(ManualClockTest, AnAlarmNotInTheFutureFiresAtTheNextRunOfItsLoop) {
  auto alarm = clock.alarm(io);
  alarm->set(-1s, [&] { fired += "now "; });
  run_ready();
  EXPECT_EQ(fired, "now ");
}

TEST_F(ManualClockTest, WaitForAlarmSeesOnlyAlarmsDueWithinTheSpan) {
  auto alarm = clock.alarm(io);
  alarm->set(1h, [] {});
  EXPECT_FALSE(clock.wait_for_alarm(59min, 0ms));
  EXPECT_TRUE(clock.wait_for_alarm(1h, 0ms));
}

TEST(SteadyLoopClock, AnAlarmFiresOnceAndACancelledOneNever) {
  asio::io_context io;
  auto clock = steady_loop_clock();
  std::string fired;
  auto kept = clock->alarm(io);
  auto cancelled = clock->alarm(io);
  kept->set(1ms, [&] { fired += "kept "; });
  cancelled->set(0ms, [&] { fired += "cancelled "; });
  cancelled->cancel();
  io.run();  // returns once nothing is left to wait for
  EXPECT_EQ(fired, "kept ");
}

}  // namespace
}  // namespace isohost::pool
