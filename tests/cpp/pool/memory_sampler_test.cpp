#include "pool/memory_sampler.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "probe/child_process.hpp"

namespace isohost::pool {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

using probe::testing::ChildProcess;

// Admission's reading: the RSS counters move the last exact figures; a real child process
// touches 100 MiB between the two samples.
TEST(MemorySampler, FromCountersFollowsAProcessThatGrows) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "TSan maps shadow memory for every page touched";
#endif
  constexpr std::size_t touched = 100 * kMiB;
  ChildProcess child([](char command) -> char {
    return command == 't' ? probe::testing::touch_new_memory(touched) : 'r';
  });
  ASSERT_EQ(child.ask('?'), 'r');
  MemorySampler sampler;
  const auto exact = sampler.sample({{child.pid(), false}});
  ASSERT_TRUE(exact.at(0).ram.has_value()) << exact.at(0).error;
  ASSERT_EQ(child.ask('t'), 0x5a);
  const auto counted =
      sampler.sample({{child.pid(), false}}, MemorySampler::RamReading::from_counters);
  ASSERT_TRUE(counted.at(0).ram.has_value()) << counted.at(0).error;
  const auto grown = counted.at(0).ram->pss - exact.at(0).ram->pss;
  EXPECT_GE(grown, touched * 95 / 100) << grown / kMiB << " MiB";
  EXPECT_LE(grown, touched * 105 / 100) << grown / kMiB << " MiB";
  EXPECT_EQ(counted.at(0).ram->pss_file, exact.at(0).ram->pss_file);
  // An exact reading walks the page tables again and agrees.
  const auto again = sampler.sample({{child.pid(), false}});
  const auto exact_grown = again.at(0).ram->pss - exact.at(0).ram->pss;
  EXPECT_LE(grown > exact_grown ? grown - exact_grown : exact_grown - grown, 4 * kMiB);
}

TEST(MemorySampler, FromCountersNamesAGoneProcess) {
  MemorySampler sampler;
  pid_t pid = -1;
  {
    ChildProcess child([](char) -> char { return 'r'; });
    ASSERT_EQ(child.ask('?'), 'r');
    pid = child.pid();
    ASSERT_TRUE(sampler.sample({{pid, false}}).at(0).ram.has_value());
  }  // ended and reaped
  const auto gone = sampler.sample({{pid, false}}, MemorySampler::RamReading::from_counters);
  EXPECT_FALSE(gone.at(0).ram.has_value());
  EXPECT_NE(gone.at(0).error.find("gone"), std::string::npos) << gone.at(0).error;
}

}  // namespace
}  // namespace isohost::pool
