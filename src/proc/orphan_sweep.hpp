#pragma once

// Workers carry their host's identity on their command line (`--host PID:STARTTIME`), and they
// and everything they start carry it in their environment (ISOHOST_HOST_TAG), so a host
// starting up can find what a host that died without ending it left behind (the death signal
// is the first line of defence; this sweep is the last) and end it.

#include <sys/types.h>

#include <string>
#include <vector>

namespace isohost::proc {

// "PID:STARTTIME" of the calling process; start time makes the tag survive pid reuse.
std::string host_tag();

struct OrphanSweep {
  // Workers (and zygotes) of a host that is gone, found by their command line.
  std::vector<pid_t> workers;
  // Other processes whose environment names a host that is gone (ISOHOST_HOST_TAG,
  // process_tree.hpp): what workers started that left their process group and outlived them.
  std::vector<pid_t> escaped;
};

// Kills (SIGKILL, and its whole group where it leads one) every process of this user that a
// host no longer alive with the same start time left: its workers, by their `--host` tag, and
// anything carrying its tag in ISOHOST_HOST_TAG. A tag this process itself carries is left
// alone (a host started from within a worker of a host that died is one of them).
OrphanSweep sweep_orphans();

// sweep_orphans(), logging each escaped process it ended; returns the workers' pids.
std::vector<pid_t> sweep_orphaned_workers();

}  // namespace isohost::proc
