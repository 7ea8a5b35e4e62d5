#include "probe/meminfo.hpp"

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace isohost::probe {
namespace {

constexpr uint64_t KiB = 1024;

TEST(ParseMeminfo, Recorded) {
  const SystemMemory memory = parse_meminfo(testing::read_fixture("meminfo.txt"));
  EXPECT_EQ(memory.total, 24683568 * KiB);
  EXPECT_EQ(memory.available, 23473152 * KiB);
}

TEST(ParseMeminfo, WithoutMemAvailableEstimatesFromFreeAndCache) {
  const SystemMemory memory =
      parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\nActive(anon): 5 kB\n");
  EXPECT_EQ(memory.total, 1000 * KiB);
  EXPECT_EQ(memory.available, 420 * KiB);
}

TEST(ParseMeminfo, EmptyIsZero) { EXPECT_EQ(parse_meminfo(""), SystemMemory{}); }

TEST(ReadSystemMemory, ThisMachine) {
  const SystemMemory memory = read_system_memory();
  EXPECT_GT(memory.total, 0u);
  EXPECT_GT(memory.available, 0u);
  EXPECT_LE(memory.available, memory.total);
}

}  // namespace
}  // namespace isohost::probe
