// The worker lifecycle contract (docs/lifecycle.md), with real Python workers.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using isohost::test_support::eventually;
using isohost::test_support::call_error;
using isohost::test_support::fixture_config;
using isohost::test_support::process_alive;

WorkerStatus only_worker(Pool& pool, const std::string& env) {
  for (auto& w : pool.status().get().workers) {
    if (w.env == env) {
      // Run with ISOHOST_TEST_ORIGIN=zygote, every worker must really be a forked one.
      EXPECT_EQ(w.origin, isohost::test_support::expected_origin());
      return w;
    }
  }
  ADD_FAILURE() << "no worker for " << env;
  return {};
}

TEST(PoolLifecycle, StartsNothingUntilTheFirstCall) {
  Pool pool(fixture_config({"a"}));
  EXPECT_TRUE(pool.status().get().workers.empty());
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 3}).get(), 5);
  const auto w = only_worker(pool, "a");
  EXPECT_EQ(w.generation, 1U);
  EXPECT_EQ(w.state, "ready");
  EXPECT_EQ(w.calls, 1U);
}

TEST(PoolLifecycle, ConcurrentFirstCallsShareOneStart) {
  Pool pool(fixture_config({"a"}));
  auto first = pool.call("a", "isohost_test_funcs:pid");
  auto second = pool.call("a", "isohost_test_funcs:pid");
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(only_worker(pool, "a").generation, 1U);
}

TEST(PoolLifecycle, ColdEnvironmentsStartInParallel) {
  Pool pool(fixture_config({"a", "b"}));
  auto a = pool.call("a", "isohost_test_funcs:pid");
  auto b = pool.call("b", "isohost_test_funcs:pid");
  a.get();
  b.get();
  const auto wa = only_worker(pool, "a");
  const auto wb = only_worker(pool, "b");
  ASSERT_TRUE(wa.ready_at && wb.ready_at);
  // Each started before the other was ready: the start intervals overlap.
  EXPECT_LT(wa.spawned_at, *wb.ready_at);
  EXPECT_LT(wb.spawned_at, *wa.ready_at);
}

TEST(PoolLifecycle, KillNineMidCallFailsTheCallAndTheNextGenerationServes) {
  Pool pool(fixture_config({"a"}));
  const pid_t pid = pool.call("a", "isohost_test_funcs:pid").get();
  auto busy = pool.call("a", "isohost_test_funcs:sleep", {30});
  ASSERT_TRUE(eventually([&] { return only_worker(pool, "a").state == "busy"; }));
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(pid, SIGKILL);
  ASSERT_EQ(busy.wait_for(1s), std::future_status::ready) << "the caller heard within a second";
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 1s);
  const auto error = call_error(std::move(busy));
  EXPECT_EQ(error.kind(), ErrorKind::crashed);
  EXPECT_THAT(error.what(), HasSubstr("killed by SIGKILL"));
  EXPECT_THAT(error.what(), HasSubstr("during call isohost_test_funcs:sleep"));
  const pid_t next = pool.call("a", "isohost_test_funcs:pid").get();
  EXPECT_NE(next, pid);
  EXPECT_EQ(only_worker(pool, "a").generation, 2U);
}

TEST(PoolLifecycle, CrashErrorCarriesTheExitCodeAndLastStderrLines) {
  Pool pool(fixture_config({"a"}));
  pool.call("a", "isohost_test_funcs:print_lines", {3}).get();
  const auto error = call_error(pool.call("a", "isohost_test_funcs:crash_with_code", {17}));
  EXPECT_EQ(error.kind(), ErrorKind::crashed);
  EXPECT_THAT(error.what(), HasSubstr("exited with code 17"));
  EXPECT_THAT(error.what(), HasSubstr("last stderr lines"));
}

TEST(PoolLifecycle, TimeoutKillsTheWholeGroupAndTheNextCallWorks) {
  auto config = fixture_config({"a"});
  config.environments["a"].call_timeout = 1s;
  Pool pool(config);
  const pid_t worker = pool.call("a", "isohost_test_funcs:pid").get();
  const pid_t grandchild = pool.call("a", "isohost_test_funcs:start_grandchild").get();
  ASSERT_TRUE(process_alive(grandchild));
  const auto error = call_error(pool.call("a", "isohost_test_funcs:sleep", {60}));
  EXPECT_EQ(error.kind(), ErrorKind::call_timeout);
  EXPECT_THAT(error.what(), HasSubstr("exceeded its timeout of 1 s"));
  EXPECT_FALSE(process_alive(worker));
  EXPECT_TRUE(eventually([&] { return isohost::test_support::process_group_members(worker).empty(); }, 2s))
      << "the worker's whole process group is gone";
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 1}).get(), 2);
}

TEST(PoolLifecycle, IdleWorkerIsReapedAndTheNextCallStartsANewOne) {
  auto config = fixture_config({"a"});
  config.host.idle_reap = 300ms;
  Pool pool(config);
  const pid_t first = pool.call("a", "isohost_test_funcs:pid").get();
  ASSERT_TRUE(eventually([&] { return pool.status().get().workers.empty(); }, 5s));
  EXPECT_TRUE(eventually([&] { return !process_alive(first); }, 2s));
  const pid_t second = pool.call("a", "isohost_test_funcs:pid").get();
  EXPECT_NE(first, second);
  EXPECT_EQ(only_worker(pool, "a").generation, 2U);
}

TEST(PoolLifecycle, IdleWorkerIsReleasedOnceAndLivesOn) {
  auto config = fixture_config({"a"});
  config.host.idle_release = 200ms;
  Pool pool(config);
  pool.call("a", "isohost_test_funcs:allocate_mb", {100}).get();
  const auto rss = [&] { return pool.status_with_memory().get().workers.at(0).memory->ram->rss; };
  const auto held = rss();
  // The fixture's on_release callback drops the 100 MB: RSS falls without any call.
  ASSERT_TRUE(eventually([&] { return rss() + 50'000'000 < held; }, 5s));
  // The receipt follows the drop.
  ASSERT_TRUE(eventually([&] { return only_worker(pool, "a").state == "ready"; }));
  const auto w = only_worker(pool, "a");
  EXPECT_EQ(w.calls, 1U) << "a release is not a call";
  EXPECT_EQ(w.generation, 1U) << "released, not replaced";
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:allocated_mb").get(), 0);
}

TEST(PoolLifecycle, RamBudgetReapsTheLargestIdleWorkerOnly) {
  auto config = fixture_config({"small", "large"});
  config.host.ram_budget = 60'000'000;  // two bare interpreters fit; one holding 100 MB does not
  Pool pool(config, {.pressure_interval = 100ms});
  // The large one first: a sweep while it is busy allocating must find nobody else to reap.
  const pid_t large = pool.call("large", "isohost_test_funcs:pid").get();
  pool.call("large", "isohost_test_funcs:allocate_mb", {100}).get();
  const pid_t small = pool.call("small", "isohost_test_funcs:pid").get();
  EXPECT_TRUE(eventually([&] { return !process_alive(large); }, 5s)) << "the large idle worker is reaped";
  // Three more sweeps, all within the budget.
  const auto sweeps = pool.metrics(0ms).get().ram_sweeps;
  ASSERT_TRUE(eventually([&] { return pool.metrics(1h).get().ram_sweeps >= sweeps + 3; }, 5s));
  EXPECT_TRUE(process_alive(small)) << "reaping stops once the budget holds";
  EXPECT_EQ(pool.call("small", "isohost_test_funcs:pid").get(), small);
  EXPECT_NE(pool.call("large", "isohost_test_funcs:pid").get(), large) << "the next call cold-starts";
}

TEST(PoolLifecycle, RamBudgetLeavesPagesGivenBackLazilyToTheKernel) {
  auto config = fixture_config({"lazy"});
  config.host.ram_budget = 60'000'000;  // a bare interpreter fits; 100 MB more in use would not
  Pool pool(config, {.pressure_interval = 100ms});
  const pid_t lazy = pool.call("lazy", "isohost_test_funcs:pid").get();
  // In its RSS and PSS, but LazyFree: the kernel's to take back, as a sleep's kept buffer is.
  pool.call("lazy", "isohost_test_funcs:free_lazily_mb", {100}).get();
  const auto sweeps = pool.metrics(0ms).get().ram_sweeps;
  ASSERT_TRUE(eventually([&] { return pool.metrics(1h).get().ram_sweeps >= sweeps + 3; }, 5s));
  EXPECT_TRUE(process_alive(lazy)) << "pages given back lazily are not held against the budget";
  EXPECT_EQ(pool.call("lazy", "isohost_test_funcs:pid").get(), lazy);
}

TEST(PoolLifecycle, SideLaneAnswersWhileACallRuns) {
  Pool pool(fixture_config({"a"}));
  pool.call("a", "isohost_test_funcs:pid").get();
  auto busy = pool.call("a", "isohost_test_funcs:busy_loop", {3});
  ASSERT_TRUE(eventually([&] { return only_worker(pool, "a").state == "busy"; }));
  const auto memory = pool.submit({Request::Kind::query, "a", {{"op", "memory"}}}).get();
  EXPECT_TRUE(memory.contains("torch_imported"));
  EXPECT_EQ(busy.wait_for(0s), std::future_status::timeout) << "answered before the call ended";
  busy.get();
}

TEST(PoolLifecycle, ReleaseReturnsTheWorkersReceipt) {
  Pool pool(fixture_config({"a"}));
  EXPECT_EQ(pool.submit({Request::Kind::release, "a"}).get()["released"], false);
  pool.call("a", "isohost_test_funcs:allocate_mb", {100}).get();
  const auto receipt = pool.submit({Request::Kind::release, "a"}).get();
  EXPECT_LT(receipt["rss_after"].get<double>(), receipt["rss_before"].get<double>() - 50e6);
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:allocated_mb").get(), 0);
}

TEST(PoolLifecycle, ShutdownEndsEveryWorker) {
  pid_t a = 0;
  pid_t b = 0;
  {
    Pool pool(fixture_config({"a", "b"}));
    a = pool.call("a", "isohost_test_funcs:pid").get();
    b = pool.call("b", "isohost_test_funcs:pid").get();
  }
  EXPECT_FALSE(process_alive(a));
  EXPECT_FALSE(process_alive(b));
}

TEST(PoolLifecycle, RepeatedCrashesBackOffWithAnErrorThatSaysSo) {
  Pool pool(fixture_config({"a"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(call_error(pool.call("a", "isohost_test_funcs:crash_with_code", {3})).kind(),
              ErrorKind::crashed);
  }
  const auto error = call_error(pool.call("a", "isohost_test_funcs:add", {1, 2}));
  EXPECT_EQ(error.kind(), ErrorKind::crash_loop);
  EXPECT_THAT(error.what(), HasSubstr("failed 3 times in a row"));
  EXPECT_THAT(error.what(), HasSubstr("exited with code 3"));
}

}  // namespace
}  // namespace isohost::pool
