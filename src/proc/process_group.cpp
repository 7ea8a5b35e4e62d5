#include "proc/process_group.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace isohost::proc {
namespace {

std::optional<ExitStatus> wait_pidfd(int pidfd, int options) {
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info,
                  WEXITED | options);
  } while (rc != 0 && errno == EINTR);
  // The pidfd said the child ended, but another waiter in this process reaped it first.
  if (rc != 0 && errno == ECHILD) return ExitStatus::unknown();
  if (rc != 0) throw std::system_error(errno, std::generic_category(), "waitid");
  if (info.si_pid == 0) return std::nullopt;  // WNOHANG and still running
  return ExitStatus::from_siginfo(info);
}

}  // namespace

void signal_group(pid_t leader, int signal) {
  if (leader > 0 && ::killpg(leader, signal) != 0 && errno == ESRCH) ::kill(leader, signal);
}

wire::UniqueFd open_pidfd(pid_t pid) {
  wire::UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd) throw std::system_error(errno, std::generic_category(), "pidfd_open");
  return fd;
}

bool is_child(int pidfd) {
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info,
                  WEXITED | WNOHANG | WNOWAIT);
  } while (rc != 0 && errno == EINTR);
  return rc == 0;
}

std::optional<ExitStatus> try_reap(int pidfd) { return wait_pidfd(pidfd, WNOHANG); }

ExitStatus reap(int pidfd) { return *wait_pidfd(pidfd, 0); }

}  // namespace isohost::proc
