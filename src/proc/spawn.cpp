#include "proc/spawn.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>

extern char** environ;

namespace isohost::proc {
namespace {

// What the child writes back through the error pipe when a step before exec fails.
struct ChildFailure {
  int stage;
  int error_number;
};

// CLOSE_RANGE_CLOEXEC from linux/close_range.h (Linux 5.11), spelled out for older headers.
constexpr unsigned kCloseRangeCloexec = 1U << 2;

enum Stage : int { kStageGroup, kStageDeathSignal, kStageFds, kStageCwd, kStageExec };

const char* stage_words(int stage) {
  switch (stage) {
    case kStageGroup: return "setpgid";
    case kStageDeathSignal: return "prctl(PR_SET_PDEATHSIG)";
    case kStageFds: return "set up descriptors";
    case kStageCwd: return "chdir";
    default: return "exec";
  }
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: async-signal-safe calls only, no allocation, no
// locks, no logging. Reports the failed step through `error_fd` and exits.
[[noreturn]] void exec_child_async_signal_safe(const SpawnOptions& options, const char* program,
                                               char* const* argv, char* const* envp,
                                               int error_fd, pid_t parent) {
  auto fail = [error_fd](int stage) {
    const ChildFailure failure{stage, errno};
    (void)!::write(error_fd, &failure, sizeof failure);
    ::_exit(127);
  };
  // Every signal is blocked (spawn() blocked them before the clone), so none of the host's
  // handlers (CPython's wakeup-fd writer, say) can run here; they are reset before anything
  // unblocks, and the mask is cleared only just before exec.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  if (options.new_process_group && ::setpgid(0, 0) != 0) fail(kStageGroup);
  if (options.death_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, options.death_signal) != 0) fail(kStageDeathSignal);
    // The parent may have died before prctl took effect.
    if (::getppid() != parent) ::_exit(127);
  }
  // Move every source above every target first, so that a source numbered like another
  // mapping's target is never clobbered.
  int highest_target = error_fd;
  for (const auto& [from, to] : options.fds) highest_target = std::max({highest_target, from, to});
  int moved[64];
  const std::size_t count = std::min<std::size_t>(options.fds.size(), 64);
  for (std::size_t i = 0; i < count; ++i) {
    moved[i] = ::fcntl(options.fds[i].first, F_DUPFD, highest_target + 1);
    if (moved[i] < 0) fail(kStageFds);
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (::dup2(moved[i], options.fds[i].second) < 0) fail(kStageFds);
  }
  // Every other descriptor goes at exec. Marking them close-on-exec rather than closing them
  // keeps the error pipe (itself close-on-exec) usable until then.
  int highest_kept = 2;
  for (const auto& mapping : options.fds) highest_kept = std::max(highest_kept, mapping.second);
  for (int fd = 0; fd <= highest_kept; ++fd) {
    bool kept = false;
    for (const auto& mapping : options.fds) kept = kept || mapping.second == fd;
    if (!kept && fd != error_fd) ::close(fd);
  }
  if (::syscall(SYS_close_range, highest_kept + 1, ~0U, kCloseRangeCloexec) != 0) {
    for (int fd = highest_kept + 1; fd < 65536; ++fd) {
      if (fd != error_fd) ::close(fd);
    }
  }
  if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) fail(kStageCwd);
  // The host may block or ignore signals (SIGPIPE, say); a worker starts with defaults.
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(program, argv, envp);
  fail(kStageExec);
  ::_exit(127);
}

// Sanitizers' interceptors (close, dup2, signal) keep their state in the process's memory. A
// CLONE_VM child would share it and change it under the parent's feet, and a raw clone3 child
// runs them unaware that it was forked (ThreadSanitizer then reports the parent's other
// threads' descriptors as races with the child's dup2). fork() is intercepted: they know, and
// stand aside in the child until it execs. So their builds fork.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// What the child needs, made before the clone: the child may share the parent's memory until it
// execs, and then must touch nothing else of it.
struct ChildStart {
  const SpawnOptions* options;
  const char* program;
  char* const* argv;
  char* const* envp;
  int error_fd;
  pid_t parent;
};

int run_child(void* start) {
  const auto* s = static_cast<const ChildStart*>(start);
  exec_child_async_signal_safe(*s->options, s->program, s->argv, s->envp, s->error_fd, s->parent);
}

// The child the way posix_spawn makes it: CLONE_VM | CLONE_VFORK, so nothing of what may be a
// multi-GB host (ComfyUI embedding the pool) is copied, not even its page tables, and the
// caller is held only until the child has exec'd or failed, a fraction of a millisecond; and
// CLONE_PIDFD, so the pidfd comes from the same system call: no moment exists when a SIGCHLD
// handler or waitpid(-1) elsewhere in an embedding program could reap the child and free its
// pid before the pidfd is open. Where that is refused (a kernel before 5.2, a seccomp filter),
// clone3 with fork's semantics; where that is too, and in sanitizer builds, fork() and
// pidfd_open(). Returns the pid, or -1 with errno set; the child never returns.
pid_t clone_with_pidfd(ChildStart& start, wire::UniqueFd& pidfd) {
  int fd = -1;
  pid_t pid = -1;
  if (!kSanitized) {
    // The child's frames are small (a few hundred bytes); glibc's posix_spawn uses 32 KiB.
    constexpr std::size_t kStackBytes = 64 * 1024;
    const auto stack = std::make_unique<std::max_align_t[]>(kStackBytes / sizeof(std::max_align_t));
    pid = ::clone(run_child, stack.get() + kStackBytes / sizeof(std::max_align_t),
                  CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &start, &fd);
    if (pid < 0 && (errno == ENOSYS || errno == EPERM || errno == EINVAL)) {
      clone_args args{};
      args.flags = CLONE_PIDFD;
      args.pidfd = reinterpret_cast<std::uint64_t>(&fd);
      args.exit_signal = SIGCHLD;
      pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
      if (pid == 0) run_child(&start);
    }
  }
  // ENOSYS: a kernel before 5.3; EPERM: a container's seccomp filter that refuses clone3.
  if (kSanitized || (pid < 0 && (errno == ENOSYS || errno == EPERM))) {
    pid = ::fork();
    if (pid == 0) run_child(&start);
    if (pid > 0) fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }
  if (pid > 0) pidfd.reset(fd);
  return pid;
}

// Blocks every signal of the calling thread for its lifetime, then restores the mask.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t saved_{};
};

}  // namespace

std::string find_program(const std::string& program) {
  if (program.empty()) throw SpawnError("no program given", EINVAL);
  if (program.find('/') != std::string::npos) return program;
  const char* path = ::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw SpawnError("program '" + program + "' not found on PATH", ENOENT);
}

std::vector<std::string> scrubbed_environment(const std::map<std::string, std::string>& extra) {
  static const std::set<std::string> removed{"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
                                             "PYTHONUSERBASE", "PYTHONNOUSERSITE"};
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    auto name = entry.substr(0, eq);
    if (!removed.contains(name)) env[std::move(name)] = entry.substr(eq + 1);
  }
  env["PYTHONNOUSERSITE"] = "1";
  for (const auto& [name, value] : extra) env[name] = value;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

Child spawn(const SpawnOptions& options) {
  if (options.fds.size() > 64) throw SpawnError("too many descriptors to pass", EINVAL);
  if (options.argv.empty()) throw SpawnError("empty argument vector", EINVAL);
  const std::string program = find_program(options.program);
  // Everything the child touches is prepared here, before fork.
  auto argv = c_strings(options.argv);
  auto envp = c_strings(options.env);
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    throw SpawnError(std::string("pipe: ") + std::strerror(errno), errno);
  }
  wire::UniqueFd error_read(error_pipe[0]);
  wire::UniqueFd error_write(error_pipe[1]);
  ChildStart start{.options = &options,
                   .program = program.c_str(),
                   .argv = argv.data(),
                   .envp = envp.data(),
                   .error_fd = error_write.get(),
                   .parent = ::getpid()};
  wire::UniqueFd pidfd;
  pid_t pid;
  {
    const SignalsBlocked blocked;
    pid = clone_with_pidfd(start, pidfd);
  }
  if (pid < 0) throw SpawnError(std::string("clone: ") + std::strerror(errno), errno);
  error_write.reset();
  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof failure)) {
    ::waitpid(pid, nullptr, 0);
    std::string what = stage_words(failure.stage);
    if (failure.stage == kStageExec) what += " " + program;
    if (failure.stage == kStageCwd) what += " " + options.cwd;
    throw SpawnError(what + ": " + std::strerror(failure.error_number), failure.error_number);
  }
  if (!pidfd) {
    const int error = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw SpawnError(std::string("pidfd: ") + std::strerror(error), error);
  }
  return Child{pid, std::move(pidfd)};
}

}  // namespace isohost::proc
