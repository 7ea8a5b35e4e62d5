#pragma once

// The kernel's running RSS counters from /proc/PID/status: the cheap footprint.
//
// smaps_rollup walks every page table of the process, so its cost grows with resident memory:
// measured here at about 12 ms for one 600 MiB process (2 cores, Linux 6.18), 180-330 ms for
// sixteen. status reads counters the kernel keeps anyway, about 20 us a process whatever its
// size. Poll these often (a top-like view, pressure checks) and read_footprint for PSS less
// often (admission, idle release receipts, reports).

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace isohost::probe {

// Bytes. Counted whole per process: shared pages are counted in every process that maps them,
// so these never add up across workers the way PSS does. The kernel keeps them per CPU and
// sums lazily, so they may lag the truth by a few hundred KiB.
struct RssCounters {
  uint64_t rss = 0;        // VmRSS = rss_anon + rss_file + rss_shmem
  uint64_t rss_anon = 0;   // RssAnon: private to the process unless shared copy-on-write
  uint64_t rss_file = 0;   // RssFile: mapped files (libraries), often shared
  uint64_t rss_shmem = 0;  // RssShmem: memfd buffers, shared anonymous mappings, tmpfs
  uint64_t swap = 0;       // VmSwap
  // False when the text had no VmRSS line: a zombie or a kernel thread, which have no address
  // space (or a kernel before 4.5 for the Rss* split, where those read 0 but this is true).
  bool measured = false;

  bool operator==(const RssCounters&) const = default;
};

// Pure; unknown and missing fields are ignored.
RssCounters parse_proc_status(std::string_view text);

// Reads /proc/PID/status. Throws ProbeError: process_gone ("process 1234 is gone") when the pid
// does not exist or has no address space left (exited, not yet reaped); unreadable otherwise.
RssCounters read_rss_counters(pid_t pid);

}  // namespace isohost::probe
