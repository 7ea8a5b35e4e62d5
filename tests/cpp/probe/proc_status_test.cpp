#include "probe/proc_status.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "child_process.hpp"
#include "fixtures.hpp"
#include "probe/probe_error.hpp"

namespace isohost::probe {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

TEST(ParseProcStatus, RecordedFromLinux6) {
  const RssCounters counters = parse_proc_status(testing::read_fixture("status.txt"));
  EXPECT_TRUE(counters.measured);
  EXPECT_EQ(counters.rss, 1760 * KiB);
  EXPECT_EQ(counters.rss_anon, 108 * KiB);
  EXPECT_EQ(counters.rss_file, 1652 * KiB);
  EXPECT_EQ(counters.rss_shmem, 0u);
  EXPECT_EQ(counters.swap, 0u);
}

TEST(ParseProcStatus, ZombieHasNoCounters) {
  // What a zombie's status holds: identity and signals, no Vm* lines.
  const RssCounters counters = parse_proc_status("Name:\tpython3\nState:\tZ (zombie)\nTgid:\t7918\nThreads:\t1\n");
  EXPECT_EQ(counters, RssCounters{});
}

TEST(ReadRssCounters, SeesAChildTouchOneHundredMiB) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "TSan maps shadow memory for every page touched, so RSS grows by more than the 100 MiB";
#endif
  constexpr size_t touched = 100 * MiB;
  testing::ChildProcess child([](char command) -> char {
    return command == 't' ? testing::touch_new_memory(touched) : 'r';
  });
  ASSERT_EQ(child.ask('?'), 'r');
  const RssCounters before = read_rss_counters(child.pid());
  ASSERT_EQ(child.ask('t'), 0x5a);
  const RssCounters after = read_rss_counters(child.pid());
  ASSERT_GE(after.rss_anon, before.rss_anon);
  const uint64_t grown = after.rss_anon - before.rss_anon;
  EXPECT_GE(grown, touched * 95 / 100) << grown / KiB << " KiB";
  EXPECT_LE(grown, touched * 105 / 100) << grown / KiB << " KiB";
}

TEST(ReadRssCounters, UnreapedZombieSaysGone) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  try {
    read_rss_counters(pid);
    ADD_FAILURE() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::process_gone);
    EXPECT_EQ(std::string(error.what()), "process " + std::to_string(pid) + " is gone");
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace
}  // namespace isohost::probe
