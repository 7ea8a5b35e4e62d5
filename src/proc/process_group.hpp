#pragma once

#include <sys/types.h>

#include <optional>

#include "proc/exit_status.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::proc {

// Sends `signal` to every process in the group led by `leader`. Call it before reaping the
// leader: while the leader is a zombie its pid, and so the group id, cannot be reused.
// A group that is already gone is not an error. A leader that has no group of its own yet (a
// zygote's child between its birth and its setsid) is signalled alone.
void signal_group(pid_t leader, int signal);

// A pidfd for `pid`. Only race-free for a child of this process that has not been reaped (a
// zombie keeps its pid). Throws std::system_error.
wire::UniqueFd open_pidfd(pid_t pid);

// Whether the process behind `pidfd` is a child of this process (waitid does not answer
// ECHILD), without reaping it.
bool is_child(int pidfd);

// Reaps the child behind `pidfd` if it has ended; nullopt while it runs. A child that someone
// else in this process reaped first gives ExitStatus::unknown(), never an exception: the host
// must still learn that its worker is gone.
std::optional<ExitStatus> try_reap(int pidfd);

// Waits for the child behind `pidfd` to end and reaps it.
ExitStatus reap(int pidfd);

}  // namespace isohost::proc
