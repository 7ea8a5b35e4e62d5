#pragma once

#include <stdexcept>
#include <string>

namespace isohost::probe {

// Every probe failure. The cause lets a caller act without matching message text: a gone
// process retires its record, anything else is worth logging. The message names the pid, the
// file or call and the system's reason, e.g. "process 1234 is gone" or
// "cannot read /proc/1234/smaps_rollup: Permission denied".
class ProbeError : public std::runtime_error {
 public:
  enum class Cause {
    process_gone,  // exited (reaped or not): nothing left to measure
    unreadable,    // the file exists but the system refused it (permissions, I/O)
    malformed,     // read, but not in the format the kernel documents
    nvml_failed,   // an NVML call returned an error
  };

  ProbeError(Cause cause, const std::string& message) : std::runtime_error(message), cause_(cause) {}

  Cause cause() const noexcept { return cause_; }

 private:
  Cause cause_;
};

}  // namespace isohost::probe
