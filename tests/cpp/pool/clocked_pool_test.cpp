// The pool's timers and back-off on a ManualClock, through its seam for starting workers: the
// workers are real processes on real sockets, but not Python (stub_worker.cpp, a few ms a
// start), and time moves only when the test says. An hour of idle time or a back-off of seconds
// takes microseconds; nothing here sleeps. The same behaviour with Python workers and real time
// stays tested in pool_lifecycle_test.cpp.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>

#include "pool/loop_clock.hpp"
#include "pool/pool.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;
using test_support::call_error;
using test_support::eventually;

class ClockedPoolTest : public ::testing::Test {
 protected:
  ClockedPoolTest() {
    config.source = "(test)";
    config.host.start_timeout = 60s;
    config.host.call_timeout = 60s;
    config.host.shutdown_grace = 2s;
    config.host.idle_release = 10min;
    config.host.idle_sleep = 0ms;
    config.host.idle_hibernate = 0ms;
    config.host.idle_reap = 1h;
    EnvironmentConfig env;
    env.name = "stub";
    env.python = ISOHOST_STUB_WORKER_PATH;
    env.env["ISOHOST_STUB_LOG"] = log_path;
    config.environments["stub"] = env;
  }

  PoolOptions options() {
    return {.clock = clock,
            .launch_worker = [this](asio::io_context& io, worker::WorkerOptions o,
                                    worker::Worker::Events e) {
              ++launches;
              if (refuse_launch) throw isohost::Error(ErrorKind::spawn_failed, "refused on cue");
              return worker::Worker::launch(io, std::move(o), std::move(e));
            }};
  }

  // The ops the stub workers read on their main lanes, in order.
  std::string main_ops() const {
    std::ifstream in(log_path);
    std::string line;
    std::string ops;
    while (std::getline(in, line)) {
      if (line.starts_with("main ")) ops += line.substr(5) + " ";
    }
    return ops;
  }

  static EnvMetrics stub_metrics(Pool& pool) { return pool.metrics(0ms).get().envs.at("stub"); }
  static std::optional<WorkerStatus> stub_worker(Pool& pool) {
    for (auto& w : pool.status().get().workers) {
      if (w.env == "stub") return w;
    }
    return std::nullopt;
  }

  test_support::TempDir dir;
  std::string log_path = dir.path + "/ops";
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  Config config;
  std::atomic<int> launches{0};
  std::atomic<bool> refuse_launch{false};
};

TEST_F(ClockedPoolTest, AnIdleWorkerIsReleasedAndReapedAtItsWindowsAndNotBefore) {
  Pool pool(config, options());
  EXPECT_EQ(pool.call("stub", "any:thing", {1, 2}).get(), nlohmann::ordered_json::array({1, 2}));
  ASSERT_TRUE(clock->wait_for_alarm(10min)) << "no idle alarm was set after the call";

  clock->advance(10min - 1ms);
  auto before = stub_worker(pool);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->state, "ready") << "released before its window";
  EXPECT_EQ(stub_metrics(pool).releases, 0u);
  EXPECT_NEAR(before->idle_seconds, 600.0, 0.01) << "idle time is the pool's clock";

  clock->advance(1ms);
  EXPECT_TRUE(eventually([&] { return stub_metrics(pool).releases == 1; }));

  clock->advance(50min - 1ms);
  ASSERT_TRUE(stub_worker(pool).has_value()) << "reaped before its window";
  clock->advance(1ms);
  EXPECT_TRUE(eventually([&] { return !stub_worker(pool).has_value(); }));
  EXPECT_EQ(stub_metrics(pool).reaps, 1u);
  EXPECT_TRUE(eventually([&] { return main_ops() == "call release shutdown "; })) << main_ops();
  EXPECT_EQ(launches, 1);
}

TEST_F(ClockedPoolTest, ACallDuringTheIdleSpellStartsItAgain) {
  Pool pool(config, options());
  pool.call("stub", "any:thing").get();
  clock->advance(9min);
  pool.call("stub", "any:thing").get();  // a new spell: its release is 10 min from here
  clock->advance(9min);
  EXPECT_EQ(stub_worker(pool)->state, "ready");
  EXPECT_EQ(stub_metrics(pool).releases, 0u) << "released 10 min after the first call";
  clock->advance(1min);
  EXPECT_TRUE(eventually([&] { return stub_metrics(pool).releases == 1; }));
}

TEST_F(ClockedPoolTest, StartsThatKeepFailingAreRefusedUntilTheBackOffDelayPasses) {
  Pool pool(config, options());
  refuse_launch = true;
  for (int i = 0; i < 3; ++i) {  // the first three failures restart at once
    EXPECT_EQ(call_error(pool.call("stub", "any:thing")).kind(), ErrorKind::spawn_failed);
  }
  EXPECT_EQ(call_error(pool.call("stub", "any:thing")).kind(), ErrorKind::crash_loop);
  EXPECT_EQ(launches, 3) << "a start was tried while backing off";

  clock->advance(999ms);
  EXPECT_EQ(call_error(pool.call("stub", "any:thing")).kind(), ErrorKind::crash_loop);
  clock->advance(1ms);  // the 1 s delay has passed: one more try, which fails
  EXPECT_EQ(call_error(pool.call("stub", "any:thing")).kind(), ErrorKind::spawn_failed);
  EXPECT_EQ(launches, 4);

  clock->advance(1999ms);  // the delay doubled
  EXPECT_EQ(call_error(pool.call("stub", "any:thing")).kind(), ErrorKind::crash_loop);
  refuse_launch = false;
  clock->advance(1ms);
  EXPECT_EQ(pool.call("stub", "any:thing", {7}).get(), nlohmann::ordered_json::array({7}));
  EXPECT_EQ(launches, 5);
}

}  // namespace
}  // namespace isohost::pool
