// `isohost serve` as a user runs it: a real process, its control socket, and hard kills.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "control/control_client.hpp"
#include "error/error.hpp"
#include "probe/proc_status.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "support/test_support.hpp"

namespace isohost {
namespace {

using namespace std::chrono_literals;
using isohost::test_support::eventually;
using isohost::test_support::process_alive;
using ::testing::HasSubstr;

// A running `isohost serve` with one fixture environment, killed at the end if still alive.
class ServedHost {
 public:
  // In `dir` when given (to share a socket path between hosts), else in a fresh directory.
  // `env_extra`: more lines for [env.a] (a zygote's preload, say).
  // `log`: a file for the host's stderr, for tests that wait for what it says.
  explicit ServedHost(const std::string& dir = "", const std::string& env_extra = "",
                      const std::string& log = "") {
    const std::string base = dir.empty() ? dir_.path : dir;
    config_ = base + "/isohost.toml";
    socket_ = base + "/control.sock";
    std::ofstream(config_) << "[host]\nshutdown_grace_seconds = 2\n"
                           << "[env.a]\npython = \"" << ISOHOST_TEST_PYTHON << "\"\npath = [\""
                           << ISOHOST_TEST_MODULES_DIR << "\"]\n"
                           << env_extra;
    child_ = proc::spawn({.program = ISOHOST_BINARY,
                          .argv = {ISOHOST_BINARY, "--log-level", "warn", "serve", "--config",
                                   config_, "--socket", socket_},
                          .env = proc::scrubbed_environment({}),
                          .fds = {{log.empty() ? 2 : open_log(log), 2}}});
    EXPECT_TRUE(eventually(
        [&] {
          try {
            return ask({{"op", "ps"}}).value("ok", false);
          } catch (const isohost::Error&) {
            return false;  // not listening yet (or a stale file from an earlier host)
          }
        },
        10s));
  }
  ~ServedHost() {
    if (child_.pidfd) {
      ::kill(child_.pid, SIGKILL);
      proc::reap(child_.pidfd.get());
    }
  }

  int open_log(const std::string& path) {
    log_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    return log_.get();
  }

  nlohmann::ordered_json ask(const nlohmann::ordered_json& request) {
    return control::send_control_request(socket_, request);
  }
  pid_t pid() const { return child_.pid; }
  const std::string& socket() const { return socket_; }
  proc::ExitStatus reap() {
    auto status = proc::reap(child_.pidfd.get());
    child_.pidfd.reset();
    return status;
  }

 private:
  isohost::test_support::TempDir dir_;
  std::string config_;
  std::string socket_;
  wire::UniqueFd log_;
  proc::Child child_;
};

// A client connection on the host's control socket, for tests that hold many open at once.
class RawClient {
 public:
  explicit RawClient(const std::string& socket_path)
      : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    // A host that never answers fails the test instead of hanging it.
    const timeval limit{.tv_sec = 20, .tv_usec = 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  [[nodiscard]] bool connected() const { return connected_; }
  [[nodiscard]] int fd() const { return fd_.get(); }
  // False once the host has closed the connection.
  bool send_all(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const auto n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // The host's answer line, or "" when it closed the connection without one.
  std::string read_line() {
    std::string answer;
    char c;
    while (::read(fd_.get(), &c, 1) == 1 && c != '\n') answer += c;
    return answer;
  }

 private:
  wire::UniqueFd fd_;
  bool connected_ = false;
};

// Sends one raw line and reads the answer line, for requests the typed client cannot make.
std::string raw_exchange(const std::string& socket_path, const std::string& line) {
  RawClient client(socket_path);
  if (!client.connected()) return "connect failed: " + std::string(std::strerror(errno));
  client.send_all(line);  // a refusing host may close first
  return client.read_line();
}

TEST(Serve, AnswersCallsPsReleaseReapAndShutdown) {
  ServedHost host;
  auto reply = host.ask({{"op", "call"}, {"env", "a"}, {"target", "isohost_test_funcs:add"}, {"args", {2, 5}}});
  ASSERT_TRUE(reply["ok"]) << reply.dump();
  EXPECT_EQ(reply["value"], 7);
  reply = host.ask({{"op", "ps"}});
  ASSERT_EQ(reply["value"]["workers"].size(), 1U);
  const auto worker = reply["value"]["workers"][0];
  EXPECT_EQ(worker["env"], "a");
  EXPECT_EQ(worker["generation"], 1);
  EXPECT_EQ(worker["calls"], 1);
  EXPECT_EQ(worker["state"], "ready");
  EXPECT_EQ(reply["value"]["host"]["pid"], host.pid());
  // Memory seen from outside: the worker's PSS above its private part, the host's own too;
  // no GPU here, so VRAM is unknown (null), never 0.
  EXPECT_GT(worker["pss"].get<double>(), 1e6);
  EXPECT_GT(worker["private"].get<double>(), 0);
  EXPECT_GE(worker["rss"].get<double>(), worker["pss"].get<double>());
  EXPECT_GT(worker["fixed_ram"].get<double>(), 1e6);
  EXPECT_TRUE(worker["vram"].is_null());
  EXPECT_GT(reply["value"]["host"]["pss"].get<double>(), 0);
  EXPECT_TRUE(reply["value"]["host"]["vram"].is_null());
  EXPECT_TRUE(host.ask({{"op", "release"}, {"env", "a"}})["value"].contains("rss_after"));
  EXPECT_EQ(host.ask({{"op", "reap"}, {"env", "a"}})["value"]["reaped"], true);
  EXPECT_TRUE(eventually([&] { return !process_alive(worker["pid"].get<pid_t>()); }));
  EXPECT_TRUE(host.ask({{"op", "shutdown"}})["ok"]);
  EXPECT_TRUE(host.reap().success());
  EXPECT_NE(::access(host.socket().c_str(), F_OK), 0) << "the socket file is removed";
}

// SIGHUP (the terminal closing) and SIGQUIT used to end the host on the spot: exit 129, the
// socket file left behind. Each signal now shuts it down as `isohost shutdown` does.
TEST(Serve, TerminalAndTerminationSignalsShutTheHostDownCleanly) {
  for (const int signal : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    ServedHost host;
    const auto reply = host.ask({{"op", "call"}, {"env", "a"}, {"target", "os:getpid"}});
    ASSERT_TRUE(reply["ok"]) << reply.dump();
    const auto worker = reply["value"].get<pid_t>();
    ::kill(host.pid(), signal);
    EXPECT_EQ(host.reap(), proc::ExitStatus::exited(0)) << strsignal(signal);
    EXPECT_NE(::access(host.socket().c_str(), F_OK), 0)
        << strsignal(signal) << ": the socket file is removed";
    EXPECT_TRUE(eventually([&] { return !process_alive(worker); })) << strsignal(signal);
  }
}

TEST(Serve, ShutdownEndsTheHostThoughClientsKeepTheirConnectionsOpen) {
  ServedHost host;
  RawClient idle(host.socket());
  ASSERT_TRUE(idle.connected());
  RawClient after_a_call(host.socket());
  ASSERT_TRUE(
      after_a_call.send_all(R"({"op":"call","env":"a","target":"operator:add","args":[1,2]})"
                            "\n"));
  EXPECT_EQ(nlohmann::ordered_json::parse(after_a_call.read_line())["value"], 3);
  EXPECT_TRUE(host.ask({{"op", "shutdown"}})["ok"]);
  // Before, the host waited for both clients to hang up.
  ASSERT_TRUE(eventually([&] { return !process_alive(host.pid()); }, 10s))
      << "the host still runs while clients hold their connections open";
  EXPECT_EQ(host.reap().describe(), "exited with code 0");
  EXPECT_EQ(idle.read_line(), "") << "the idle connection is closed, with nothing sent";
}

TEST(Serve, MalformedControlRequestsGetNamedErrorsAndTheHostServesOn) {
  ServedHost host;
  const std::pair<std::string, std::string> cases[] = {
      {"this is not json\n", "BadRequest"},
      {"[1,2]\n", "BadRequest"},
      {"{\"op\": \"explode\"}\n", "unknown op 'explode'"},
      {"{\"op\": \"call\", \"env\": \"a\"}\n", "string field 'target'"},
      {"{\"op\": \"call\", \"env\": 3, \"target\": \"m:f\"}\n", "string field 'env'"},
      {"{\"op\": \"call\", \"env\": \"zz\", \"target\": \"m:f\"}\n", "UnknownEnvironment"},
      {"{\"op\": \"call\", \"env\": \"a\", \"target\": \"m:f\", \"args\": \"x\"}\n",
       "'args' must be a JSON array, not string"},
      {"{\"op\": \"call\", \"env\": \"a\", \"target\": \"m:f\", \"kwargs\": [1]}\n",
       "'kwargs' must be a JSON object, not array"},
  };
  for (const auto& [line, says] : cases) {
    const auto answer = raw_exchange(host.socket(), line);
    EXPECT_THAT(answer, HasSubstr("\"ok\":false")) << line;
    EXPECT_THAT(answer, HasSubstr(says)) << line;
  }
  EXPECT_EQ(host.ask({{"op", "call"}, {"env", "a"}, {"target", "isohost_test_funcs:add"}, {"args", {1, 1}}})["value"], 2);
}

TEST(Serve, ControlSocketIsPrivateAndRefusesAnotherUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  ServedHost host;
  struct stat st {};
  ASSERT_EQ(::stat(host.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  // Once through the file mode, once (mode opened up) through the SO_PEERCRED check.
  for (bool open_mode : {false, true}) {
    if (open_mode) {
      ::chmod(host.socket().c_str(), 0666);
      ::chmod(host.socket().substr(0, host.socket().rfind('/')).c_str(), 0755);
    }
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(pipe_fds[0]);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      const auto answer = raw_exchange(host.socket(), "{\"op\": \"ps\"}\n");
      (void)!::write(pipe_fds[1], answer.data(), answer.size());
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    std::string answer;
    char buffer[512];
    ssize_t n;
    while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) answer.append(buffer, n);
    ::close(pipe_fds[0]);
    ::waitpid(child, nullptr, 0);
    if (open_mode) {
      EXPECT_THAT(answer, HasSubstr("refused: peer uid 65534"));
    } else {
      EXPECT_THAT(answer, HasSubstr("connect failed: Permission denied"));
    }
    EXPECT_THAT(answer, ::testing::Not(HasSubstr("workers")));
  }
}

TEST(Serve, KillNineOfTheHostTakesABusyWorkerWithinASecond) {
  ServedHost host;
  const auto pid = host.ask({{"op", "call"}, {"env", "a"}, {"target", "isohost_test_funcs:pid"}})["value"].get<pid_t>();
  std::thread caller([&] {
    try {
      host.ask({{"op", "call"}, {"env", "a"}, {"target", "isohost_test_funcs:busy_loop"}, {"args", {60}}});
    } catch (const std::exception&) {
      // The host dies under this call: that is the point.
    }
  });
  ASSERT_TRUE(eventually([&] { return host.ask({{"op", "ps"}})["value"]["workers"][0]["state"] == "busy"; }));
  ::kill(host.pid(), SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  EXPECT_EQ(host.reap(), proc::ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(eventually([&] { return !process_alive(pid); }, 1s)) << "worker outlived its host";
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 1500ms);
  caller.join();
}

TEST(Serve, KillNineOfTheHostTakesTheZygoteAndItsBusyForkedWorkerAtOnce) {
  ServedHost host("", "preload = [\"isohost_test_funcs\"]\n");
  const auto pid =
      host.ask({{"op", "call"}, {"env", "a"}, {"target", "isohost_test_funcs:pid"}})["value"]
          .get<pid_t>();
  std::thread caller([&] {
    try {
      host.ask({{"op", "call"},
                {"env", "a"},
                {"target", "isohost_test_funcs:busy_loop"},
                {"args", {60}}});
    } catch (const std::exception&) {
      // The host dies under this call: that is the point.
    }
  });
  nlohmann::ordered_json ps;
  ASSERT_TRUE(eventually([&] {
    ps = host.ask({{"op", "ps"}})["value"];
    return ps["workers"][0]["state"] == "busy";
  }));
  ASSERT_EQ(ps["workers"][0]["origin"], "zygote");
  const auto zygote = ps["zygotes"][0]["pid"].get<pid_t>();
  ASSERT_TRUE(process_alive(zygote));
  ::kill(host.pid(), SIGKILL);
  EXPECT_EQ(host.reap(), proc::ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(eventually([&] { return !process_alive(pid) && !process_alive(zygote); }, 1s))
      << "a forked worker or the zygote outlived the host";
  caller.join();
}

TEST(Serve, AHostStartedAfterAKillNineEndsTheSetsidGrandchildItsWorkerLeft) {
  // The worker dies with its host (its death signal); a grandchild in a session of its own,
  // re-parented to init, does not: the next host's startup sweep finds it by the dead host's
  // tag in its environment.
  isohost::test_support::TempDir dir;
  wire::UniqueFd grandchild;
  {
    ServedHost first;
    const auto answer = first.ask({{"op", "call"},
                                   {"env", "a"},
                                   {"target", "isohost_test_funcs:start_setsid_grandchild"},
                                   {"args", {dir.path + "/grandchild.pid"}}});
    ASSERT_TRUE(answer.value("ok", false)) << answer.dump();
    grandchild.reset(static_cast<int>(::syscall(SYS_pidfd_open, answer["value"].get<pid_t>(), 0)));
    ASSERT_TRUE(grandchild.valid());
    ::kill(first.pid(), SIGKILL);
    EXPECT_EQ(first.reap(), proc::ExitStatus::killed(SIGKILL));
  }
  ServedHost second;
  pollfd ended{.fd = grandchild.get(), .events = POLLIN, .revents = 0};
  EXPECT_EQ(::poll(&ended, 1, 5000), 1) << "the grandchild outlived its host and the next one";
  ::syscall(SYS_pidfd_send_signal, grandchild.get(), SIGKILL, nullptr, 0);
}

TEST(Serve, StaleSocketFromADeadHostIsReplacedAndALiveOneRefused) {
  isohost::test_support::TempDir dir;
  {
    ServedHost first(dir.path);
    ::kill(first.pid(), SIGKILL);
    first.reap();
    EXPECT_EQ(::access(first.socket().c_str(), F_OK), 0) << "a hard kill leaves the file";
  }
  ServedHost second(dir.path);
  EXPECT_TRUE(second.ask({{"op", "ps"}})["ok"]);
  auto third = proc::spawn({.program = ISOHOST_BINARY,
                            .argv = {ISOHOST_BINARY, "serve", "--config", dir.path + "/isohost.toml",
                                     "--socket", second.socket()},
                            .env = proc::scrubbed_environment({})});
  EXPECT_EQ(proc::reap(third.pidfd.get()), proc::ExitStatus::exited(1))
      << "a second host on a live socket refuses to start";
  EXPECT_TRUE(second.ask({{"op", "ps"}})["ok"]);
}

TEST(Serve, AConfigThatIsNotAFileIsNamedWithWhatIsWrong) {
  isohost::test_support::TempDir dir;
  const std::string binary = ISOHOST_BINARY;
  for (const auto& [config, why] : std::vector<std::pair<std::string, std::string>>{
           {dir.path + "/missing.toml", "no such file"}, {dir.path, "is a directory"}}) {
    for (const auto& command :
         {binary + " serve --config " + config + " --socket " + dir.path + "/control.sock",
          binary + " call --config " + config + " a fixtures_mod:add"}) {
      const auto [status, out] = test_support::run_shell(command);
      EXPECT_EQ(status, 2) << command << "\n" << out;
      EXPECT_THAT(out,
                  HasSubstr("isohost: ConfigError: configuration file '" + config + "': " + why))
          << command;
      EXPECT_THAT(out, ::testing::Not(HasSubstr("--help"))) << command;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/control.sock"));
}

std::uint64_t host_rss(pid_t pid) { return probe::read_rss_counters(pid).rss; }

TEST(Serve, JsonNestedAMillionDeepFromAClientIsABadRequest) {
  ServedHost host;
  for (const std::size_t depth : {std::size_t{1000}, std::size_t{1000000}}) {
    const auto line = R"({"op":"call","env":"a","target":"isohost_test_funcs:add","args":)" +
                      std::string(depth, '[') + std::string(depth, ']') + "}\n";
    const auto answer = raw_exchange(host.socket(), line);
    EXPECT_THAT(answer, HasSubstr("BadRequest")) << depth;
    EXPECT_THAT(answer, HasSubstr("more than 256 levels deep")) << depth;
  }
  // 1000 deep used to reach the worker, whose json module gave up (RecursionError, exit 3):
  // the client's bad input counted as the environment's crash.
  EXPECT_EQ(host.ask({{"op", "call"},
                      {"env", "a"},
                      {"target", "isohost_test_funcs:add"},
                      {"args", {1, 1}}})["value"],
            2);
  EXPECT_EQ(host.ask({{"op", "ps"}})["value"]["workers"][0]["generation"], 1) << "no worker died";
}

// Whether the host has dealt with all a client sent: read every byte, or closed the connection.
bool host_took_everything(int fd) {
  int unread = 0;
  if (::ioctl(fd, SIOCOUTQ, &unread) == 0 && unread == 0) return true;
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) == 1;
}

TEST(Serve, UnfinishedLinesOfManyClientsAreBoundedAndTheHostServesOn) {
  ServedHost host;
  const auto rss_before = host_rss(host.pid());
  // 250 clients each holding 1 MiB of a line: 250 MiB, far past the 64 MiB of unfinished lines
  // the host keeps for all clients together; each client past it is answered and closed.
  std::vector<std::unique_ptr<RawClient>> clients;
  const std::string mebibyte(1 << 20, 'x');
  for (int i = 0; i < 250; ++i) {
    clients.push_back(std::make_unique<RawClient>(host.socket()));
    ASSERT_TRUE(clients.back()->connected());
    clients.back()->send_all(R"({"op":"ps","pad":")" + mebibyte);
  }
  for (auto& client : clients)
    ASSERT_TRUE(eventually([&] { return host_took_everything(client->fd()); }));
  int refused = 0;
  for (auto& client : clients) {
    pollfd p{.fd = client->fd(), .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 0) != 1) continue;  // held: nothing to read
    EXPECT_THAT(client->read_line(),
                HasSubstr("bytes of unfinished request lines from its clients (the limit)"));
    ++refused;
  }
  EXPECT_GE(refused, 180) << "about 64 of 250 are held";
  const auto rss_after = host_rss(host.pid());
  const auto grew = rss_after > rss_before ? rss_after - rss_before : 0;
  std::cout << "250 clients with 1 MiB unfinished lines: " << refused << " refused; host RSS grew "
            << grew / 1e6 << " MB\n";
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // A sanitizer's allocator keeps freed memory in quarantine: RSS says nothing there.
  EXPECT_LT(grew, std::uint64_t{160} << 20);
#endif

  RawClient long_line(host.socket());
  clients.clear();
  long_line.send_all(std::string(17 << 20, ' '));
  EXPECT_THAT(long_line.read_line(),
              HasSubstr("request line longer than the limit of 16777216 bytes"));
  EXPECT_EQ(host.ask({{"op", "call"},
                      {"env", "a"},
                      {"target", "isohost_test_funcs:add"},
                      {"args", {1, 1}}})["value"],
            2);
}

TEST(Serve, ConnectionsPastTheLimitAreAnsweredAndClosed) {
  ServedHost host;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 260; ++i) clients.push_back(std::make_unique<RawClient>(host.socket()));
  // The first 256 are served (a ps each answers); the last 4 are told why they are not.
  for (int i = 256; i < 260; ++i) {
    EXPECT_THAT(clients[i]->read_line(), HasSubstr("256 control connections (the limit)")) << i;
  }
  EXPECT_TRUE(clients[255]->send_all("{\"op\":\"ps\"}\n"));
  EXPECT_THAT(clients[255]->read_line(), HasSubstr("\"ok\":true"));
  clients.clear();
  EXPECT_TRUE(host.ask({{"op", "ps"}})["ok"]);
}

TEST(Serve, AcceptingResumesAfterTheHostRanOutOfDescriptors) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer runtimes open files themselves (UBSan's vptr check reads /proc/self/maps):
  // a host out of descriptors fails inside them first. The plain build runs this test.
  GTEST_SKIP() << "a sanitized host cannot run out of descriptors cleanly";
#endif
  isohost::test_support::TempDir dir;
  const auto log = dir.path + "/host.log";
  ServedHost host("", "", log);
  // The lowest descriptor number the host has free: the next it opens gets it, so a limit of
  // that number makes its next accept() fail with EMFILE.
  std::set<int> open_now;
  for (const auto& name :
       test_support::directory_entries("/proc/" + std::to_string(host.pid()) + "/fd")) {
    open_now.insert(std::stoi(name));
  }
  rlim_t lowest_free = 0;
  while (open_now.contains(static_cast<int>(lowest_free))) ++lowest_free;
  rlimit old{};
  ASSERT_EQ(::prlimit(host.pid(), RLIMIT_NOFILE, nullptr, &old), 0);
  const rlimit tight{lowest_free, old.rlim_max};  // the soft limit alone: no privilege needed
  ASSERT_EQ(::prlimit(host.pid(), RLIMIT_NOFILE, &tight, nullptr), 0);
  RawClient waiting(host.socket());  // queued by the kernel; the host's accept() gets EMFILE
  ASSERT_TRUE(waiting.send_all("{\"op\":\"ps\"}\n"));
  ASSERT_TRUE(eventually([&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {}).find("Too many open files") !=
           std::string::npos;
  })) << "the host's log:\n"
      << std::string(std::istreambuf_iterator<char>(*std::make_unique<std::ifstream>(log)), {});
  ASSERT_EQ(::prlimit(host.pid(), RLIMIT_NOFILE, &old, nullptr), 0);
  EXPECT_THAT(waiting.read_line(), HasSubstr("\"ok\":true")) << "the queued client is served";
  EXPECT_TRUE(host.ask({{"op", "ps"}})["ok"]);
}

}  // namespace
}  // namespace isohost
