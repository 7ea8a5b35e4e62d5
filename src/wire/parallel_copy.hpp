#pragma once

// A large buffer copied by several threads at once: a call's large values copied into their
// memfds, in the worker and in the Python host alike. python/isohost_worker/parallel_copy.py
// reaches it through libisohost_copy.so (copy_library.cpp) where a build put that library
// beside the runtime, and copies on Python threads of its own where not (the source tree).
//
// Why not Python threads alone: ctypes' memmove releases the GIL, but each Python thread takes
// the GIL back to leave its slice and to go back to sleep, so they stop scaling at four. These
// threads never touch Python and scale on: on the H100 machine each side's copy of a 12 MiB
// IMAGE in an isolated node's call took 0.55-0.63 ms on four threads of either kind and 0.19 on
// sixteen of these, beside a warm clone's 0.12 (bench/results/h100-2026-12-06-copy-library).
//
//   ParallelCopy copy(3);                        // three threads besides the caller's
//   copy.copy(destination, source, size, 4);     // four slices, one of them the caller's
//
// Thread safety: copy() may be called from several threads at once. The threads do not survive
// a fork: of_this_process() makes a forked child its own.

#include <asio/thread_pool.hpp>

#include <cstddef>

namespace isohost::wire {

class ParallelCopy {
 public:
  explicit ParallelCopy(unsigned helpers);
  ~ParallelCopy();  // joins the threads, which finish any copy in flight first
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  // Copies `size` bytes from `source` to `destination` (not overlapping) in `slices` slices
  // (at most helpers() + 1), the calling thread taking the first, and returns once every slice
  // is copied.
  void copy(std::byte* destination, const std::byte* source, std::size_t size, unsigned slices);

  [[nodiscard]] unsigned helpers() const { return helpers_; }

  // This process's copy threads, `helpers` of them as the first call asks (callers ask for the
  // same number each time; copy() clamps more slices). Never destroyed: a copy may be in flight
  // on another thread, and in a forked child, which gets threads of its own, its parent's
  // threads are not there to join. Throws std::system_error when no thread can be started.
  static ParallelCopy& of_this_process(unsigned helpers);

 private:
  unsigned helpers_;
  asio::thread_pool threads_;
};

}  // namespace isohost::wire
