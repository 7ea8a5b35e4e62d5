#pragma once

// What a worker's code starts, beyond the worker's process group (docs/lifecycle.md, "When the
// host dies"). A process that calls setsid() leaves the group, so killpg() misses it, and when
// its parent ends it is re-parented away from the worker. Two holds on it:
//
// - Its tree. Every worker is a child subreaper (python/isohost_worker/tree.py), so while the
//   worker lives everything it started stays below it, setsid() or not. kill_tree() ends that
//   tree through /proc's parent links before the worker itself.
// - Its environment. Every worker runs with ISOHOST_HOST_TAG=PID:STARTTIME (the host's
//   proc::host_tag()), which fork and exec pass on to every descendant. Once a worker has ended
//   on its own (a crash: its descendants went to init), end_escaped() ends those of this host
//   that no longer descend from it; a later host's orphan sweep ends those of a host that died.
//
//   proc::kill_tree(worker_pid);            // instead of killpg(): the host is ending a worker
//   proc::end_escaped(proc::host_tag());    // after any worker of this host ended
//
// Each process is signalled through a pidfd opened before the checks that chose it, so a pid
// recycled meanwhile is never hit. Each pass reads /proc/*/stat (end_descendants) or the
// environ of each process of this uid (end_escaped) once: bounded by the machine's process
// count, milliseconds for a thousand. No state; any thread.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace isohost::proc {

// The variable every worker and all it starts carry: the host's tag, as on its --host flag.
inline constexpr const char* kHostTagVariable = "ISOHOST_HOST_TAG";

// ISOHOST_HOST_TAG in the environment `pid` was exec'ed with; nullopt when it has none, has
// ended, or its environment cannot be read. A process in the instant of an exec reads as
// having no environment: it is read again then, for at most 20 ms. Never throws.
std::optional<std::string> environment_host_tag(pid_t pid);

// SIGKILL to every process below `root` (not `root` itself), found through the parent links
// of /proc/*/stat, pass after pass (at most 8) until a pass finds nothing it has not signalled.
// Meant for a stopped `root` that is a subreaper: what a killed descendant leaves is then
// re-parented to `root` and found by the next pass. Returns the pids signalled; never throws.
std::vector<pid_t> end_descendants(pid_t root);

// Ends a worker and everything it started: SIGSTOP `leader` (so it forks no more), then
// end_descendants(leader), then SIGKILL to its process group (signal_group). `leader` must be
// a child of this process not yet reaped. Returns the descendants signalled; never throws.
std::vector<pid_t> kill_tree(pid_t leader);

// SIGKILL to each process of this uid whose environment carries ISOHOST_HOST_TAG=`tag` and that
// does not descend from this process (checked twice through fresh /proc reads, so a process
// caught while its parent ends is left alone), and to the process group it leads, if any.
// Returns the pids ended; never throws.
std::vector<pid_t> end_escaped(const std::string& tag);

}  // namespace isohost::proc
