#pragma once

// Reading /proc files whole, shared by the probes. Internal to src/probe/.

#include <sys/types.h>

#include <string>
#include <string_view>

namespace isohost::probe {

// The outcome of one read: either text, or the errno that stopped it. Returned rather than
// thrown so that a caller can fall back (smaps_rollup absent -> smaps) before deciding.
struct FileRead {
  std::string text;
  int error = 0;
};

// Plain open()+read() until end of file, into one buffer sized for the common case
// (an smaps_rollup is about 1 KB, so one read() fills it). /proc files are generated on
// read and report size 0, hence no fstat().
FileRead read_file(const char* path);

// "/proc/<pid>/<name>"
std::string proc_path(pid_t pid, std::string_view name);

// "process 1234 is gone": the pid does not exist, or it has no address space left.
[[noreturn]] void throw_process_gone(pid_t pid);

// The exception for a failed read of a process's file: ENOENT and ESRCH mean the process
// exited ("process 1234 is gone"); anything else names the file and strerror.
[[noreturn]] void throw_read_failure(pid_t pid, const std::string& path, int error);

// read_file + throw_read_failure.
std::string read_proc_file(pid_t pid, std::string_view name);

}  // namespace isohost::probe
