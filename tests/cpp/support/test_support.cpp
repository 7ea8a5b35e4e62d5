#include "support/test_support.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "probe/proc_file.hpp"
#include "probe/proc_stat.hpp"

namespace isohost::test_support {

bool forking_from_zygotes() {
  const char* origin = ::getenv("ISOHOST_TEST_ORIGIN");
  return origin != nullptr && std::string(origin) == "zygote";
}

const char* expected_origin() { return forking_from_zygotes() ? "zygote" : "spawn"; }

pool::EnvironmentConfig fixture_env(const std::string& name) {
  pool::EnvironmentConfig env;
  env.name = name;
  env.python = ISOHOST_TEST_PYTHON;
  env.path = {ISOHOST_TEST_MODULES_DIR};
  if (forking_from_zygotes()) env.preload = {"isohost_test_funcs"};
  return env;
}

pool::Config fixture_config(const std::vector<std::string>& env_names) {
  pool::Config config;
  config.source = "(test)";
  config.host.call_timeout = std::chrono::seconds(30);
  config.host.start_timeout = std::chrono::seconds(30);
  config.host.shutdown_grace = std::chrono::seconds(2);
  for (const auto& name : env_names) config.environments[name] = fixture_env(name);
  return config;
}

isohost::Error call_error(std::future<nlohmann::ordered_json> future) {
  try {
    future.get();
  } catch (const isohost::Error& e) {
    return e;
  }
  ADD_FAILURE() << "the call succeeded";
  return isohost::Error(isohost::ErrorKind::control_error, "no error");
}

int open_descriptor_count() {
  return static_cast<int>(directory_entries("/proc/self/fd").size());
}

ShellRun run_shell(const std::string& command) {
  ShellRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

namespace {

// Field 3 (state) and field 5 (pgrp) of /proc/PID/stat.
bool read_stat(pid_t pid, char& state, pid_t& pgrp) {
  // A process that ends between open and read fails the read with ESRCH, which an ifstream
  // would throw from; read_file returns it.
  const std::string text = probe::read_file(probe::proc_path(pid, "stat").c_str()).text;
  const auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 2));
  pid_t ppid = 0;
  rest >> state >> ppid >> pgrp;
  return static_cast<bool>(rest);
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> pids;
  for (const auto& name : directory_entries("/proc")) {
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
      pids.push_back(std::stoi(name));
    }
  }
  return pids;
}

}  // namespace

bool process_alive(pid_t pid) {
  char state = 0;
  pid_t pgrp = 0;
  return read_stat(pid, state, pgrp) && state != 'Z' && state != 'X';
}

std::vector<pid_t> process_group_members(pid_t pgid) {
  std::vector<pid_t> members;
  for (pid_t pid : all_pids()) {
    char state = 0;
    pid_t pgrp = 0;
    if (read_stat(pid, state, pgrp) && pgrp == pgid && state != 'Z' && state != 'X') {
      members.push_back(pid);
    }
  }
  return members;
}

std::vector<pid_t> workers_tagged(const std::string& tag) {
  std::vector<pid_t> found;
  for (pid_t pid : all_pids()) {
    try {
      const auto args = probe::process_cmdline(pid);
      bool worker = false;
      bool tagged = false;
      for (const auto& a : args) {
        worker = worker || a.find("isohost_worker") != std::string::npos;
        tagged = tagged || a == tag;
      }
      if (worker && tagged && process_alive(pid)) found.push_back(pid);
    } catch (const std::exception&) {
    }
  }
  return found;
}

std::set<std::string> directory_entries(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name(e->d_name);
      if (name != "." && name != "..") names.insert(name);
    }
    ::closedir(d);
  }
  return names;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "isohost-test-XXXXXX").string();
  path = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path.empty()) std::filesystem::remove_all(path, ignored);
}

PausedChild::PausedChild() {
  const pid_t test = ::getpid();
  pid = ::fork();
  if (pid == 0) {
    // Ends with the test even when the test is killed before its destructors run.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != test) ::_exit(0);
    ::pause();
    ::_exit(0);
  }
}

PausedChild::~PausedChild() {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace isohost::test_support
