// The live view's counters and histograms (pool/env_metrics.hpp): the arithmetic alone, then
// what a real pool counts as its workers call, crash, release and are reaped.

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>

#include "control/status_json.hpp"
#include "pool/env_metrics.hpp"
#include "pool/pool.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;
using isohost::test_support::call_error;
using isohost::test_support::fixture_config;

TEST(DurationHistogram, CountsCumulativelyPerUpperBoundWithEveryObservationInTheCount) {
  DurationHistogram h;
  h.observe(0.0004);  // first bucket
  h.observe(0.001);   // on a bound: counted in that bucket, as Prometheus's `le` says
  h.observe(0.3);
  h.observe(500);  // past the last bound: only in the count (+Inf)
  const auto json = h.to_json();
  EXPECT_EQ(json["count"], 4);
  EXPECT_DOUBLE_EQ(json["sum"].get<double>(), 0.0004 + 0.001 + 0.3 + 500);
  const auto& buckets = json["buckets"];
  ASSERT_EQ(buckets.size(), DurationHistogram::kBounds.size());
  EXPECT_EQ(buckets[0], nlohmann::ordered_json({0.0005, 1}));
  EXPECT_EQ(buckets[1], nlohmann::ordered_json({0.001, 2}));
  EXPECT_EQ(buckets[7], nlohmann::ordered_json({0.1, 2}));
  EXPECT_EQ(buckets[8], nlohmann::ordered_json({0.25, 2}));
  EXPECT_EQ(buckets[9], nlohmann::ordered_json({0.5, 3}));
  EXPECT_EQ(buckets.back(), nlohmann::ordered_json({120.0, 3}));
}

TEST(DurationHistogram, ANegativeOrNonFiniteFigureCountsAsZeroSoCountsStillAgree) {
  DurationHistogram h;
  h.observe(-1);
  h.observe(std::numeric_limits<double>::quiet_NaN());
  h.observe(std::numeric_limits<double>::infinity());
  EXPECT_EQ(h.count(), 3U);
  EXPECT_EQ(h.sum(), 0);
  EXPECT_EQ(h.to_json()["buckets"][0][1], 3);
}

TEST(EnvMetrics, TheLastAdmissionStepSaysWhatForWhomAndHowLongAgo) {
  EnvMetrics m;
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(m.to_json(now)["last_admission"].is_null());
  m.last_admission = AdmissionAction{.action = "hibernated", .for_env = "b", .at = now - 2500ms};
  const auto json = m.to_json(now)["last_admission"];
  EXPECT_EQ(json["action"], "hibernated");
  EXPECT_EQ(json["for"], "b");
  EXPECT_DOUBLE_EQ(json["seconds_ago"].get<double>(), 2.5);
}

PoolMetrics metrics_of(Pool& pool, std::chrono::milliseconds max_age) {
  return pool.metrics(max_age).get();
}

TEST(PoolMetrics, CountsCallsErrorsStartsCrashesReleasesAndReapsPerEnvironment) {
  Pool pool(fixture_config({"a", "b"}));
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 3}).get(), 5);
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 1}).get(), 2);
  call_error(pool.call("a", "isohost_test_funcs:raises", {"no"}));
  call_error(pool.call("a", "isohost_test_funcs:crash_with_code", {3}));  // a crash mid-call
  pool.call("a", "isohost_test_funcs:pid").get();                         // generation 2
  pool.submit(Request{Request::Kind::release, "a"}).get();
  pool.submit(Request{Request::Kind::reap, "a"}).get();

  const auto m = metrics_of(pool, 0ms);
  ASSERT_EQ(m.envs.size(), 2U);  // b is listed, though it never ran
  const auto& a = m.envs.at("a");
  EXPECT_EQ(a.calls, 5U);
  EXPECT_EQ(a.call_errors, 2U);
  EXPECT_EQ(a.call_seconds.count(), 5U);
  EXPECT_GT(a.call_seconds.sum(), 0);
  EXPECT_EQ(a.starts, 2U);
  EXPECT_EQ(a.start_seconds.count(), 2U);
  EXPECT_EQ(a.crashes, 1U);
  EXPECT_EQ(a.releases, 1U);
  EXPECT_EQ(a.reaps, 1U);
  EXPECT_EQ(m.envs.at("b").calls, 0U);
  EXPECT_GT(m.uptime_seconds, 0);
}

TEST(PoolMetrics, AViewReusesARecentMemorySampleButShowsTheWorkersAsTheyAreNow) {
  Pool pool(fixture_config({"a"}));
  const pid_t first = pool.call("a", "isohost_test_funcs:pid").get();
  const auto sampled = metrics_of(pool, 0ms);
  ASSERT_EQ(sampled.status.workers.size(), 1U);
  ASSERT_TRUE(sampled.status.workers[0].memory);
  // The machine's RAM travels with the sample, for the views' bars.
  const auto machine = control::status_json(sampled.status)["system_memory"];
  EXPECT_GT(machine["total"].get<std::uint64_t>(), machine["available"].get<std::uint64_t>());

  // Within the hour the sample is reused: the same figures, and their age grows.
  const auto reused = metrics_of(pool, 1h);
  ASSERT_TRUE(reused.status.workers[0].memory && reused.status.workers[0].memory->ram);
  ASSERT_TRUE(sampled.status.workers[0].memory->ram);
  EXPECT_EQ(reused.status.workers[0].memory->ram->pss, sampled.status.workers[0].memory->ram->pss);
  EXPECT_GE(reused.sample_age_seconds, sampled.sample_age_seconds);

  // A worker started since the sample is shown at once, without figures it never had.
  pool.submit(Request{Request::Kind::reap, "a"}).get();
  const pid_t second = pool.call("a", "isohost_test_funcs:pid").get();
  ASSERT_NE(first, second);
  const auto after = metrics_of(pool, 1h);
  ASSERT_EQ(after.status.workers.size(), 1U);
  EXPECT_EQ(after.status.workers[0].pid, second);
  EXPECT_FALSE(after.status.workers[0].memory);
  EXPECT_EQ(metrics_of(pool, 0ms).status.workers[0].memory.has_value(), true);
}

}  // namespace
}  // namespace isohost::pool
