#include "probe/proc_stat.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.hpp"
#include "probe/probe_error.hpp"

namespace isohost::probe {
namespace {

// 52 fields as Linux 6 prints them, with a command name that holds spaces and parentheses.
std::string stat_line(const std::string& comm, const std::string& start_time) {
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on chains of operator+.
  std::string line = "4242 (";
  line += comm;
  line += ") S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 ";
  line += start_time;
  for (int field = 23; field <= 52; ++field) {
    line += ' ';
    line += std::to_string(field);
  }
  line += '\n';
  return line;
}

TEST(ParseStartTime, FieldTwentyTwo) { EXPECT_EQ(parse_start_time(stat_line("python3", "830130")), 830130u); }

TEST(ParseStartTime, CommandNameWithSpacesAndParentheses) {
  EXPECT_EQ(parse_start_time(stat_line("a) b (c", "77")), 77u);
  EXPECT_EQ(parse_start_time(stat_line(") ) )", "78")), 78u);
}

TEST(ParseStartTime, MalformedThrows) {
  for (const std::string& text : {std::string("4242 python3 S 1"), std::string("4242 (x) S 1 2 3"),
                                  stat_line("x", "notanumber"), std::string()}) {
    try {
      parse_start_time(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ProbeError& error) {
      EXPECT_EQ(error.cause(), ProbeError::Cause::malformed);
    }
  }
}

TEST(ProcessStartTime, OwnProcessAndALaterChild) {
  const uint64_t own = process_start_time(::getpid());
  EXPECT_GT(own, 0u);
  testing::ChildProcess child([](char) { return 'r'; });
  ASSERT_EQ(child.ask('?'), 'r');
  EXPECT_GE(process_start_time(child.pid()), own);
}

TEST(ProcessStartTime, GoneProcess) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  try {
    process_start_time(pid);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::process_gone);
  }
}

TEST(SplitCmdline, Table) {
  using Args = std::vector<std::string>;
  EXPECT_EQ(split_cmdline(std::string_view("python3\0-c\0pass\0", 16)), (Args{"python3", "-c", "pass"}));
  EXPECT_EQ(split_cmdline(std::string_view("a\0\0b\0", 5)), (Args{"a", "", "b"}));
  EXPECT_EQ(split_cmdline(""), Args{});
  EXPECT_EQ(split_cmdline("rewritten title with spaces"), (Args{"rewritten title with spaces"}));
}

TEST(ProcessCmdline, OwnProcess) {
  const std::vector<std::string> args = process_cmdline(::getpid());
  ASSERT_FALSE(args.empty());
  EXPECT_FALSE(args[0].empty());
}

// A /bin/sh exec'ed with `argv` and `envp` that says it runs on a pipe, then waits on its stdin
// until the test lets it go: /proc shows what exec gave it from then on (the close-on-exec
// trick would not do: the kernel sets the new command line and environment after it closes
// such descriptors).
class ExecdShell {
 public:
  ExecdShell(std::vector<const char*> argv, std::vector<const char*> envp) {
    int running[2];
    int stdin_pipe[2];
    if (::pipe(running) != 0 || ::pipe(stdin_pipe) != 0) throw std::runtime_error("pipe failed");
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only 0 and 3 go on: a copy of the stdin pipe's write end left open would keep its read
      // from ever seeing EOF.
      ::dup2(stdin_pipe[0], 0);
      ::dup2(running[1], 3);
      for (int fd : {running[0], running[1], stdin_pipe[0], stdin_pipe[1]}) {
        if (fd != 0 && fd != 3) ::close(fd);
      }
      ::execve("/bin/sh", const_cast<char**>(argv.data()), const_cast<char**>(envp.data()));
      ::_exit(127);
    }
    ::close(running[1]);
    ::close(stdin_pipe[0]);
    stdin_ = stdin_pipe[1];
    char byte = 0;
    const auto n = ::read(running[0], &byte, 1);
    ::close(running[0]);
    if (n != 1) throw std::runtime_error("the shell did not start");
  }
  ~ExecdShell() {
    ::close(stdin_);  // its read sees EOF and it exits
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  ExecdShell(const ExecdShell&) = delete;
  ExecdShell& operator=(const ExecdShell&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
};

// The script every ExecdShell runs: say so on descriptor 3, close it, wait on stdin.
constexpr const char* kScript = "echo x >&3; exec 3>&-; read line";

TEST(ProcessCmdline, ExecdChild) {
  const ExecdShell shell(
      {"/bin/sh", "-c", kScript, "isohost-probe-test", "an argument with spaces"}, {"PATH=/bin"});
  EXPECT_EQ(process_cmdline(shell.pid()),
            (std::vector<std::string>{"/bin/sh", "-c", kScript, "isohost-probe-test",
                                      "an argument with spaces"}));
}

TEST(ParseLinks, StateAndParentAfterAnAwkwardCommandName) {
  const auto links = parse_links(stat_line("a) Z (b", "77"));
  EXPECT_EQ(links.state, 'S');
  EXPECT_EQ(links.parent, 1);
  EXPECT_THROW(parse_links("4242 (x)"), ProbeError);
}

TEST(ProcessLinks, OwnProcess) {
  const auto links = process_links(::getpid());
  EXPECT_EQ(links.parent, ::getppid());
  EXPECT_EQ(links.state, 'R');
}

TEST(FindEnvironmentValue, ExactNameFirstEntryWins) {
  using namespace std::string_view_literals;
  const auto text =
      "A=1\0ISOHOST_HOST_TAG_X=no\0ISOHOST_HOST_TAG=12:34\0ISOHOST_HOST_TAG=later\0"sv;
  EXPECT_EQ(find_environment_value(text, "ISOHOST_HOST_TAG"), "12:34");
  EXPECT_EQ(find_environment_value(text, "A"), "1");
  EXPECT_EQ(find_environment_value(text, "B"), std::nullopt);
  EXPECT_EQ(find_environment_value("EMPTY=\0"sv, "EMPTY"), "");
  EXPECT_EQ(find_environment_value("NOEND=x"sv, "NOEND"), "x");
  EXPECT_EQ(find_environment_value(""sv, "A"), std::nullopt);
}

// What exec received, read back from another process.
TEST(ProcessEnvironment, ExecdChild) {
  const ExecdShell shell({"/bin/sh", "-c", kScript}, {"PATH=/bin", "ISOHOST_PROBE_TEST=a value"});
  const auto environment = process_environment(shell.pid());
  EXPECT_EQ(find_environment_value(environment, "ISOHOST_PROBE_TEST"), "a value");
  EXPECT_EQ(find_environment_value(environment, "HOME"), std::nullopt);
}

}  // namespace
}  // namespace isohost::probe
