// kill_tree and end_escaped with real processes: a subreaper's setsid() grandchild, and
// processes that carry a host's tag in their environment inside and outside this one's tree.

#include "proc/process_tree.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "probe/probe_error.hpp"
#include "probe/proc_stat.hpp"
#include "proc/orphan_sweep.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "support/test_support.hpp"

namespace isohost::proc {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::Not;

// A process this test holds through a pidfd though it is not its child; killed at the end.
class Held {
 public:
  explicit Held(pid_t pid)
      : pid_(pid), pidfd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}
  ~Held() {
    if (pidfd_) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool valid() const { return pidfd_.valid(); }
  // Waits until it ends (its pidfd turns readable), at most `limit`.
  [[nodiscard]] bool ends_within(std::chrono::milliseconds limit) const {
    pollfd entry{.fd = pidfd_.get(), .events = POLLIN, .revents = 0};
    return ::poll(&entry, 1, static_cast<int>(limit.count())) == 1;
  }

 private:
  pid_t pid_;
  wire::UniqueFd pidfd_;
};

// Runs `argv` with `env` and its stdout on a pipe; the first line it writes is read as a pid.
// `child` keeps the process itself.
pid_t run_and_read_pid(std::vector<std::string> argv, std::vector<std::string> env, Child& child) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  wire::UniqueFd read_end(fds[0]);
  wire::UniqueFd write_end(fds[1]);
  const std::string program = argv[0];
  child = spawn({.program = program,
                 .argv = std::move(argv),
                 .env = std::move(env),
                 .fds = {{write_end.get(), 1}, {2, 2}},
                 .death_signal = 0});
  write_end.reset();
  std::string line;
  char c;
  while (::read(read_end.get(), &c, 1) == 1 && c != '\n') line += c;
  return line.empty() ? -1 : std::stoi(line);
}

// A process outside this test's tree carrying ISOHOST_HOST_TAG=`tag`: a shell starts a
// setsid()ed /bin/sleep in the background and exits, so it is re-parented to init; held by a
// pidfd from the moment its pid is known. Returns once it runs /bin/sleep (or has already been
// ended by another test's sweep): until then it is the shell's fork or setsid, and in the
// instant of each exec /proc shows its command line before its environment, so a sweep then
// could not tell its tag.
std::unique_ptr<Held> start_escaped(const std::string& tag) {
  Child shell;
  const pid_t pid = run_and_read_pid(
      {"/bin/sh", "-c", "/usr/bin/setsid /bin/sleep 60 </dev/null >/dev/null 2>&1 & echo $!"},
      scrubbed_environment({{kHostTagVariable, tag}}), shell);
  auto held = std::make_unique<Held>(pid);
  reap(shell.pidfd.get());
  const bool settled = isohost::test_support::eventually([&held] {
    if (held->ends_within(0ms)) return true;
    try {
      const auto args = probe::process_cmdline(held->pid());
      return !args.empty() && args[0] == "/bin/sleep" &&
             probe::find_environment_value(probe::process_environment(held->pid()),
                                           kHostTagVariable)
                 .has_value();
    } catch (const probe::ProbeError&) {
      return false;
    }
  });
  EXPECT_TRUE(settled) << "pid " << pid << " never ran /bin/sleep with its tag";
  return held;
}

TEST(ProcessTree, KillTreeEndsASubreapersSetsidGrandchildAndTheLeader) {
  // The leader is a child subreaper, as a worker is: its grandchild calls setsid() and its
  // child exits, so the grandchild is in neither its group nor init's care, but its own.
  const char* script =
      "import ctypes, os, sys, time\n"
      "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
      "r, w = os.pipe()\n"
      "if os.fork() == 0:\n"
      "    if os.fork() == 0:\n"
      "        os.setsid()\n"
      "        os.write(w, b'%d\\n' % os.getpid())\n"
      "        os.execv('/bin/sleep', ['sleep', '60'])\n"
      "    os._exit(0)\n"
      "os.close(w)\n"
      "line = os.read(r, 32)\n"
      "os.wait()\n"
      "sys.stdout.write(line.decode())\n"
      "sys.stdout.flush()\n"
      "time.sleep(60)\n";
  Child leader;
  const Held grandchild(
      run_and_read_pid({ISOHOST_TEST_PYTHON, "-c", script}, scrubbed_environment({}), leader));
  ASSERT_TRUE(grandchild.valid());
  EXPECT_FALSE(grandchild.ends_within(0ms));
  const auto ended = kill_tree(leader.pid);
  EXPECT_THAT(ended, Contains(grandchild.pid()));
  EXPECT_TRUE(grandchild.ends_within(5s)) << "the setsid grandchild outlived its tree's kill";
  EXPECT_EQ(reap(leader.pidfd.get()), ExitStatus::killed(SIGKILL));
}

TEST(ProcessTree, EndEscapedEndsTaggedProcessesOutsideThisTreeOnly) {
  const auto escaped = start_escaped(host_tag());
  const auto other_host = start_escaped("1:1");
  ASSERT_TRUE(escaped->valid() && other_host->valid());
  // One of this tree, with the same tag: a live worker's descendant is never touched.
  auto inside = spawn({.program = "/bin/sleep",
                       .argv = {"/bin/sleep", "60"},
                       .env = scrubbed_environment({{kHostTagVariable, host_tag()}}),
                       .death_signal = 0});
  const auto ended = end_escaped(host_tag());
  EXPECT_THAT(ended, Contains(escaped->pid()));
  EXPECT_THAT(ended, Not(Contains(inside.pid)));
  EXPECT_THAT(ended, Not(Contains(other_host->pid())));
  EXPECT_TRUE(escaped->ends_within(5s));
  EXPECT_TRUE(isohost::test_support::process_alive(inside.pid));
  ::kill(inside.pid, SIGKILL);
  reap(inside.pidfd.get());
}

TEST(OrphanSweep, EndsWhatTheWorkersOfADeadHostLeftOutsideTheirGroup) {
  // Pid 1's start time is not 1, so "1:1" names a host that is gone.
  const auto orphan = start_escaped("1:1");
  const auto ours = start_escaped(host_tag());
  ASSERT_TRUE(orphan->valid() && ours->valid());
  const auto swept = sweep_orphans();
  EXPECT_THAT(swept.escaped, Not(Contains(ours->pid())));
  EXPECT_THAT(swept.workers, Not(Contains(orphan->pid()))) << "not a worker: its command line";
  // Another test's pool may sweep it first; either way it must end.
  EXPECT_TRUE(orphan->ends_within(5s)) << "a dead host's escaped process survived the sweep";
  EXPECT_FALSE(ours->ends_within(0ms)) << "this live host's was ended";
}

}  // namespace
}  // namespace isohost::proc
