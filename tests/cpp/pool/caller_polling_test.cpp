#include "pool/caller_polling.hpp"

#include <sched.h>

#include <gtest/gtest.h>

#include <thread>

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;

TEST(CallerPolling, PollsUntilReadyOrTheWindowEnds) {
  int checks = 0;
  EXPECT_TRUE(poll_for(1s, [&] { return ++checks == 1000; }));
  EXPECT_EQ(checks, 1000);
  checks = 0;
  EXPECT_FALSE(poll_for(0us, [&] { return ++checks > 1; })) << "a zero window checks once";
  EXPECT_EQ(checks, 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(poll_for(2ms, [] { return false; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 2ms);
}

TEST(CallerPolling, AFutureSetByAnotherThreadIsSeenWhetherPolledOrSleptOn) {
  for (const auto delay : {0ms, 20ms}) {  // within the window where there is one, and after it
    std::promise<int> promise;
    auto future = promise.get_future();
    std::thread setter([&] {
      std::this_thread::sleep_for(delay);
      promise.set_value(7);
    });
    wait_polling(future);
    EXPECT_EQ(future.wait_for(0s), std::future_status::ready);
    EXPECT_EQ(future.get(), 7);
    setter.join();
  }
}

// The window depends on the CPUs this thread may run on (sched_getaffinity is per thread).
TEST(CallerPolling, OnlyACallerWithFourCpusOrMorePolls) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(caller_poll_window(), CPU_COUNT(&all) >= 4 ? 100us : 0us);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(caller_poll_window(), 0us);
  ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
}

}  // namespace
}  // namespace isohost::pool
