#include "probe/proc_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "probe/probe_error.hpp"

namespace isohost::probe {
namespace {

constexpr size_t initial_buffer_size = 8192;

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() { ::close(fd_); }

 private:
  int fd_;
};

}  // namespace

FileRead read_file(const char* path) {
  FileRead result;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    result.error = errno;
    return result;
  }
  FdCloser closer(fd);
  std::string& buffer = result.text;
  buffer.resize(initial_buffer_size);
  size_t used = 0;
  for (;;) {
    if (used == buffer.size()) buffer.resize(buffer.size() * 2);
    const ssize_t n = ::read(fd, buffer.data() + used, buffer.size() - used);
    if (n > 0) {
      used += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      result.error = errno;
      buffer.clear();
      return result;
    }
  }
  buffer.resize(used);
  return result;
}

std::string proc_path(pid_t pid, std::string_view name) {
  std::string path = "/proc/" + std::to_string(pid) + "/";
  path.append(name);
  return path;
}

void throw_process_gone(pid_t pid) {
  throw ProbeError(ProbeError::Cause::process_gone, "process " + std::to_string(pid) + " is gone");
}

void throw_read_failure(pid_t pid, const std::string& path, int error) {
  if (error == ENOENT || error == ESRCH) throw_process_gone(pid);
  throw ProbeError(ProbeError::Cause::unreadable, "cannot read " + path + ": " + std::generic_category().message(error));
}

std::string read_proc_file(pid_t pid, std::string_view name) {
  const std::string path = proc_path(pid, name);
  FileRead read = read_file(path.c_str());
  if (read.error != 0) throw_read_failure(pid, path, read.error);
  return std::move(read.text);
}

}  // namespace isohost::probe
