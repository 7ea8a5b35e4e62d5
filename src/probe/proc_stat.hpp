#pragma once

// Identity of a process beyond its pid, which the kernel reuses.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace isohost::probe {

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot
// (sysconf(_SC_CLK_TCK) per second). (pid, start time) names one process for good, so the
// host tags its workers with it and its orphan sweep never kills a stranger that inherited a
// recorded pid. Still readable while the process is a zombie.
// Throws ProbeError: process_gone, unreadable, or malformed.
uint64_t process_start_time(pid_t pid);

// Now, in process_start_time's unit (clock ticks since boot, CLOCK_BOOTTIME), rounded down: a
// process that starts after this call has a start time no smaller.
uint64_t boot_clock_ticks();

// Pure: the start time out of /proc/PID/stat text. Fields are counted after the last ')',
// because the command name in field 2 may itself hold spaces and parentheses.
// Throws ProbeError (malformed) when there is no ')' or no field 22.
uint64_t parse_start_time(std::string_view stat_text);

// Where a process stands in the process tree: fields 3 and 4 of /proc/PID/stat.
struct ProcessLinks {
  // 'R', 'S', 'D', 'T', 'Z' (a zombie: ended, not yet reaped), ...
  char state = 0;
  // 0 for init and kernel threads. A process whose parent ended shows the one it was
  // re-parented to (init, or the nearest child subreaper above it).
  pid_t parent = 0;
};

// Throws ProbeError: process_gone, unreadable, or malformed.
ProcessLinks process_links(pid_t pid);

// Pure: the links out of /proc/PID/stat text (counted after the last ')', as above).
// Throws ProbeError (malformed).
ProcessLinks parse_links(std::string_view stat_text);

// The argument vector of /proc/PID/cmdline. Empty for a zombie or a kernel thread. A process
// that rewrote its argv (setproctitle) may give one string holding spaces.
// Throws ProbeError: process_gone or unreadable.
std::vector<std::string> process_cmdline(pid_t pid);

// Pure: splits NUL-separated arguments; the trailing NUL ends the last one and adds none.
std::vector<std::string> split_cmdline(std::string_view text);

// The environment `pid` was exec'ed with, NUL-separated NAME=value entries (/proc/PID/environ:
// later setenv() calls do not change it; setproctitle() may overwrite it). Empty for a zombie,
// a kernel thread, and a process in the instant of an exec.
// Throws ProbeError: process_gone, or unreadable (another uid's, or a process that made itself
// non-dumpable).
std::string process_environment(pid_t pid);

// Pure: the value of `name` in NUL-separated NAME=value entries; the first one wins, as for
// getenv().
std::optional<std::string> find_environment_value(std::string_view environ_text,
                                                  std::string_view name);

}  // namespace isohost::probe
