// [host] loop_poll_after_call (config.hpp): after a call returns, the pool's event loop polls
// that long before it sleeps. Seen from /proc: a polling thread is running (R), a sleeping one
// waits in the kernel (S).

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <asio/post.hpp>

#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include "pool/pool.hpp"
#include "support/test_support.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::pool {
namespace {

using namespace std::chrono_literals;
using isohost::test_support::eventually;
using isohost::test_support::fixture_config;

// The loop thread's id, from a handler it runs.
pid_t loop_thread_id(Pool& pool) {
  std::promise<pid_t> id;
  asio::post(pool.io(), [&id] { id.set_value(static_cast<pid_t>(::syscall(SYS_gettid))); });
  return id.get_future().get();
}

// The thread's state letter in /proc/self/task/TID/stat (R running, S sleeping, ...).
char thread_state(pid_t tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto name_end = stat.rfind(')');  // the name may hold spaces and parentheses
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return '?';
  return stat[name_end + 2];
}

Config polling_after_a_call(std::chrono::microseconds spell) {
  auto config = fixture_config({"a"});
  config.host.loop_poll_after_call = spell;
  return config;
}

// The loop thread's id, once a first call has returned.
pid_t loop_after_a_call(Pool& pool) {
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 3}).get(), 5);
  return loop_thread_id(pool);
}

TEST(PoolLoopPolling, AfterACallTheLoopPollsForTheConfiguredSpellThenSleeps) {
  Pool pool(polling_after_a_call(1s));
  const pid_t loop = loop_after_a_call(pool);
  EXPECT_EQ(thread_state(loop), 'R') << "within a second of the call, the loop still polls";
  EXPECT_TRUE(eventually([&] { return thread_state(loop) == 'S'; }, 10s))
      << "the loop sleeps once the spell is over";
}

TEST(PoolLoopPolling, TheNextCallEndsTheSpellSoThatTheLoopSleepsWhileTheWorkerRunsIt) {
  Pool pool(polling_after_a_call(1000s));
  const pid_t loop = loop_after_a_call(pool);
  ASSERT_EQ(thread_state(loop), 'R');
  const isohost::test_support::TempDir dir;
  const auto fifo = dir.path + "/hold";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto held = pool.call("a", "isohost_test_funcs:hold_gil_reading", {fifo});
  const wire::UniqueFd writer(::open(fifo.c_str(), O_WRONLY | O_CLOEXEC));  // the call runs
  EXPECT_TRUE(eventually([&] { return thread_state(loop) == 'S'; }, 10s));
  ASSERT_EQ(::write(writer.get(), "x", 1), 1);
  EXPECT_EQ(held.get(), 1);
}

TEST(PoolLoopPolling, WithoutASpellTheLoopSleepsSoonAfterACall) {
  Pool pool(polling_after_a_call(0us));
  const pid_t loop = loop_after_a_call(pool);
  EXPECT_TRUE(eventually([&] { return thread_state(loop) == 'S'; }, 1s));
}

}  // namespace
}  // namespace isohost::pool
