#pragma once

// A forked child that does what the test tells it, one step at a time, over two pipes: the
// parent writes a command byte, the child answers with one byte when the step is done. No
// sleeps anywhere: every wait is a blocking read on a pipe.

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace isohost::probe::testing {

// Where touch_new_memory leaves its block, so that the optimiser must keep the allocation and
// the writes (a block that never escapes may be elided with its memset entirely).
inline unsigned char* volatile touched_block = nullptr;

// Allocates and writes `bytes` of fresh anonymous memory (non-zero, so no page stays the shared
// zero page). Returns the last byte written, 0x5a, or 'e' when malloc fails.
inline char touch_new_memory(size_t bytes) {
  auto* block = static_cast<unsigned char*>(std::malloc(bytes));
  if (block == nullptr) return 'e';
  std::memset(block, 0x5a, bytes);
  touched_block = block;
  return static_cast<char>(touched_block[bytes - 1]);
}

class ChildProcess {
 public:
  // step(command) runs in the child for each command byte and returns the answer byte.
  // The child exits when the parent closes its end (destructor).
  explicit ChildProcess(std::function<char(char)> step) {
    int commands[2];
    int answers[2];
    if (::pipe(commands) != 0 || ::pipe(answers) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(commands[1]);
      ::close(answers[0]);
      char command = 0;
      while (::read(commands[0], &command, 1) == 1) {
        const char answer = step(command);
        if (::write(answers[1], &answer, 1) != 1) break;
      }
      ::_exit(0);
    }
    ::close(commands[0]);
    ::close(answers[1]);
    command_fd_ = commands[1];
    answer_fd_ = answers[0];
  }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  ~ChildProcess() {
    ::close(command_fd_);
    ::close(answer_fd_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

  // Sends one command and waits for the child's answer.
  char ask(char command) {
    if (::write(command_fd_, &command, 1) != 1) throw std::runtime_error("child gone");
    char answer = 0;
    if (::read(answer_fd_, &answer, 1) != 1) throw std::runtime_error("child gone");
    return answer;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int command_fd_ = -1;
  int answer_fd_ = -1;
};

}  // namespace isohost::probe::testing
