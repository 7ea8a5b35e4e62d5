// `isohost footprint` on this machine's Debian python3 with torch: the seed's table, for real.

#include <gtest/gtest.h>
#include <stdio.h>

#include <nlohmann/json.hpp>
#include <string>

namespace isohost {
namespace {

nlohmann::ordered_json run_json(const std::string& args) {
  const std::string command = std::string(ISOHOST_BINARY) + " footprint --python " +
                              ISOHOST_TEST_PYTHON + " --json " + args + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  return nlohmann::ordered_json::parse(out);
}

TEST(Footprint, TorchCostsManyTimesTheBareInterpreter) {
  const auto report = run_json("--stages bare,numpy,torch,cuda");
  ASSERT_EQ(report["stages"].size(), 4U);
  const auto& bare = report["stages"][0];
  const auto& torch = report["stages"][2];
  EXPECT_EQ(bare["name"], "bare interpreter");
  EXPECT_GT(bare["pss"].get<double>(), 1e6);
  EXPECT_GT(torch["pss"].get<double>(), 5 * bare["pss"].get<double>());
  EXPECT_GT(torch["private_anon"].get<double>(), 0);
  EXPECT_GE(torch["rss"].get<double>(), torch["pss"].get<double>());
  EXPECT_TRUE(report["torch"].is_string());
  // No GPU here: the context stage says why, and VRAM is unknown rather than 0.
  EXPECT_TRUE(report["stages"][3].contains("skipped"));
  EXPECT_TRUE(bare["vram"].is_null());
}

TEST(Footprint, WorkersShareLibraryPages) {
  const auto report = run_json("--stages bare --workers 4");
  const auto& workers = report["workers"];
  EXPECT_EQ(workers["count"], 4);
  EXPECT_LT(workers["pss_sum"].get<double>(), workers["rss_sum"].get<double>());
}

TEST(Footprint, UnknownStageIsRefused) {
  const std::string command = std::string(ISOHOST_BINARY) + " footprint --stages warp 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[512] = {};
  const auto n = std::fread(buffer, 1, sizeof buffer - 1, pipe);
  EXPECT_NE(::pclose(pipe), 0);
  EXPECT_NE(std::string(buffer, n).find("unknown stage 'warp'"), std::string::npos);
}

}  // namespace
}  // namespace isohost
