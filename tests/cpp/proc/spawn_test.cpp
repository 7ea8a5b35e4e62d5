#include "proc/spawn.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "proc/exit_status.hpp"
#include "proc/process_group.hpp"
#include "support/test_support.hpp"

namespace isohost::proc {
namespace {

using ::testing::HasSubstr;

// Runs a shell snippet with stdout captured; returns its output and exit status.
std::pair<std::string, ExitStatus> run_shell(const std::string& script,
                                             std::vector<std::string> env = {},
                                             std::vector<std::pair<int, int>> extra_fds = {}) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  wire::UniqueFd read_end(out[0]);
  wire::UniqueFd write_end(out[1]);
  extra_fds.emplace_back(write_end.get(), 1);
  auto child = spawn({.program = "/bin/sh",
                      .argv = {"/bin/sh", "-c", script},
                      .env = env.empty() ? scrubbed_environment({}) : env,
                      .fds = extra_fds});
  write_end.reset();
  std::string output;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(read_end.get(), buffer, sizeof buffer)) > 0) output.append(buffer, n);
  return {output, reap(child.pidfd.get())};
}

TEST(ExitStatus, ExplainsItself) {
  EXPECT_EQ(ExitStatus::exited(17).describe(), "exited with code 17");
  EXPECT_EQ(ExitStatus::killed(SIGKILL).describe(), "killed by SIGKILL");
  EXPECT_EQ(ExitStatus::killed(SIGSEGV, true).describe(), "killed by SIGSEGV (core dumped)");
  EXPECT_TRUE(ExitStatus::exited(0).success());
}

TEST(Spawn, ReportsExitCodesAndSignals) {
  EXPECT_EQ(run_shell("exit 17").second, ExitStatus::exited(17));
  EXPECT_EQ(run_shell("kill -9 $$").second, ExitStatus::killed(SIGKILL));
}

TEST(Spawn, MissingProgramIsAnErrorNamingTheStep) {
  try {
    spawn({.program = "/no/such/python", .argv = {"python"}, .env = {}});
    ADD_FAILURE();
  } catch (const SpawnError& e) {
    EXPECT_STREQ(e.what(), "exec /no/such/python: No such file or directory");
    EXPECT_EQ(e.error_number(), ENOENT);
  }
  EXPECT_THROW(spawn({.program = "no-such-program-xyz", .argv = {"x"}}), SpawnError);
  try {
    spawn({.program = "/bin/true", .argv = {"true"}, .cwd = "/no/such/dir"});
    ADD_FAILURE();
  } catch (const SpawnError& e) {
    EXPECT_THAT(e.what(), HasSubstr("chdir /no/such/dir"));
  }
}

TEST(Spawn, ClosesEveryDescriptorItWasNotGiven) {
  int leaked[2];
  ASSERT_EQ(::pipe(leaked), 0);  // deliberately not close-on-exec
  int given[2];
  ASSERT_EQ(::pipe2(given, O_CLOEXEC), 0);
  const auto [out, status] = run_shell("ls /proc/self/fd", {}, {{given[1], 3}});
  ::close(leaked[0]);
  ::close(leaked[1]);
  ::close(given[0]);
  ::close(given[1]);
  EXPECT_TRUE(status.success());
  std::vector<int> fds;
  for (std::size_t pos = 0; pos < out.size();) {
    const auto end = out.find('\n', pos);
    fds.push_back(std::stoi(out.substr(pos, end - pos)));
    pos = end + 1;
  }
  // Stdout and the given descriptor, plus the one ls opens to list the directory; the leaked
  // pipe's two ends would add more.
  EXPECT_THAT(fds, ::testing::Contains(1));
  EXPECT_THAT(fds, ::testing::Contains(3));
  EXPECT_EQ(fds.size(), 3U);
}

TEST(Spawn, ScrubsPythonVariablesAndAddsTheEnvironmentsOwn) {
  ::setenv("PYTHONPATH", "/leak", 1);
  ::setenv("PYTHONHOME", "/leak", 1);
  const auto env = scrubbed_environment({{"ISOHOST_TEST_VAR", "yes"}});
  ::unsetenv("PYTHONPATH");
  ::unsetenv("PYTHONHOME");
  const auto [out, status] =
      run_shell("echo \"[$PYTHONPATH][$PYTHONHOME][$PYTHONNOUSERSITE][$ISOHOST_TEST_VAR]\"", env);
  EXPECT_EQ(out, "[][][1][yes]\n");
}

TEST(Spawn, ChildLeadsItsOwnProcessGroup) {
  const auto [out, status] = run_shell("cut -d' ' -f5 /proc/$$/stat; echo $$");
  const auto newline = out.find('\n');
  EXPECT_EQ(out.substr(0, newline), out.substr(newline + 1, out.size() - newline - 2));
}

TEST(Spawn, GroupSignalReachesGrandchildren) {
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  wire::UniqueFd read_end(out[0]);
  wire::UniqueFd write_end(out[1]);
  auto child = spawn({.program = "/bin/sh",
                      .argv = {"/bin/sh", "-c", "sleep 60 & echo $!; wait"},
                      .env = scrubbed_environment({}),
                      .fds = {{write_end.get(), 1}}});
  write_end.reset();
  std::string line;
  char c;
  while (::read(read_end.get(), &c, 1) == 1 && c != '\n') line += c;
  const pid_t grandchild = std::stoi(line);
  ASSERT_TRUE(test_support::process_alive(grandchild));
  signal_group(child.pid, SIGKILL);
  EXPECT_EQ(reap(child.pidfd.get()), ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(test_support::eventually([&] { return !test_support::process_alive(grandchild); }));
}

}  // namespace
}  // namespace isohost::proc
