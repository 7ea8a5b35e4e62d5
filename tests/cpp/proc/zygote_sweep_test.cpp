// The orphan sweep also ends a zygote and the workers it forked when their host is gone: a
// forked worker keeps the zygote's command line, --host tag included.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

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
  auto zygote_channels = worker::WorkerChannels::make();
  // Tagged with a host that is gone (pid 1's start time is not 1), and no death signal, as if
  // its host had died without taking it.
  auto zygote = spawn({.program = ISOHOST_TEST_PYTHON,
                       .argv = {ISOHOST_TEST_PYTHON, "-s", "-u",
                                worker::find_worker_runtime() + "/isohost_worker/__main__.py", "--fd",
                                "3", "--env", "a", "--host", "1:1", "--path", ISOHOST_TEST_MODULES_DIR,
                                "--zygote", "--preload", "isohost_test_funcs"},
                       .env = scrubbed_environment({}),
                       .fds = {{zygote_channels.worker_socket.get(), 3}},
                       .death_signal = 0});
  zygote_channels.worker_socket.reset();
  const int zygote_socket = zygote_channels.host_socket.get();
  wire::FrameReader reader;
  const auto hello = wire::receive_frame(zygote_socket, reader);
  ASSERT_TRUE(hello && hello->body["zygote"] == true);
  auto child = worker::WorkerChannels::make();
  const int passed[] = {child.worker_socket.get(), child.stdout_write.get(), child.stderr_write.get()};
  wire::send_frame(zygote_socket, {{"op", "fork"}, {"id", 1}, {"env", "a"}, {"generation", 1}}, passed);
  const auto reply = wire::receive_frame(zygote_socket, reader);
  ASSERT_TRUE(reply && reply->body["ok"] == true) << (reply ? reply->body.dump() : "no reply");
  const pid_t forked = reply->body["value"]["pid"];
  auto forked_pidfd = open_pidfd(forked);
  wire::FrameReader child_reader;
  ASSERT_TRUE(wire::receive_frame(child.host_socket.get(), child_reader)) << "the forked worker said hello";

  const auto swept = sweep_orphaned_workers();
  EXPECT_THAT(swept, ::testing::Contains(zygote.pid));
  EXPECT_THAT(swept, ::testing::Contains(forked));
  EXPECT_EQ(reap(zygote.pidfd.get()), ExitStatus::killed(SIGKILL));
  EXPECT_EQ(reap(forked_pidfd.get()), ExitStatus::killed(SIGKILL)) << "this process is its parent";
}

}  // namespace
}  // namespace isohost::proc
