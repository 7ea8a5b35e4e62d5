// No descriptor, process or file left behind after many calls and replacements.

#include <gtest/gtest.h>

#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using namespace isohost::test_support;

// What appeared in `dir` since `before`, less other tests' own temporary directories.
std::set<std::string> new_entries(const std::string& dir, const std::set<std::string>& before) {
  std::set<std::string> added;
  for (const auto& name : directory_entries(dir)) {
    if (!before.contains(name) && name.rfind("isohost-test-", 0) != 0) added.insert(name);
  }
  return added;
}

TEST(PoolLeaks, ThousandCallsAndTwentyReplacementsLeaveNothingBehind) {
  const auto tmp_before = directory_entries("/tmp");
  const auto shm_before = directory_entries("/dev/shm");
  const int fds_before = open_descriptor_count();
  {
    Pool pool(fixture_config({"a", "b"}));
    int fds_warm = -1;
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(pool.call(i % 2 ? "a" : "b", "isohost_test_funcs:add", {i, 1}).get(), i + 1);
      if (i == 10) fds_warm = open_descriptor_count();
    }
    EXPECT_EQ(open_descriptor_count(), fds_warm) << "no growth across calls";
    for (int i = 0; i < 20; ++i) {
      EXPECT_THROW(pool.call("a", "isohost_test_funcs:crash_with_code", {1}).get(), Error);
      ASSERT_EQ(pool.call("a", "isohost_test_funcs:add", {i, 1}).get(), i + 1);
    }
    EXPECT_EQ(open_descriptor_count(), fds_warm) << "no growth across replacements";
  }
  EXPECT_EQ(open_descriptor_count(), fds_before);
  EXPECT_TRUE(workers_tagged(proc::host_tag()).empty()) << "no worker left";
  // Other programs on the machine (a compiler's temporaries) come and go; what this pool left
  // would stay.
  for (const auto& [dir, before] :
       {std::pair{"/tmp", tmp_before}, std::pair{"/dev/shm", shm_before}}) {
    EXPECT_TRUE(eventually([&] { return new_entries(dir, before).empty(); }))
        << "left in " << dir << ": " << ::testing::PrintToString(new_entries(dir, before));
  }
}

}  // namespace
}  // namespace isohost::pool
