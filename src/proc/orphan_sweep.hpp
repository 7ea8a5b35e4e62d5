#pragma once

// Workers carry their host's identity on their command line (`--host PID:STARTTIME`), so a
// host starting up can find the workers of a host that died without ending them (the death
// signal is the first line of defence; this sweep is the last) and end them.

#include <sys/types.h>

#include <string>
#include <vector>

namespace isohost::proc {

// "PID:STARTTIME" of the calling process; start time makes the tag survive pid reuse.
std::string host_tag();

// Kills (SIGKILL, whole group) every worker of this user whose tagged host is no longer alive
// with the same start time. Returns the pids it ended.
std::vector<pid_t> sweep_orphaned_workers();

}  // namespace isohost::proc
