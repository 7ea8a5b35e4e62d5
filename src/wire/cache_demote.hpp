#pragma once

// A copy's destination handed on to the cache the other cores share (CLDEMOTE, on Intel Xeon
// since Sapphire Rapids). A call's buffer is written by one process's copy threads and read a
// moment later by the other process's threads, on other cores: left in the writers' own L2
// caches, each line the reader takes is a cross-core snoop of a modified line. Demoted to the
// shared L3 as it is written, it is an L3 hit there. On the H100 machine an isolated node ran
// its 12 MiB input in 0.28 ms where the same node in process, its input in its own caches,
// took 0.13 (bench/results/h100-2026-12-07-copy-threads).
//
//   if (cache_demote_enabled()) demote_to_shared_cache(destination, size);

#include <cstddef>

namespace isohost::wire {

// Whether this CPU has CLDEMOTE and ISOHOST_COPY_DEMOTE is not "0" (the switch for A/B runs).
bool cache_demote_enabled();

// Demotes each cache line of [begin, begin + size). A hint: the bytes are unchanged, and on a
// CPU without the instruction it is a no-op (callers ask cache_demote_enabled() first, to skip
// the loop).
void demote_to_shared_cache(const std::byte* begin, std::size_t size);

}  // namespace isohost::wire
