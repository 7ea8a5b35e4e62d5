#pragma once

// What the process-level tests share: a configuration pointing at the fixture module, and the
// observations that decide "nothing left behind" (descriptors, processes, files).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <future>

#include <nlohmann/json.hpp>

#include "error/error.hpp"
#include "pool/config.hpp"

namespace isohost::test_support {

// An environment running Debian's python3 with tests/python/fixtures_mod on its path.
pool::EnvironmentConfig fixture_env(const std::string& name);

// ISOHOST_TEST_ORIGIN=zygote: fixture_env gives every environment a zygote (preloading the
// fixture module), so the same pool tests run for forked workers (tests/CMakeLists.txt runs
// them both ways).
bool forking_from_zygotes();
// What WorkerStatus::origin must say for a fixture environment's worker: "zygote" or "spawn".
const char* expected_origin();

// A configuration with the named fixture environments and short timeouts.
pool::Config fixture_config(const std::vector<std::string>& env_names);

// The Error a failed call carries; a call that succeeds fails the test.
isohost::Error call_error(std::future<nlohmann::ordered_json> future);

int open_descriptor_count();

// `command` run by the shell: its exit code (-1 where a signal ended it), and its stdout and
// stderr together.
struct ShellRun {
  int status = -1;
  std::string out;
};
ShellRun run_shell(const std::string& command);

bool process_alive(pid_t pid);  // running, not a zombie

// Pids of live processes whose process group is `pgid`.
std::vector<pid_t> process_group_members(pid_t pgid);

// Live processes whose command line mentions isohost_worker and `tag`.
std::vector<pid_t> workers_tagged(const std::string& tag);

// Entries of a directory (names), to compare before and after.
std::set<std::string> directory_entries(const std::string& dir);

// Polls `condition` every 5 ms until it holds or `limit` passes; returns whether it held.
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = std::chrono::seconds(5));

// A child of this process that only waits until it is killed (at destruction): a process on a
// card isohost does not manage, or a host's child that no zygote forked.
struct PausedChild {
  PausedChild();
  ~PausedChild();
  PausedChild(const PausedChild&) = delete;
  PausedChild& operator=(const PausedChild&) = delete;
  pid_t pid;
};

// A fresh, empty temporary directory, removed by the caller's TempDir.
struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace isohost::test_support
