#include "pool/crash_backoff.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;

TEST(CrashBackoff, FirstFailuresRestartAtOnceThenDelaysDoubleUpToTheBound) {
  CrashBackoff backoff(3, 1s, 8s);
  const auto t0 = CrashBackoff::Clock::time_point{} + 1000s;
  backoff.record_failure(t0, "a");
  backoff.record_failure(t0, "b");
  EXPECT_FALSE(backoff.refusal(t0, "env"));
  const std::chrono::milliseconds expected[] = {1s, 2s, 4s, 8s, 8s};
  for (auto delay : expected) {
    backoff.record_failure(t0, "exited with code 3");
    EXPECT_EQ(backoff.current_delay(), delay);
    const auto refusal = backoff.refusal(t0 + delay / 2, "env");
    ASSERT_TRUE(refusal);
    EXPECT_THAT(*refusal, ::testing::HasSubstr("exited with code 3"));
    EXPECT_FALSE(backoff.refusal(t0 + delay, "env"));
  }
  backoff.record_success();
  EXPECT_EQ(backoff.consecutive_failures(), 0);
  EXPECT_FALSE(backoff.refusal(t0, "env"));
}

}  // namespace
}  // namespace isohost::pool
