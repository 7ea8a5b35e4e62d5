#pragma once

// A large buffer copied by several threads at once: a call's large values copied into their
// memfds, in the worker and in the Python host alike. python/isohost_worker/parallel_copy.py
// reaches it through libisohost_copy.so (copy_library.cpp) where a build put that library
// beside the runtime, and copies on Python threads of its own where not (the source tree).
//
// Why not Python threads alone: ctypes' memmove releases the GIL, but each Python thread takes
// the GIL back to leave its slice and to go back to sleep, so the threads woken for a copy leave
// one after another. On the H100 machine a 12 MiB IMAGE took 0.3 ms on four such threads back to
// back and 0.8 ms in an isolated node's call, whose threads had gone to sleep. These threads
// never touch Python: they are woken at once, and the caller waits for the last of them only
// (bench/gpu/copy_probe.py prints both ways).
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
