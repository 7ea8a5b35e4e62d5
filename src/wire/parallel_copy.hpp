#pragma once

// A large buffer copied by several threads at once: the Python host's copy of a call's large
// arguments into their memfds (python/isohost_worker/parallel_copy.py hands it here where the
// isohost package is loaded).
//
// The worker runtime copies on Python threads of its own (standard library only): ctypes'
// memmove releases the GIL, but each thread takes the GIL back to leave its slice and to go
// back to sleep, so the threads woken for a copy leave one after another. On the H100 machine
// a 12 MiB IMAGE took 0.3 ms on four such threads back to back and 0.8 ms in an isolated node's
// call, whose threads had gone to sleep. These threads never touch Python: they are woken at
// once, and the caller waits for the last of them only (not yet measured on that machine;
// bench/gpu/copy_probe.py prints both).
//
//   ParallelCopy copy(3);                        // three threads besides the caller's
//   copy.copy(destination, source, size, 4);     // four slices, one of them the caller's
//
// Thread safety: copy() may be called from several threads at once. The threads do not survive
// a fork: a forked child makes its own (the Python side checks the pid).

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

 private:
  unsigned helpers_;
  asio::thread_pool threads_;
};

}  // namespace isohost::wire
