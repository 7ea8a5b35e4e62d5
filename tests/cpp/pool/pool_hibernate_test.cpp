// Hibernation's state machine through the driver seam: real workers, a stand-in libcuda that
// keeps the checkpoint API's states, records each call and fails a step on request
// (tests/cpp/proc/fake_cuda), and a stand-in torch.cuda in the worker that blocks while the
// process is locked, as the real driver makes it.

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "control/status_json.hpp"
#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using isohost::test_support::call_error;
using isohost::test_support::eventually;
using isohost::test_support::fixture_config;
using isohost::test_support::process_alive;
using isohost::test_support::TempDir;

constexpr const char* kContext = "isohost_fake_cuda_context:open_context";

// The stand-in driver, loaded into this process so the test can switch it and read its calls;
// the pool's dlopen of the same path finds this copy.
class FakeCuda {
 public:
  FakeCuda() : handle_(::dlopen(ISOHOST_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) throw std::runtime_error(::dlerror());
    configure_ = reinterpret_cast<void (*)(const char*)>(::dlsym(handle_, "fake_cuda_configure"));
    calls_ = reinterpret_cast<const char* (*)(int)>(::dlsym(handle_, "fake_cuda_calls"));
  }
  ~FakeCuda() { ::dlclose(handle_); }
  void configure(const std::string& spec) {
    configure_(spec.c_str());
    calls_(1);
  }
  std::string calls() { return calls_(0); }

 private:
  void* handle_;
  void (*configure_)(const char*) = nullptr;
  const char* (*calls_)(int) = nullptr;
};

class Hibernate : public ::testing::Test {
 protected:
  // Switches for the stand-in driver, beside the lock files it keeps in `locks_`.
  std::unique_ptr<Pool> make_pool(const std::string& spec, Config config = fixture_config({"g"}),
                                  std::string library = ISOHOST_FAKE_CUDA_PATH) {
    cuda_.configure(spec + ",locks_dir=" + locks_.path);
    for (auto& [name, env] : config.environments) env.env["ISOHOST_FAKE_CUDA_LOCKS"] = locks_.path;
    return std::make_unique<Pool>(
        config, PoolOptions{.sweep_orphans = false, .cuda_library = std::move(library)});
  }

  static WorkerStatus worker_of(Pool& pool) {
    const auto workers = pool.status().get().workers;
    if (workers.empty()) return {};
    return workers.at(0);
  }

  static nlohmann::ordered_json hibernate(Pool& pool) {
    return pool.submit({Request::Kind::hibernate, "g"}).get();
  }
  static nlohmann::ordered_json wake(Pool& pool) {
    return pool.submit({Request::Kind::wake, "g"}).get();
  }

  FakeCuda cuda_;
  TempDir locks_;
};

TEST_F(Hibernate, AnIdleWorkerIsLockedAndCheckpointedThenTheNextCallRestoresItFirst) {
  auto pool = make_pool("");
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  const auto answer = hibernate(*pool);
  EXPECT_EQ(answer["hibernated"], true) << answer.dump();
  EXPECT_EQ(answer["pid"], pid);
  const auto status = worker_of(*pool);
  EXPECT_EQ(status.state, "hibernated");
  ASSERT_TRUE(status.hibernation.has_value());
  const auto p = std::to_string(pid);
  EXPECT_EQ(cuda_.calls(), "cuInit 0\nstate " + p + "\nlock " + p + " 2000\ncheckpoint " + p +
                               "\nstate " + p + "\n");
  // The same process answers, woken first: restore, unlock, then the call.
  EXPECT_EQ(pool->call("g", "isohost_fake_cuda_context:compute", {21}).get(), 42);
  EXPECT_EQ(pool->call("g", "isohost_test_funcs:pid").get(), pid);
  EXPECT_THAT(cuda_.calls(), HasSubstr("checkpoint " + p + "\nstate " + p + "\nrestore " + p +
                                       "\nunlock " + p + "\nstate " + p + "\n"));
  EXPECT_EQ(worker_of(*pool).state, "ready");
  EXPECT_FALSE(worker_of(*pool).hibernation.has_value());
  EXPECT_EQ(pool->call("g", "isohost_fake_cuda_context:calls_while_locked").get(), 0);
}

// A wake needs back on the card what the hibernation moved off, and the card may have filled
// meanwhile: the wake goes through admission like a reserve_vram (docs/hibernation.md).
TEST_F(Hibernate, AWakeIsAdmittedFirstAndWithoutRoomTheWorkerStaysHibernated) {
  TempDir card_dir;
  const auto card = card_dir.path + "/gpu.json";
  const auto write_card = [&](const nlohmann::ordered_json& processes) {
    std::ofstream(card) << nlohmann::ordered_json{
        {"devices", {{{"index", 0}, {"name", "simulated"}, {"total_mib", 1000}}}},
        {"processes",
         processes}}.dump();
  };
  const auto on_card = [](pid_t pid, unsigned mib) {
    return nlohmann::ordered_json{{"pid", pid}, {"device", 0}, {"used_mib", mib}};
  };
  write_card(nlohmann::ordered_json::array());
  auto config = fixture_config({"g", "b"});
  config.host.simulated_gpu = card;
  config.host.vram_reserve = 0;
  auto pool = make_pool("", config);
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  write_card(nlohmann::ordered_json::array({on_card(pid, 600)}));
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  // As the driver leaves it: its 600 MiB off the card; then a program isohost does not manage
  // (this test) takes 700.
  write_card(nlohmann::ordered_json::array({on_card(pid, 0), on_card(::getpid(), 700)}));
  const auto refused = call_error(pool->call("g", "isohost_fake_cuda_context:compute", {21}));
  EXPECT_EQ(refused.kind(), isohost::ErrorKind::wake_failed);
  EXPECT_THAT(refused.what(), HasSubstr("no room on the card for the 600 MiB it moved off"));
  EXPECT_THAT(refused.what(), HasSubstr("it stays hibernated"));
  EXPECT_EQ(worker_of(*pool).state, "hibernated");
  EXPECT_THAT(cuda_.calls(), Not(HasSubstr("restore")));

  // The program is gone and an idle worker holds 700 MiB of cache: admission releases it, then
  // the same process is restored and answers.
  write_card(nlohmann::ordered_json::array({on_card(pid, 0)}));
  pool->call("b", "isohost_sim_vram:hold", {card, 0, 700}).get();
  EXPECT_EQ(pool->call("g", "isohost_fake_cuda_context:compute", {21}).get(), 42);
  EXPECT_EQ(pool->call("g", "isohost_test_funcs:pid").get(), pid);
  EXPECT_THAT(cuda_.calls(), HasSubstr("restore " + std::to_string(pid)));
  const auto ps = control::status_json(pool->status_with_memory().get());
  EXPECT_EQ(ps["devices"][0]["reclaimable"], 0u) << "b's cache was released first: " << ps.dump();
  EXPECT_EQ(ps["devices"][0]["pending"], 0u) << "the wake's grant was settled";
}

TEST_F(Hibernate, SideLaneQueriesAnswerWhileHibernatedWithoutTouchingCuda) {
  auto pool = make_pool("");
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  ASSERT_TRUE(std::filesystem::exists(locks_.path + "/" + std::to_string(pid)))
      << "the stand-in holds it locked";
  auto memory = pool->submit({Request::Kind::query, "g", {{"op", "memory"}}});
  ASSERT_EQ(memory.wait_for(2s), std::future_status::ready)
      << "a memory report that touched CUDA would block";
  const auto report = memory.get();
  EXPECT_EQ(report["hibernated"], true);
  EXPECT_EQ(report["cuda_initialized"], true);
  EXPECT_EQ(report["allocator"]["reserved"], 64 << 20);
  EXPECT_EQ(pool->submit({Request::Kind::query, "g", {{"op", "ping"}}}).get()["pid"], pid);
  auto ps = pool->status_with_memory();
  ASSERT_EQ(ps.wait_for(3s), std::future_status::ready);
  const auto json = control::status_json(ps.get());
  EXPECT_EQ(json["workers"][0]["state"], "hibernated");
  EXPECT_TRUE(json["workers"][0]["hibernation"].is_object());
  EXPECT_TRUE(json["workers"][0]["hibernation"]["ram_grown"].is_number());
}

TEST_F(Hibernate, AWorkerWithNoCudaContextIsNotHibernatedAndTheDriverIsNotAsked) {
  auto pool = make_pool("");
  pool->call("g", "isohost_test_funcs:pid").get();
  const auto answer = hibernate(*pool);
  EXPECT_EQ(answer["hibernated"], false);
  EXPECT_THAT(answer["reason"].get<std::string>(), HasSubstr("has no CUDA context"));
  EXPECT_EQ(cuda_.calls(), "");
  EXPECT_EQ(worker_of(*pool).state, "ready");
}

TEST_F(Hibernate, WithoutADriverItSaysWhy) {
  auto pool = make_pool("", fixture_config({"g"}), "/nonexistent/libcuda.so.1");
  pool->call("g", kContext).get();
  const auto answer = hibernate(*pool);
  EXPECT_EQ(answer["hibernated"], false);
  EXPECT_THAT(answer["reason"].get<std::string>(),
              HasSubstr("/nonexistent/libcuda.so.1 not found (no NVIDIA driver)"));
  EXPECT_EQ(worker_of(*pool).state, "ready");
  EXPECT_EQ(pool->call("g", "isohost_fake_cuda_context:compute", {1}).get(), 2);
}

TEST_F(Hibernate, ADriverWithoutTheCheckpointApiIsNamed) {
  auto pool = make_pool("", fixture_config({"g"}), ISOHOST_FAKE_CUDA_OLD_PATH);
  pool->call("g", kContext).get();
  const auto answer = hibernate(*pool);
  EXPECT_EQ(answer["hibernated"], false);
  EXPECT_THAT(
      answer["reason"].get<std::string>(),
      HasSubstr("the CUDA driver (CUDA 12.4) lacks cuCheckpointProcessLock: hibernation needs"));
}

TEST_F(Hibernate, AFailedCuInitIsNamed) {
  auto pool = make_pool("init=100");
  pool->call("g", kContext).get();
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(),
              HasSubstr("cuInit(0) failed: CUDA_ERROR_NO_DEVICE"));
  EXPECT_EQ(worker_of(*pool).state, "ready");
}

TEST_F(Hibernate, ALockThatTimesOutLeavesTheWorkerServing) {
  auto pool = make_pool("lock=600");
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  const auto answer = hibernate(*pool);
  EXPECT_EQ(answer["hibernated"], false);
  EXPECT_THAT(answer["reason"].get<std::string>(),
              HasSubstr("did not pause within the lock's 2000 ms (CUDA_ERROR_NOT_READY)"));
  EXPECT_EQ(worker_of(*pool).state, "ready");
  EXPECT_EQ(pool->call("g", "isohost_test_funcs:pid").get(), pid);
  EXPECT_THAT(cuda_.calls(), Not(HasSubstr("checkpoint")));
  // The memory report reads CUDA again once the hibernation was given up.
  EXPECT_EQ(pool->submit({Request::Kind::query, "g", {{"op", "memory"}}})
                .get()
                .value("hibernated", false),
            false);
}

TEST_F(Hibernate, ACheckpointErrorRetiresTheWorkerAndTheNextCallGetsAFreshOne) {
  for (const std::string spec : {"checkpoint=999", "fail_state=checkpoint"}) {
    SCOPED_TRACE(spec);
    auto pool = make_pool(spec);
    const pid_t pid = pool->call("g", kContext).get()["pid"];
    const auto error = call_error(pool->submit({Request::Kind::hibernate, "g"}));
    EXPECT_EQ(error.kind(), ErrorKind::hibernate_failed);
    EXPECT_STREQ(error.kind_name(), "HibernateFailed");
    EXPECT_THAT(error.what(),
                HasSubstr(spec == "checkpoint=999"
                              ? "cuCheckpointProcessCheckpoint(" + std::to_string(pid) +
                                    ") failed: CUDA_ERROR_UNKNOWN"
                              : "after the checkpoint pid " + std::to_string(pid) +
                                    " is FAILED, not CHECKPOINTED"));
    EXPECT_TRUE(eventually([&] { return !process_alive(pid); }));
    EXPECT_NE(pool->call("g", "isohost_test_funcs:pid").get(), pid);
    EXPECT_EQ(worker_of(*pool).generation, 2U);
  }
}

TEST_F(Hibernate, ARestoreOrUnlockErrorFailsTheWakingCallWithWakeFailedAndTheNextGetsAFreshWorker) {
  for (const std::string spec : {"restore=999", "unlock=999", "fail_state=restore"}) {
    SCOPED_TRACE(spec);
    auto pool = make_pool(spec);
    const pid_t pid = pool->call("g", kContext).get()["pid"];
    ASSERT_EQ(hibernate(*pool)["hibernated"], true);
    const auto error = call_error(pool->call("g", "isohost_test_funcs:pid"));
    EXPECT_EQ(error.kind(), ErrorKind::wake_failed);
    EXPECT_STREQ(error.kind_name(), "WakeFailed");
    EXPECT_THAT(error.what(), HasSubstr("could not be woken"));
    EXPECT_TRUE(eventually([&] { return !process_alive(pid); }));
    const pid_t fresh = pool->call("g", "isohost_test_funcs:pid").get();
    EXPECT_NE(fresh, pid);
    EXPECT_EQ(worker_of(*pool).generation, 2U);
  }
}

TEST_F(Hibernate, RequestsInEveryState) {
  auto pool = make_pool("delay_ms=300");
  // No worker: nothing is started.
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(), HasSubstr("no worker is running"));
  EXPECT_EQ(wake(*pool)["woken"], false);
  EXPECT_TRUE(pool->status().get().workers.empty());
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  // Ready: wake has nothing to do.
  EXPECT_THAT(wake(*pool)["reason"].get<std::string>(),
              HasSubstr("is ready, neither hibernated nor asleep"));
  // Busy: never hibernated mid-call, never waited for.
  auto busy = pool->call("g", "isohost_test_funcs:sleep", {0.5});
  ASSERT_TRUE(eventually([&] { return worker_of(*pool).state == "busy"; }));
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(), HasSubstr("is busy, not idle"));
  busy.get();
  // Hibernating: a call made meanwhile waits, then wakes it.
  auto hibernating = pool->submit({Request::Kind::hibernate, "g"});
  ASSERT_TRUE(eventually([&] { return worker_of(*pool).state == "hibernating"; }));
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(), HasSubstr("is hibernating, not idle"));
  EXPECT_THAT(wake(*pool)["reason"].get<std::string>(),
              HasSubstr("is hibernating, neither hibernated nor asleep"));
  auto call = pool->call("g", "isohost_fake_cuda_context:compute", {5});
  EXPECT_EQ(hibernating.get()["hibernated"], true);
  EXPECT_EQ(call.get(), 10);
  // Hibernated: twice is once; release does not wake it; wake restores it.
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  EXPECT_EQ(hibernate(*pool)["already"], true);
  EXPECT_EQ(pool->submit({Request::Kind::release, "g"}).get()["released"], false);
  EXPECT_EQ(worker_of(*pool).state, "hibernated");
  auto waking = pool->submit({Request::Kind::wake, "g"});
  ASSERT_TRUE(eventually([&] { return worker_of(*pool).state == "waking"; }));
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(), HasSubstr("is waking, not idle"));
  const auto woken = waking.get();
  EXPECT_EQ(woken["woken"], true);
  EXPECT_EQ(worker_of(*pool).state, "ready");
  EXPECT_EQ(pool->call("g", "isohost_test_funcs:pid").get(), pid);
  EXPECT_EQ(worker_of(*pool).generation, 1U);
}

TEST_F(Hibernate, AHibernatedWorkerIsReapedWithoutWaking) {
  auto pool = make_pool("");
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  EXPECT_EQ(pool->submit({Request::Kind::reap, "g"}).get()["reaped"], true);
  EXPECT_TRUE(eventually([&] { return !process_alive(pid); }, 2s))
      << "ended at once, not after the grace";
  EXPECT_THAT(cuda_.calls(), Not(HasSubstr("restore")));
  EXPECT_NE(pool->call("g", "isohost_test_funcs:pid").get(), pid);
}

TEST_F(Hibernate, AHibernatedWorkerKilledFromOutsideIsReplaced) {
  auto pool = make_pool("");
  const pid_t pid = pool->call("g", kContext).get()["pid"];
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  ::kill(pid, SIGKILL);
  // ps at that moment: the worker cannot answer its side lane, and ps shows it without a report.
  auto ps = pool->status_with_memory();
  ASSERT_EQ(ps.wait_for(3s), std::future_status::ready);
  EXPECT_TRUE(control::status_json(ps.get())["workers"].is_array());
  ASSERT_TRUE(eventually([&] { return pool->status().get().workers.empty(); }));
  EXPECT_NE(pool->call("g", "isohost_test_funcs:pid").get(), pid);
  EXPECT_EQ(worker_of(*pool).generation, 2U);
}

TEST_F(Hibernate, ShutdownEndsHibernatedAndHibernatingWorkersAtOnce) {
  auto config = fixture_config({"g", "h"});
  auto pool = make_pool("delay_ms=2000", config);
  const pid_t g = pool->call("g", kContext).get()["pid"];
  const pid_t h = pool->call("h", kContext).get()["pid"];
  ASSERT_EQ(hibernate(*pool)["hibernated"], true);
  auto in_flight = pool->submit({Request::Kind::hibernate, "h"});
  ASSERT_TRUE(eventually([&] {
    for (const auto& w : pool->status().get().workers) {
      if (w.env == "h") return w.state == "hibernating";
    }
    return false;
  }));
  const auto start = std::chrono::steady_clock::now();
  pool->shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the checkpoint in flight (2 s) is waited for, no grace on top";
  EXPECT_FALSE(process_alive(g));
  EXPECT_FALSE(process_alive(h));
  EXPECT_EQ(in_flight.get()["hibernated"], false);
}

TEST_F(Hibernate, HibernateFalseKeepsAnEnvironmentOnTheCard) {
  auto config = fixture_config({"g"});
  config.environments["g"].hibernate = false;
  auto pool = make_pool("", config);
  pool->call("g", kContext).get();
  EXPECT_THAT(hibernate(*pool)["reason"].get<std::string>(), HasSubstr("has hibernate = false"));
  EXPECT_EQ(cuda_.calls(), "");
}

TEST_F(Hibernate, AnIdleWorkerIsHibernatedOnItsTimerOncePerIdleSpell) {
  auto config = fixture_config({"g"});
  config.host.idle_hibernate = 200ms;
  auto pool = make_pool("", config);
  pool->call("g", kContext).get();
  ASSERT_TRUE(eventually([&] { return worker_of(*pool).state == "hibernated"; }));
  EXPECT_EQ(pool->call("g", "isohost_fake_cuda_context:compute", {2}).get(), 4);
  ASSERT_TRUE(eventually([&] { return worker_of(*pool).state == "hibernated"; }))
      << "again after the next call";
}

TEST_F(Hibernate, ALockRefusedOnTheTimerIsNotRetriedInTheSameIdleSpell) {
  auto config = fixture_config({"g"});
  config.host.idle_hibernate = 100ms;
  // The idle spell ends with the reap: a retry within it would come before.
  config.host.idle_reap = 1500ms;
  auto pool = make_pool("lock=600", config);
  const pid_t pid = pool->call("g", "isohost_test_funcs:pid").get();
  pool->call("g", kContext).get();
  ASSERT_TRUE(eventually([&] { return cuda_.calls().find("lock") != std::string::npos; }));
  ASSERT_TRUE(eventually([&] { return !process_alive(pid); }, 10s));
  const auto calls = cuda_.calls();
  size_t locks = 0;
  for (size_t at = calls.find("lock"); at != std::string::npos; at = calls.find("lock", at + 1))
    ++locks;
  EXPECT_EQ(locks, 1U);
}

TEST_F(Hibernate, CyclesAndFailuresLeaveNoProcessOrDescriptorBehind) {
  // The stand-in driver stays loaded (as the real one does), so count from a warm start.
  {
    auto warm = make_pool("");
    warm->call("g", "isohost_test_funcs:pid").get();
    (void)hibernate(*warm);
  }
  const int fds_before = test_support::open_descriptor_count();
  {
    auto pool = make_pool("");
    for (int i = 0; i < 10; ++i) {
      pool->call("g", kContext).get();
      ASSERT_EQ(hibernate(*pool)["hibernated"], true);
      if (i % 3 == 0) {
        pool->submit({Request::Kind::reap, "g"}).get();  // ended while hibernated
      } else {
        ASSERT_EQ(wake(*pool)["woken"], true);
      }
    }
    pool->call("g", kContext).get();
    ASSERT_EQ(hibernate(*pool)["hibernated"], true);  // and one left hibernated at shutdown
  }
  cuda_.configure("restore=999,locks_dir=" + locks_.path);
  {
    auto config = fixture_config({"g"});
    config.environments["g"].env["ISOHOST_FAKE_CUDA_LOCKS"] = locks_.path;
    Pool pool(config, PoolOptions{.sweep_orphans = false, .cuda_library = ISOHOST_FAKE_CUDA_PATH});
    pool.call("g", kContext).get();
    ASSERT_EQ(hibernate(pool)["hibernated"], true);
    EXPECT_EQ(call_error(pool.call("g", "isohost_test_funcs:pid")).kind(), ErrorKind::wake_failed);
  }
  EXPECT_EQ(test_support::open_descriptor_count(), fds_before);
  EXPECT_TRUE(test_support::workers_tagged(proc::host_tag()).empty()) << "no worker left";
}

}  // namespace
}  // namespace isohost::pool
