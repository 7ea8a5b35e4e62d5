#include "proc/orphan_sweep.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "support/test_support.hpp"

namespace isohost::proc {
namespace {

// A process that looks like a worker of the host named by `tag` (its command line is what the
// sweep reads), without the death signal a real worker has.
Child fake_worker(const std::string& tag) {
  return spawn({.program = "/bin/sh",
                .argv = {"/bin/sh", "-c", "sleep 60; :", "isohost_worker/__main__.py", "--host", tag},
                .env = scrubbed_environment({}),
                .death_signal = 0});
}

TEST(OrphanSweep, EndsWorkersOfADeadHostAndSparesThoseOfALiveOne) {
  // Pid 1's start time is not 1, so this names a host that is gone.
  auto orphan = fake_worker("1:1");
  auto ours = fake_worker(host_tag());
  const auto swept = sweep_orphaned_workers();
  EXPECT_THAT(swept, ::testing::Not(::testing::Contains(ours.pid)));
  // A sweep run by a test beside this one may end it first; either way a sweep must end it.
  EXPECT_EQ(reap(orphan.pidfd.get()), ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(test_support::process_alive(ours.pid));
  signal_group(ours.pid, SIGKILL);
  reap(ours.pidfd.get());
}

}  // namespace
}  // namespace isohost::proc
