#include "probe/smaps.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "child_process.hpp"
#include "fixtures.hpp"
#include "probe/probe_error.hpp"

namespace isohost::probe {
namespace {

using testing::ChildProcess;
using testing::read_fixture;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

TEST(ParseSmapsRollup, RecordedFromLinux6) {
  const MemoryFootprint f = parse_smaps_rollup(read_fixture("smaps_rollup_linux6.txt"));
  EXPECT_TRUE(f.measured);
  EXPECT_TRUE(f.has_pss_split);
  EXPECT_EQ(f.rss, 1784 * KiB);
  EXPECT_EQ(f.pss, 259 * KiB);
  EXPECT_EQ(f.pss_anon, 112 * KiB);
  EXPECT_EQ(f.pss_file, 147 * KiB);
  EXPECT_EQ(f.pss_shmem, 0u);
  EXPECT_EQ(f.shared_clean, 1632 * KiB);
  EXPECT_EQ(f.shared_dirty, 0u);
  EXPECT_EQ(f.private_clean, 40 * KiB);
  EXPECT_EQ(f.private_dirty, 112 * KiB);
  EXPECT_EQ(f.anonymous, 112 * KiB);
  EXPECT_EQ(f.swap, 0u);
  EXPECT_EQ(f.swap_pss, 0u);
  EXPECT_EQ(f.private_bytes(), 152 * KiB);
  EXPECT_EQ(f.shared_bytes(), 1632 * KiB);
}

TEST(ParseSmapsRollup, OldKernelWithoutPssSplitIsEstimated) {
  const MemoryFootprint f = parse_smaps_rollup(read_fixture("smaps_rollup_pre57.txt"));
  EXPECT_TRUE(f.measured);
  EXPECT_FALSE(f.has_pss_split);
  EXPECT_EQ(f.rss, 5000 * KiB);
  EXPECT_EQ(f.pss, 3000 * KiB);
  EXPECT_EQ(f.pss_anon, 2200 * KiB);  // min(Anonymous, Pss)
  EXPECT_EQ(f.pss_file, 800 * KiB);   // the rest
  EXPECT_EQ(f.pss_shmem, 0u);
  EXPECT_EQ(f.private_dirty, 2000 * KiB);
  EXPECT_EQ(f.swap, 16 * KiB);
  EXPECT_EQ(f.swap_pss, 12 * KiB);
}

TEST(ParseSmapsRollup, AnonymousAbovePssCapsAtPss) {
  // A zygote child: its anonymous pages are shared, so Anonymous (whole pages) exceeds Pss.
  const MemoryFootprint f = parse_smaps_rollup("Rss: 800 kB\nPss: 300 kB\nAnonymous: 500 kB\n");
  EXPECT_EQ(f.pss_anon, 300 * KiB);
  EXPECT_EQ(f.pss_file, 0u);
}

TEST(ParseSmapsRollup, EmptyTextIsAllZeroAndNotMeasured) {
  EXPECT_EQ(parse_smaps_rollup(read_fixture("smaps_rollup_empty.txt")), MemoryFootprint{});
  EXPECT_EQ(parse_smaps_rollup(""), MemoryFootprint{});
  EXPECT_FALSE(parse_smaps_rollup("").measured);
}

TEST(ParseSmapsRollup, TextWithoutRssIsNotMeasured) {
  const MemoryFootprint f = parse_smaps_rollup("Pss: 10 kB\nSomething: else\n");
  EXPECT_FALSE(f.measured);
  EXPECT_EQ(f.pss, 10 * KiB);
}

TEST(ParseSmapsRollup, MeasuredZeroIsNotUnmeasured) {
  const MemoryFootprint f = parse_smaps_rollup("Rss: 0 kB\nPss: 0 kB\n");
  EXPECT_TRUE(f.measured);
  EXPECT_EQ(f.rss, 0u);
}

TEST(ParseSmapsRollup, ToleratesUnknownMalformedAndMissingFields) {
  const MemoryFootprint f = parse_smaps_rollup(
      "garbage line without colon\n"
      "Rss:   \t 12 kB\r\n"
      "Future_Field:  99 kB\n"
      "Pss: twelve kB\n"
      "Private_Dirty: 7 MB\n"  // not the kernel's unit: ignored
      "Anonymous: 4 kB");       // no final newline
  EXPECT_TRUE(f.measured);
  EXPECT_EQ(f.rss, 12 * KiB);
  EXPECT_EQ(f.pss, 0u);
  EXPECT_EQ(f.private_dirty, 0u);
  EXPECT_EQ(f.anonymous, 4 * KiB);
}

TEST(ParseSmaps, SumsMappingsAndDerivesTheSplitPerMapping) {
  const MemoryFootprint f = parse_smaps(read_fixture("smaps_mappings.txt"));
  EXPECT_TRUE(f.measured);
  EXPECT_FALSE(f.has_pss_split);
  EXPECT_EQ(f.rss, 816 * KiB);
  EXPECT_EQ(f.pss, 374 * KiB);
  // heap 100 + library .data copy-on-write 20 + zygote-shared anonymous 100 + stack 12
  EXPECT_EQ(f.pss_anon, 232 * KiB);
  // library text 100 + the file part of .data 10
  EXPECT_EQ(f.pss_file, 110 * KiB);
  // the memfd mapping
  EXPECT_EQ(f.pss_shmem, 32 * KiB);
  EXPECT_EQ(f.pss_anon + f.pss_file + f.pss_shmem, f.pss);
  EXPECT_EQ(f.shared_clean, 420 * KiB);
  EXPECT_EQ(f.shared_dirty, 264 * KiB);
  EXPECT_EQ(f.private_clean, 0u);
  EXPECT_EQ(f.private_dirty, 132 * KiB);
  EXPECT_EQ(f.anonymous, 332 * KiB);
  EXPECT_EQ(f.swap, 8 * KiB);
  EXPECT_EQ(f.swap_pss, 8 * KiB);
}

TEST(ParseSmaps, RecordedFromLinux6) {
  // Sums checked against awk over the same file.
  const MemoryFootprint f = parse_smaps(read_fixture("smaps_real.txt"));
  EXPECT_TRUE(f.measured);
  EXPECT_EQ(f.rss, 1760 * KiB);
  EXPECT_EQ(f.pss, 253 * KiB);
  EXPECT_EQ(f.anonymous, 120 * KiB);
  EXPECT_EQ(f.private_dirty, 120 * KiB);
  EXPECT_EQ(f.private_clean, 40 * KiB);
  EXPECT_EQ(f.shared_clean, 1600 * KiB);
  EXPECT_EQ(f.pss_anon + f.pss_file + f.pss_shmem, f.pss);
  EXPECT_EQ(f.pss_anon, 120 * KiB);  // every anonymous page of cat is private
}

TEST(MovedToRss, GrowthAndShrinkLandOnThePrivateAnonymousFigures) {
  MemoryFootprint exact{.rss = 1000,
                        .pss = 600,
                        .pss_anon = 300,
                        .pss_file = 300,
                        .private_dirty = 350,
                        .anonymous = 320,
                        .measured = true};
  const MemoryFootprint grown = moved_to_rss(exact, 1500);
  EXPECT_EQ(grown.rss, 1500u);
  EXPECT_EQ(grown.pss, 1100u);
  EXPECT_EQ(grown.pss_anon, 800u);
  EXPECT_EQ(grown.private_dirty, 850u);
  EXPECT_EQ(grown.anonymous, 820u);
  EXPECT_EQ(grown.pss_file, 300u);  // the libraries are as they were
  const MemoryFootprint shrunk = moved_to_rss(exact, 600);
  EXPECT_EQ(shrunk.rss, 600u);
  EXPECT_EQ(shrunk.pss, 200u);
  EXPECT_EQ(shrunk.pss_anon, 0u);  // never below 0
  EXPECT_EQ(shrunk.private_dirty, 0u);
  EXPECT_EQ(moved_to_rss(exact, 1000), exact);
}

TEST(ParseSmaps, EmptyIsNotMeasured) { EXPECT_EQ(parse_smaps(""), MemoryFootprint{}); }

TEST(ParseSmaps, UsesTheSplitWhenEveryMappingHasIt) {
  const MemoryFootprint f = parse_smaps(
      "7f00-7f01 rw-p 00000000 00:00 0\nRss: 8 kB\nPss: 8 kB\nPss_Anon: 6 kB\nPss_File: 2 kB\nPss_Shmem: 0 kB\n");
  EXPECT_TRUE(f.has_pss_split);
  EXPECT_EQ(f.pss_anon, 6 * KiB);
  EXPECT_EQ(f.pss_file, 2 * KiB);
}

TEST(ReadFootprint, OwnProcess) {
  const MemoryFootprint f = read_footprint(::getpid());
  EXPECT_TRUE(f.measured);
  EXPECT_GT(f.rss, 0u);
  EXPECT_GT(f.pss, 0u);
  EXPECT_LE(f.pss, f.rss);
  EXPECT_GT(f.private_dirty, 0u);
}

// The acceptance check of the whole probe: a child that touches 100 MiB must show 100 MiB more
// PSS and private dirty memory.
TEST(ReadFootprint, SeesAChildTouchOneHundredMiB) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "TSan maps shadow memory for every page touched, so RSS grows by more than the 100 MiB";
#endif
  constexpr size_t touched = 100 * MiB;
  ChildProcess child([](char command) -> char {
    return command == 't' ? testing::touch_new_memory(touched) : 'r';
  });
  ASSERT_EQ(child.ask('?'), 'r');  // the child runs: its memory is settled
  const MemoryFootprint before = read_footprint(child.pid());
  ASSERT_EQ(child.ask('t'), 0x5a);
  const MemoryFootprint after = read_footprint(child.pid());

  const auto within_5_percent = [](uint64_t grown) {
    return grown >= touched * 95 / 100 && grown <= touched * 105 / 100;
  };
  ASSERT_GE(after.pss, before.pss);
  ASSERT_GE(after.private_dirty, before.private_dirty);
  EXPECT_TRUE(within_5_percent(after.pss - before.pss))
      << "PSS grew by " << (after.pss - before.pss) / KiB << " KiB";
  EXPECT_TRUE(within_5_percent(after.private_dirty - before.private_dirty))
      << "private dirty grew by " << (after.private_dirty - before.private_dirty) / KiB << " KiB";
  EXPECT_TRUE(within_5_percent(after.pss_anon - before.pss_anon))
      << "PSS anonymous grew by " << (after.pss_anon - before.pss_anon) / KiB << " KiB";
  EXPECT_TRUE(within_5_percent(after.private_bytes() - before.private_bytes()));
}

// A woken worker keeps its host buffer for the next sleep with MADV_FREE: still resident, and
// the footprint says how much of it the kernel may take.
TEST(ReadFootprint, SeesPagesAChildFreedLazily) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "TSan maps shadow memory for every page touched";
#endif
  constexpr size_t freed = 64 * MiB;
  ChildProcess child([](char command) -> char {
    static void* block = MAP_FAILED;
    if (command == 't') {
      block = ::mmap(nullptr, freed, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED) return 'e';
      std::memset(block, 0x5a, freed);
      return 'r';
    }
    if (command == 'f') return ::madvise(block, freed, MADV_FREE) == 0 ? 'r' : 'e';
    return 'r';
  });
  ASSERT_EQ(child.ask('t'), 'r');
  const MemoryFootprint touched = read_footprint(child.pid());
  ASSERT_EQ(child.ask('f'), 'r');
  const MemoryFootprint lazily = read_footprint(child.pid());
  EXPECT_LT(touched.lazy_free, 1 * MiB);
  // Unless the kernel took some back between the two reads (memory pressure): then it is no
  // longer resident either.
  EXPECT_GE(lazily.lazy_free + (touched.rss - std::min(touched.rss, lazily.rss)), freed * 95 / 100)
      << "LazyFree " << lazily.lazy_free / KiB << " KiB";
}

pid_t reaped_child_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(ReadFootprint, GoneProcessSaysGone) {
  const pid_t pid = reaped_child_pid();
  try {
    read_footprint(pid);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::process_gone);
    EXPECT_EQ(std::string(error.what()), "process " + std::to_string(pid) + " is gone");
  }
}

TEST(ReadFootprint, UnreapedZombieSaysGone) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);  // exited, not reaped
  try {
    read_footprint(pid);
    ADD_FAILURE() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::process_gone);
    EXPECT_NE(std::string(error.what()).find("gone"), std::string::npos);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
}

TEST(ReadFootprint, ForeignProcessNamesTheFileAndReason) {
  struct stat init_status {};
  if (::geteuid() == 0 || ::stat("/proc/1", &init_status) != 0 || init_status.st_uid == ::geteuid()) {
    GTEST_SKIP() << "needs a non-root user and a pid 1 owned by someone else";
  }
  try {
    read_footprint(1);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::unreadable);
    EXPECT_EQ(std::string(error.what()), "cannot read /proc/1/smaps_rollup: Permission denied");
  }
}

}  // namespace
}  // namespace isohost::probe
