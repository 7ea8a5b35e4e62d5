// `isohost hibernate` and `wake` as a user runs them: the real binary, serving with the
// stand-in libcuda named by ISOHOST_CUDA_LIBRARY, the CLI commands and their exit codes, ps,
// the driver's calls as the stand-in logged them, and a hard kill of the host.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "control/control_client.hpp"
#include "error/error.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "support/test_support.hpp"

namespace isohost {
namespace {

using namespace std::chrono_literals;
using isohost::test_support::eventually;
using isohost::test_support::process_alive;
using ::testing::HasSubstr;

test_support::ShellRun run(const std::string& command) { return test_support::run_shell(command); }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HibernateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.path + "/isohost.toml")
        << "[env.g]\npython = \"" << ISOHOST_TEST_PYTHON << "\"\npath = [\""
        << ISOHOST_TEST_MODULES_DIR << "\"]\nenv = { ISOHOST_FAKE_CUDA_LOCKS = \"" << dir_.path
        << "\" }\n";
    socket_ = dir_.path + "/control.sock";
    host_ = proc::spawn(
        {.program = ISOHOST_BINARY,
         .argv = {ISOHOST_BINARY, "--log-level", "warn", "serve", "--config",
                  dir_.path + "/isohost.toml", "--socket", socket_},
         .env = proc::scrubbed_environment({{"ISOHOST_CUDA_LIBRARY", ISOHOST_FAKE_CUDA_PATH},
                                            {"ISOHOST_FAKE_CUDA", "locks_dir=" + dir_.path},
                                            {"ISOHOST_FAKE_CUDA_LOG", dir_.path + "/calls"}}),
         .fds = {{2, 2}}});
    ASSERT_TRUE(eventually([&] { return run(cli("ps")).status == 0; }, 10s));
  }
  void TearDown() override {
    if (host_.pidfd) {
      ::kill(host_.pid, SIGKILL);
      proc::reap(host_.pidfd.get());
    }
  }
  std::string cli(const std::string& args) {
    return std::string(ISOHOST_BINARY) + " " + args + " --socket " + socket_;
  }

  test_support::TempDir dir_;
  std::string socket_;
  proc::Child host_;
};

TEST_F(HibernateCli, HibernateShowsInPsAndWakeRestores) {
  const auto opened = run(cli("call g isohost_fake_cuda_context:open_context"));
  ASSERT_EQ(opened.status, 0) << opened.out;
  const int pid = nlohmann::ordered_json::parse(opened.out)["pid"];
  const auto hibernated = run(cli("hibernate g"));
  EXPECT_EQ(hibernated.status, 0) << hibernated.out;
  EXPECT_EQ(nlohmann::ordered_json::parse(hibernated.out)["hibernated"], true);
  const auto ps = run(cli("ps"));
  EXPECT_THAT(ps.out, HasSubstr("IN-RAM"));
  EXPECT_THAT(ps.out, ::testing::ContainsRegex("g +" + std::to_string(pid) + " +1 hibernated"));
  const auto woken = run(cli("wake g"));
  EXPECT_EQ(woken.status, 0) << woken.out;
  EXPECT_EQ(nlohmann::ordered_json::parse(woken.out)["woken"], true);
  const auto again = run(cli("wake g"));
  EXPECT_EQ(again.status, 1) << "a wake that did not happen fails";
  EXPECT_THAT(again.out, HasSubstr("wake g: worker 'g' (pid " + std::to_string(pid) +
                                   ", generation 1) is ready, neither hibernated nor asleep"));
  const auto p = std::to_string(pid);
  EXPECT_EQ(read_file(dir_.path + "/calls"),
            "cuInit 0\nstate " + p + "\nlock " + p + " 2000\ncheckpoint " + p + "\nstate " + p +
                "\nrestore " + p + "\nunlock " + p + "\nstate " + p + "\n");
}

TEST_F(HibernateCli, BadRequestsAreNamed) {
  EXPECT_THAT(run(cli("hibernate nope")).out,
              HasSubstr("UnknownEnvironment: no environment named 'nope'"));
  const auto reply = control::send_control_request(socket_, {{"op", "hibernate"}});
  EXPECT_EQ(reply["error"]["kind"], "BadRequest");
  EXPECT_THAT(reply["error"]["message"].get<std::string>(),
              HasSubstr("needs a string field 'env'"));
  const auto none = run(cli("hibernate g"));
  EXPECT_EQ(none.status, 1);
  EXPECT_THAT(none.out, HasSubstr("no worker is running for environment 'g'"));
}

TEST_F(HibernateCli, AHibernatedWorkerDiesWithAHostKilledHard) {
  const int pid = nlohmann::ordered_json::parse(
      run(cli("call g isohost_fake_cuda_context:open_context")).out)["pid"];
  ASSERT_EQ(run(cli("hibernate g")).status, 0);
  ::kill(host_.pid, SIGKILL);
  proc::reap(host_.pidfd.get());
  host_.pidfd.reset();
  EXPECT_TRUE(eventually([&] { return !process_alive(pid); }));
}

}  // namespace
}  // namespace isohost
