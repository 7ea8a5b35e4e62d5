// No descriptor, process or file left behind after many calls and replacements.

#include <gtest/gtest.h>

#include "pool/pool.hpp"
#include "proc/orphan_sweep.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using namespace isohost::test_support;

TEST(PoolLeaks, ThousandCallsAndTwentyReplacementsLeaveNothingBehind) {
  // The workers' temporary directory is this test's own: what they left would stay there
  // (other programs come and go in /tmp, so it is not watched).
  TempDir tmp;
  auto config = fixture_config({"a", "b"});
  for (auto& [name, env] : config.environments) env.env["TMPDIR"] = tmp.path;
  const int fds_before = open_descriptor_count();
  {
    Pool pool(config);
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
  EXPECT_TRUE(directory_entries(tmp.path).empty())
      << "left in " << tmp.path << ": " << ::testing::PrintToString(directory_entries(tmp.path));
}

}  // namespace
}  // namespace isohost::pool
