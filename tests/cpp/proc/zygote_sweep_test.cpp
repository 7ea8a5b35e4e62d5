// The orphan sweep also ends a zygote and the workers it forked when their host is gone: a
// forked worker keeps the zygote's command line, --host tag included.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include "probe/proc_stat.hpp"
#include "proc/orphan_sweep.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "support/test_support.hpp"
#include "wire/socket_io.hpp"
#include "worker/runtime_location.hpp"
#include "worker/worker.hpp"

namespace isohost::proc {
namespace {

TEST(OrphanSweep, EndsAZygoteAndItsForkedWorkerLeftByADeadHost) {
  // The "host" is a sleep, alive while the zygote forks (so the startup sweep of a test running
  // beside this one leaves it alone) and killed before the sweep. No death signal: as if the
  // host had died without taking its processes.
  auto host = spawn(
      {.program = "/bin/sleep", .argv = {"/bin/sleep", "60"}, .env = scrubbed_environment({})});
  const std::string tag =
      std::to_string(host.pid) + ":" + std::to_string(probe::process_start_time(host.pid));
  auto zygote_channels = worker::WorkerChannels::make();
  auto zygote =
      spawn({.program = ISOHOST_TEST_PYTHON,
             .argv = {ISOHOST_TEST_PYTHON, "-s", "-u",
                      worker::find_worker_runtime() + "/isohost_worker/__main__.py", "--fd", "3",
                      "--side-fd", "4", "--env", "a", "--host", tag, "--path",
                      ISOHOST_TEST_MODULES_DIR, "--zygote", "--preload", "isohost_test_funcs"},
             .env = scrubbed_environment({}),
             .fds = {{zygote_channels.worker_socket.get(), 3},
                     {zygote_channels.worker_side_socket.get(), 4}},
             .death_signal = 0});
  zygote_channels.worker_socket.reset();
  zygote_channels.worker_side_socket.reset();
  const int zygote_socket = zygote_channels.host_socket.get();
  wire::FrameReader reader;
  const auto hello = wire::receive_frame(zygote_socket, reader);
  ASSERT_TRUE(hello && hello->body["zygote"] == true);
  auto child = worker::WorkerChannels::make();
  const int passed[] = {child.worker_socket.get(), child.worker_side_socket.get(),
                        child.stdout_write.get(), child.stderr_write.get()};
  wire::send_frame(zygote_socket, {{"op", "fork"}, {"id", 1}, {"env", "a"}, {"generation", 1}},
                   passed);
  const auto reply = wire::receive_frame(zygote_socket, reader);
  ASSERT_TRUE(reply && reply->body["ok"] == true) << (reply ? reply->body.dump() : "no reply");
  const pid_t forked = reply->body["value"]["pid"];
  auto forked_pidfd = open_pidfd(forked);
  wire::FrameReader child_reader;
  ASSERT_TRUE(wire::receive_frame(child.host_socket.get(), child_reader))
      << "the forked worker said hello";

  ::kill(host.pid, SIGKILL);
  reap(host.pidfd.get());
  // Another test's pool may sweep them first; either way a sweep must end both.
  sweep_orphaned_workers();
  EXPECT_EQ(reap(zygote.pidfd.get()), ExitStatus::killed(SIGKILL));
  EXPECT_EQ(reap(forked_pidfd.get()), ExitStatus::killed(SIGKILL)) << "this process is its parent";
}

}  // namespace
}  // namespace isohost::proc
