#pragma once

// Starting a worker process.
//
//   SpawnOptions options{.program = "python3", .argv = {"python3", "-c", "pass"},
//                        .env = scrubbed_environment(extra),
//                        .fds = {{socket.get(), 3}, {out.get(), 1}, {err.get(), 2}}};
//   Child child = spawn(options);  // throws SpawnError naming the failed step
//
// Thread note: the death signal fires when the *thread* that called spawn() exits, not the
// process, so call spawn() from a thread that lives as long as the host (the pool's loop).

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wire/unique_fd.hpp"

namespace isohost::proc {

struct SpawnOptions {
  // A path, or a bare name looked up on the host's PATH before forking.
  std::string program;
  // The full argument vector, argv[0] included.
  std::vector<std::string> argv;
  // The child's complete environment, "NAME=value" each; nothing is inherited implicitly.
  std::vector<std::string> env;
  // Working directory; empty keeps the host's.
  std::string cwd;
  // Host descriptor -> descriptor number in the child. Every other descriptor is closed.
  std::vector<std::pair<int, int>> fds;
  // Leader of its own process group, so that one killpg() ends it and everything it started.
  bool new_process_group = true;
  // Sent to the child when the spawning thread dies (PR_SET_PDEATHSIG); 0 for none.
  int death_signal = SIGKILL;
};

// The step that failed and its errno, as the child reported it before exec, in words a user
// can act on: "exec /no/such/python: No such file or directory".
class SpawnError : public std::runtime_error {
 public:
  SpawnError(const std::string& message, int error_number)
      : std::runtime_error(message), error_number_(error_number) {}
  [[nodiscard]] int error_number() const { return error_number_; }

 private:
  int error_number_;
};

struct Child {
  pid_t pid = -1;
  // Readable once the child has ended; waitid(P_PIDFD) reaps it without racing pid reuse.
  wire::UniqueFd pidfd;
};

// Starts the child (posix_spawn's way: it shares this process's memory until it execs) and
// execs. Returns once exec has succeeded; throws SpawnError otherwise (the failed child is
// reaped).
Child spawn(const SpawnOptions& options);

// The host's environment with the variables that would let the host's Python settings leak
// into a worker removed (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE), user site
// disabled (PYTHONNOUSERSITE=1), then `extra` applied over it.
std::vector<std::string> scrubbed_environment(const std::map<std::string, std::string>& extra);

// Resolves a bare program name on PATH the way execvp would; a name with a slash is returned
// as is. Throws SpawnError when nothing executable is found.
std::string find_program(const std::string& program);

}  // namespace isohost::proc
