// Zygotes (docs/lifecycle.md#zygotes) with real Python processes: forked workers, the zygote in
// ps, its death, its refusal, and nothing left behind. The ordinary lifecycle tests also run
// for forked workers (the "zygote:" copies of Pool*, tests/CMakeLists.txt).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>

#include "control/status_json.hpp"
#include "pool/config.hpp"
#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using isohost::test_support::eventually;
using isohost::test_support::fixture_config;
using isohost::test_support::process_alive;

Config zygote_config(std::vector<std::string> preload = {"isohost_test_funcs"}) {
  auto config = fixture_config({"a"});
  config.environments["a"].preload = std::move(preload);
  return config;
}

// The one element of `items`; anything else fails the test.
template <class T>
T the_one(const std::vector<T>& items, const char* what) {
  if (items.size() == 1) return items[0];
  ADD_FAILURE() << "expected one " << what << ", found " << items.size();
  return {};
}

ZygoteStatus zygote_of(Pool& pool) { return the_one(pool.status().get().zygotes, "zygote"); }

WorkerStatus worker_of(Pool& pool) { return the_one(pool.status().get().workers, "worker"); }

bool contains(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

TEST(Zygote, WorkersAreForkedFromItAndPsShowsBoth) {
  Pool pool(zygote_config());
  const pid_t pid = pool.call("a", "isohost_test_funcs:pid").get();
  const auto z = zygote_of(pool);
  EXPECT_EQ(z.state, "ready");
  EXPECT_EQ(z.forks, 1U);
  EXPECT_THAT(z.preload, ::testing::ElementsAre("isohost_test_funcs"));
  const auto w = worker_of(pool);
  EXPECT_EQ(w.pid, pid);
  EXPECT_EQ(w.origin, "zygote");
  EXPECT_EQ(w.zygote_pid, z.pid);
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:parent_pid").get(), ::getpid())
      << "the host is the parent";
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:session_id").get(), pid) << "its own session";
  // The orphan sweep of a later host recognises both by their command line.
  const auto tagged = isohost::test_support::workers_tagged(proc::host_tag());
  EXPECT_TRUE(contains(tagged, pid));
  EXPECT_TRUE(contains(tagged, z.pid));
  const auto json = control::status_json(pool.status_with_memory().get());
  EXPECT_EQ(json["workers"][0]["origin"], "zygote");
  EXPECT_EQ(json["workers"][0]["zygote_pid"], z.pid);
  EXPECT_EQ(json["zygotes"][0]["state"], "ready");
  EXPECT_GT(json["zygotes"][0]["pss"].get<double>(), 1e6);
}

TEST(Zygote, KillingTheZygoteSparesRunningWorkersAndNewOnesStillStart) {
  Pool pool(zygote_config());
  const pid_t first = pool.call("a", "isohost_test_funcs:pid").get();
  const pid_t zygote = zygote_of(pool).pid;
  auto busy = pool.call("a", "isohost_test_funcs:sleep", {0.5});
  ASSERT_TRUE(eventually([&] { return worker_of(pool).state == "busy"; }));
  ::kill(zygote, SIGKILL);
  EXPECT_EQ(busy.get(), 0.5) << "the call in flight finishes";
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:pid").get(), first) << "the worker lives on";
  // A new worker starts whether or not the zygote is back yet...
  EXPECT_EQ(pool.submit({Request::Kind::reap, "a"}).get()["reaped"], true);
  const pid_t second = pool.call("a", "isohost_test_funcs:pid").get();
  EXPECT_NE(second, first);
  // ...and the zygote is restarted, and forks again.
  ASSERT_TRUE(eventually([&] {
    const auto z = zygote_of(pool);
    return z.state == "ready" && z.pid != zygote && z.starts == 2;
  }));
  EXPECT_EQ(pool.submit({Request::Kind::reap, "a"}).get()["reaped"], true);
  pool.call("a", "isohost_test_funcs:pid").get();
  EXPECT_EQ(worker_of(pool).origin, "zygote");
  EXPECT_EQ(worker_of(pool).zygote_pid, zygote_of(pool).pid);
}

TEST(Zygote, AZygoteWithCudaInitialisedIsRefusedAndTheEnvironmentStillWorks) {
  // The preload module makes torch.cuda.is_initialized() answer true, as a zygote whose
  // imports opened a context would (there is no GPU here).
  Pool pool(zygote_config({"isohost_test_pretend_cuda"}));
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 2}).get(), 4);
  EXPECT_EQ(worker_of(pool).origin, "spawn");
  ASSERT_TRUE(eventually([&] { return zygote_of(pool).state == "refused"; }));
  const auto z = zygote_of(pool);
  ASSERT_TRUE(z.refusal.has_value());
  EXPECT_THAT(*z.refusal, HasSubstr("CUDA is initialised in the zygote"));
  EXPECT_EQ(z.pid, -1) << "a refused zygote is ended";
  EXPECT_EQ(pool.submit({Request::Kind::reap, "a"}).get()["reaped"], true);
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 2}).get(), 3);
  EXPECT_EQ(worker_of(pool).origin, "spawn") << "refused for good: no new zygote";
  EXPECT_EQ(zygote_of(pool).starts, 1U);
}

TEST(Zygote, APreloadThatCannotBeImportedFallsBackToFreshWorkers) {
  Pool pool(zygote_config({"no_such_module_for_a_zygote"}));
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 3}).get(), 5);
  EXPECT_EQ(worker_of(pool).origin, "spawn");
}

TEST(Zygote, AMissingInterpreterIsTriedOnceForABurstOfWorkerStarts) {
  auto config = zygote_config();
  config.environments["a"].python = "/no/such/python3";
  Pool pool(config);
  for (int call = 0; call < 3; ++call) {
    const auto error = isohost::test_support::call_error(pool.call("a", "isohost_test_funcs:pid"));
    EXPECT_EQ(error.kind(), isohost::ErrorKind::spawn_failed) << error.what();
  }
  // Before, each worker start of the burst started the zygote again (the back-off's free
  // failures), and a timer went on every 30 s for as long as the host ran.
  EXPECT_EQ(zygote_of(pool).starts, 1U);
  EXPECT_EQ(zygote_of(pool).pid, -1);
}

TEST(Zygote, PrestartStartsItWithTheHost) {
  auto config = zygote_config();
  config.environments["a"].prestart = true;
  Pool pool(config);
  EXPECT_TRUE(eventually([&] { return zygote_of(pool).state == "ready"; }));
  EXPECT_TRUE(pool.status().get().workers.empty()) << "no worker until a call";
}

TEST(Zygote, ShutdownLeavesNoZygoteAndNoWorker) {
  pid_t worker = 0;
  pid_t zygote = 0;
  {
    Pool pool(zygote_config());
    worker = pool.call("a", "isohost_test_funcs:pid").get();
    zygote = zygote_of(pool).pid;
  }
  EXPECT_FALSE(process_alive(worker));
  EXPECT_FALSE(process_alive(zygote));
  EXPECT_TRUE(isohost::test_support::workers_tagged(proc::host_tag()).empty());
}

TEST(ZygoteConfig, PreloadAndPrestartAreReadAndChecked) {
  const auto config =
      parse_config("[env.v]\npreload = [\"torch\", \"numpy\"]\nprestart = true\n", "t.toml", "/b");
  EXPECT_THAT(config.environments.at("v").preload, ::testing::ElementsAre("torch", "numpy"));
  EXPECT_TRUE(config.environments.at("v").prestart);
  const std::pair<const char*, const char*> bad[] = {
      {"[env.v]\nprestart = true\n",
       "t.toml:2:12: [env.v] 'prestart' starts a zygote, which needs a non-empty 'preload'"},
      {"[env.v]\npreload = \"torch\"\n",
       "t.toml:2:11: [env.v] 'preload' must be a list of module names, not 'torch'"},
      {"[env.v]\npreload = [\"a,b\"]\n", "[env.v] 'preload' entry 'a,b' is not a module name"},
      {"[env.v]\npreload = [\"torch\"]\nprestart = 1\n",
       "[env.v] 'prestart' must be true or false, not 1"},
  };
  for (const auto& [text, says] : bad) {
    try {
      parse_config(text, "t.toml", "/b");
      ADD_FAILURE() << text;
    } catch (const isohost::Error& e) {
      EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error);
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
  }
}

}  // namespace
}  // namespace isohost::pool
