#pragma once

#include <signal.h>

#include <string>

namespace isohost::proc {

// How a process ended, as one value that explains itself: "exited with code 17",
// "killed by SIGKILL", "killed by SIGSEGV (core dumped)". Errors about dead workers carry it.
class ExitStatus {
 public:
  // `unknown`: the process ended, but something else in this process collected its status
  // first (an embedding program's SIGCHLD handler or waitpid(-1), or SIGCHLD ignored).
  enum class Kind { exited, killed, unknown };

  static ExitStatus exited(int code) { return {Kind::exited, code, false}; }
  static ExitStatus killed(int signal, bool core_dumped = false) {
    return {Kind::killed, signal, core_dumped};
  }
  static ExitStatus unknown() { return {Kind::unknown, 0, false}; }
  // From the siginfo that waitid() fills for a child that has ended.
  static ExitStatus from_siginfo(const siginfo_t& info);

  [[nodiscard]] Kind kind() const { return kind_; }
  // The exit code for `exited`, the signal number for `killed`.
  [[nodiscard]] int value() const { return value_; }
  [[nodiscard]] bool success() const { return kind_ == Kind::exited && value_ == 0; }
  [[nodiscard]] std::string describe() const;

  friend bool operator==(const ExitStatus&, const ExitStatus&) = default;

 private:
  ExitStatus(Kind kind, int value, bool core) : kind_(kind), value_(value), core_dumped_(core) {}
  Kind kind_;
  int value_;
  bool core_dumped_;
};

// "SIGKILL" for 9; "signal 77" for numbers without a name.
std::string signal_name(int signal);

}  // namespace isohost::proc
