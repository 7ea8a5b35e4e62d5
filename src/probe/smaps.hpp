#pragma once

// What one process holds in RAM, from /proc/PID/smaps_rollup (or smaps on kernels before
// 4.14). PSS is the figure to add up across workers: a page shared by N processes counts 1/N
// in each, so workers sharing one torch install are not charged N times for its libraries.

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace isohost::probe {

// All sizes in bytes.
struct MemoryFootprint {
  uint64_t rss = 0;
  uint64_t pss = 0;
  // The PSS split by page kind. Exact when has_pss_split (Pss_Anon/Pss_File/Pss_Shmem,
  // smaps_rollup on Linux >= 5.7). Otherwise estimated, never left 0 when pss is not:
  //  - from smaps_rollup without the split: pss_anon = min(Anonymous, Pss), an upper bound
  //    (anonymous pages shared copy-on-write with a zygote count whole in Anonymous);
  //    pss_file = Pss - pss_anon, shmem included; pss_shmem = 0.
  //  - from smaps: the same rule per mapping, which is exact for the mappings that hold one
  //    kind of page (heap, stacks, a library's text, a memfd); only a private file mapping with
  //    copy-on-write pages (a library's .data) is estimated. A mapping's non-anonymous PSS
  //    counts as shmem when its path names shared memory (/memfd:, /dev/zero, /SYSV, /dev/shm/,
  //    [anon_shmem:), else as file.
  uint64_t pss_anon = 0;
  uint64_t pss_file = 0;
  uint64_t pss_shmem = 0;
  uint64_t shared_clean = 0;
  uint64_t shared_dirty = 0;
  uint64_t private_clean = 0;
  uint64_t private_dirty = 0;
  // Resident anonymous pages, each counted whole even when shared with a zygote or parent.
  uint64_t anonymous = 0;
  uint64_t swap = 0;
  uint64_t swap_pss = 0;
  // Resident pages the process gave back with MADV_FREE, still counted in rss and pss: the
  // kernel takes them when it needs memory, at no cost to the process (a woken worker's host
  // buffer, kept for its next sleep, is such memory).
  uint64_t lazy_free = 0;
  bool has_pss_split = false;
  // False when the text had no Rss line at all (empty text included): nothing was measured,
  // as opposed to a process that holds nothing. Every number is then 0. The kernel gives an
  // empty smaps for a process that has exited but is not yet reaped, and for kernel threads.
  bool measured = false;

  // What ending the process gives back for sure (pages no other process maps).
  uint64_t private_bytes() const { return private_clean + private_dirty; }
  uint64_t shared_bytes() const { return shared_clean + shared_dirty; }

  bool operator==(const MemoryFootprint&) const = default;
};

// `exact` (a read_footprint) moved by what the process's RSS did since it was taken, to
// `rss_now` (/proc/PID/status, which costs microseconds where smaps_rollup walks every page
// table). What comes and goes between two such reads is the process's own anonymous memory (a
// model in RAM, a sleep's host buffer), so the change lands on rss, pss, pss_anon, anonymous
// and private_dirty alike, none below 0; the rest is as it was.
MemoryFootprint moved_to_rss(const MemoryFootprint& exact, uint64_t rss_now);

// Pure parsers of the kernel's text. Unknown fields, malformed lines and missing fields are
// ignored (a missing field reads 0), so any kernel's format parses.
MemoryFootprint parse_smaps_rollup(std::string_view text);
// Sums every mapping of /proc/PID/smaps. Per-mapping smaps never carries Pss_Anon/Pss_File
// (the kernel prints them only in the rollup), so has_pss_split is false there unless every
// mapping carried them; the split is derived as described at MemoryFootprint.
MemoryFootprint parse_smaps(std::string_view text);

// Reads /proc/PID/smaps_rollup, or /proc/PID/smaps where the kernel has no rollup (a far
// slower read: it lists every mapping). The result is always measured.
// Throws ProbeError: process_gone ("process 1234 is gone") when the pid does not exist or its
// address space is already released (exited, not yet reaped); unreadable
// ("cannot read /proc/1234/smaps_rollup: Permission denied") otherwise. Reading another
// user's process needs ptrace-read permission (same uid, or CAP_SYS_PTRACE).
MemoryFootprint read_footprint(pid_t pid);

}  // namespace isohost::probe
