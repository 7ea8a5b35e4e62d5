#pragma once

#include <sys/types.h>

#include <optional>

#include "proc/exit_status.hpp"

namespace isohost::proc {

// Sends `signal` to every process in the group led by `leader`. Call it before reaping the
// leader: while the leader is a zombie its pid, and so the group id, cannot be reused.
// A group that is already gone is not an error.
void signal_group(pid_t leader, int signal);

// Reaps the child behind `pidfd` if it has ended; nullopt while it runs.
std::optional<ExitStatus> try_reap(int pidfd);

// Waits for the child behind `pidfd` to end and reaps it.
ExitStatus reap(int pidfd);

}  // namespace isohost::proc
