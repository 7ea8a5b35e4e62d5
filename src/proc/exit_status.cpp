#include "proc/exit_status.hpp"

#include <string.h>

namespace isohost::proc {

ExitStatus ExitStatus::from_siginfo(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return exited(info.si_status);
    case CLD_DUMPED:
      return killed(info.si_status, true);
    default:
      return killed(info.si_status);
  }
}

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

std::string ExitStatus::describe() const {
  if (kind_ == Kind::exited) return "exited with code " + std::to_string(value_);
  if (kind_ == Kind::unknown) {
    return "ended, its exit status taken by another part of this process (a SIGCHLD handler or "
           "waitpid(-1) of the program that embeds the host)";
  }
  return "killed by " + signal_name(value_) + (core_dumped_ ? " (core dumped)" : "");
}

}  // namespace isohost::proc
