// What a worker's code starts that leaves the worker's process group (setsid) still ends with
// the worker, whichever way the worker ends (docs/lifecycle.md, "When the host dies"). Run for
// spawned and for zygote-forked workers (the "zygote:" copies).

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>

#include <chrono>
#include <memory>
#include <optional>

#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "proc/process_tree.hpp"
#include "support/test_support.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;
using isohost::test_support::call_error;
using isohost::test_support::fixture_config;

// A setsid() grandchild a worker started (isohost_test_funcs:start_setsid_grandchild), held
// through a pidfd from the moment its pid is known; killed at the end if a test left it.
class Grandchild {
 public:
  Grandchild(Pool& pool, const std::string& env, bool clear_environment = false)
      : pid_(pool.call(env, "isohost_test_funcs:start_setsid_grandchild",
                       {dir_.path + "/grandchild.pid", clear_environment})
                 .get()
                 .get<pid_t>()),
        pidfd_(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0))) {}
  ~Grandchild() {
    if (pidfd_) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  }
  Grandchild(const Grandchild&) = delete;
  Grandchild& operator=(const Grandchild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool held() const { return pidfd_.valid(); }
  // Waits until it ends (its pidfd turns readable), at most `limit`.
  [[nodiscard]] bool ends_within(std::chrono::milliseconds limit) const {
    pollfd entry{.fd = pidfd_.get(), .events = POLLIN, .revents = 0};
    return ::poll(&entry, 1, static_cast<int>(limit.count())) == 1;
  }
  // ISOHOST_HOST_TAG in the environment it was started with; "" when none.
  [[nodiscard]] std::string environment_tag() const {
    return proc::environment_host_tag(pid_).value_or("");
  }

 private:
  isohost::test_support::TempDir dir_;
  pid_t pid_;
  wire::UniqueFd pidfd_;
};

pid_t worker_pid(Pool& pool, const std::string& env) {
  for (const auto& w : pool.status().get().workers) {
    if (w.env == env) return w.pid;
  }
  ADD_FAILURE() << "no worker for " << env;
  return -1;
}

TEST(PoolEscape, ReapEndsASetsidGrandchild) {
  Pool pool(fixture_config({"a"}));
  const Grandchild grandchild(pool, "a");
  ASSERT_TRUE(grandchild.held());
  EXPECT_FALSE(grandchild.ends_within(0ms));
  pool.submit({Request::Kind::reap, "a"}).get();
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the setsid grandchild outlived its reaped worker";
}

TEST(PoolEscape, ShutdownEndsASetsidGrandchild) {
  std::optional<Pool> pool(std::in_place, fixture_config({"a"}));
  const Grandchild grandchild(*pool, "a");
  ASSERT_TRUE(grandchild.held());
  pool.reset();
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the setsid grandchild outlived the host's shutdown";
}

TEST(PoolEscape, KillNineOfTheWorkerEndsItsSetsidGrandchild) {
  Pool pool(fixture_config({"a"}));
  const Grandchild grandchild(pool, "a");
  ASSERT_TRUE(grandchild.held());
  EXPECT_EQ(grandchild.environment_tag(), proc::host_tag()) << "it carries this host's tag";
  ::kill(worker_pid(pool, "a"), SIGKILL);
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the setsid grandchild outlived its crashed worker";
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 1}).get(), 2);
}

TEST(PoolEscape, CallTimeoutEndsASetsidGrandchildThatClearedItsEnvironment) {
  // Without the host's tag, only the worker's tree holds it: the host ends that tree before
  // it kills the worker.
  auto config = fixture_config({"a"});
  config.environments["a"].call_timeout = 1s;
  Pool pool(config);
  const Grandchild grandchild(pool, "a", true);
  ASSERT_TRUE(grandchild.held());
  EXPECT_EQ(grandchild.environment_tag(), "");
  EXPECT_EQ(call_error(pool.call("a", "isohost_test_funcs:sleep", {60})).kind(),
            ErrorKind::call_timeout);
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the grandchild outlived its worker's timeout";
}

TEST(PoolEscape, ReapEndsASetsidGrandchildThatClearedItsEnvironment) {
  Pool pool(fixture_config({"a"}));
  const Grandchild grandchild(pool, "a", true);
  ASSERT_TRUE(grandchild.held());
  pool.submit({Request::Kind::reap, "a"}).get();
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the grandchild outlived its reaped worker";
}

}  // namespace
}  // namespace isohost::pool
