// The command line's own refusals, as a user meets them: the real binary, its exit code and the
// one line it prints. Nothing here starts a worker.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/test_support.hpp"

namespace isohost {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `args` after the binary, run by the shell.
test_support::ShellRun isohost(const std::string& args) {
  return test_support::run_shell(std::string(ISOHOST_BINARY) + " " + args);
}

// A configuration whose environment starts its zygote with the host.
std::string prestart_config(const std::string& dir) {
  const std::string path = dir + "/isohost.toml";
  std::ofstream(path) << "[env.a]\npython = \"" << ISOHOST_TEST_PYTHON
                      << "\"\npreload = [\"json\"]\nprestart = true\n";
  return path;
}

TEST(CliUsage, AnUnknownCommandIsNamedWithTheKnownOnes) {
  const auto r = isohost("bogus");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unknown command 'bogus' (known: call, serve, ps, release"));
  EXPECT_THAT(r.out, Not(HasSubstr("A subcommand is required")));
  const auto option = isohost("--bogus");
  EXPECT_EQ(option.status, 2) << option.out;
  EXPECT_THAT(option.out, HasSubstr("not expected: --bogus"));
}

TEST(CliUsage, VersionIsTheProjectVersion) {
  std::ifstream cmake(std::filesystem::path(ISOHOST_FIXTURES_DIR) / ".." / ".." / "CMakeLists.txt");
  std::stringstream text;
  text << cmake.rdbuf();
  std::smatch m;
  const std::string lists = text.str();
  ASSERT_TRUE(std::regex_search(lists, m, std::regex(R"(project\(isohost[^)]*VERSION ([0-9.]+))")));
  const auto r = isohost("--version");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "isohost " + m[1].str() + "\n")
      << "the version CMake passes to src/cli/main.cpp";
}

TEST(CliUsage, AnUnexpectedWordIsNamedBeforeAMissingOption) {
  test_support::TempDir dir;
  const auto r = isohost("serve --config " + prestart_config(dir.path) + " extra");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not expected: extra"));
  EXPECT_THAT(r.out, Not(HasSubstr("--socket is required")));
}

TEST(CliUsage, AnEmptySocketPathIsRefusedByServeAndEveryClient) {
  test_support::TempDir dir;
  for (const auto& args :
       {"serve --config " + prestart_config(dir.path) + " --socket ''",
        std::string("ps --socket ''"), std::string("release --socket '' a"),
        std::string("shutdown --socket ''"), std::string("top --once --socket ''"),
        std::string("call --socket '' a operator:add --args '[1, 2]'")}) {
    const auto r = isohost(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.out.rfind("isohost: ControlError: the socket path is empty", 0), 0) << args << "\n"
                                                                                    << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("serving on"))) << args;
  }
}

// The path is checked before the pool starts, so a prestarted zygote says nothing first.
TEST(CliUsage, ASocketPathTooLongIsRefusedByNameBeforeAnythingStarts) {
  test_support::TempDir dir;
  const std::string path = dir.path + "/" + std::string(121 - dir.path.size() - 1, 's');
  const std::string expected = "isohost: ControlError: socket path '" + path +
                               "' is 121 bytes; a Unix socket path holds at most 107\n";
  for (const auto& args : {"serve --config " + prestart_config(dir.path) + " --socket " + path,
                           "ps --socket " + path}) {
    const auto r = isohost(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.out, expected) << args;
  }
}

TEST(CliUsage, CallArgumentsThatAreNotJsonSayWhy) {
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"'[1,]'", "--args must be a JSON array: parse error at line 1, column 4"},
           {"'[NaN]'", "--args must be a JSON array: parse error at line 1, column 2"},
           {"''", "--args must be a JSON array: parse error at line 1, column 1"},
           {"'{}'", "--args must be a JSON array: got object: {}"},
           {"'[99999999999999999999999]'",
            "--args must be a JSON array: the integer 99999999999999999999999 does not fit in 64 "
            "bits"},
           {"'[-99999999999999999999999]'", "the integer -99999999999999999999999 does not fit"},
           {"'" + std::string(300, '[') + std::string(300, ']') + "'",
            "--args nests arrays and objects more than 256 levels deep"},
       }) {
    const auto r = isohost("call --socket /nonexistent.sock a operator:add --args " + args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_THAT(r.out, HasSubstr(why)) << args;
    EXPECT_EQ(r.out.rfind("isohost: BadRequest: ", 0), 0) << args << "\n" << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("nested at most"))) << args;
  }
  const auto kwargs =
      isohost("call --socket /nonexistent.sock a operator:add --kwargs '{\"a\": }'");
  EXPECT_THAT(kwargs.out, HasSubstr("--kwargs must be a JSON object: parse error"));
  // Numbers that fit, and floats of any size, still go through to the socket.
  const auto fits = isohost(
      "call --socket /nonexistent.sock a operator:add --args '[18446744073709551615, "
      "-9223372036854775808, 1e300, 1.5]'");
  EXPECT_THAT(fits.out, HasSubstr("ControlError: cannot reach a host")) << fits.out;
}

TEST(CliUsage, FootprintRefusesAnSvgPathItCannotWriteBeforeMeasuring) {
  // A Python that does not exist: a measurement would fail on it, so the error seen proves the
  // check came first.
  const auto started = std::chrono::steady_clock::now();
  const auto r = isohost("footprint --python /nonexistent/python --svg /nope/dir/x.svg");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out,
            "isohost: Error: cannot write --svg '/nope/dir/x.svg': No such file or directory\n");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

TEST(CliUsage, FootprintLeavesNoEmptySvgBehindWhenTheMeasurementFails) {
  test_support::TempDir dir;
  const std::string svg = dir.path + "/chart.svg";
  const auto r = isohost("footprint --python /nonexistent/python --svg " + svg);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_FALSE(std::filesystem::exists(svg)) << r.out;
}

TEST(CliUsage, FootprintRefusesAnEmptyStageList) {
  for (const char* stages : {"''", "','"}) {
    const auto r = isohost(std::string("footprint --stages ") + stages);
    EXPECT_EQ(r.status, 1) << stages;
    EXPECT_THAT(r.out, HasSubstr("isohost: BadRequest: --stages names no stage")) << stages;
  }
}

}  // namespace
}  // namespace isohost
