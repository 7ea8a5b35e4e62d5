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
// Why not a thread pool's queue (asio's thread_pool, as first built): posting a slice to each
// thread wakes the threads one after another, a system call each, and the last one starts its
// slice that much later. Here the caller wakes one thread, which wakes the rest with one call,
// and each thread, the caller's too, takes the next slice not yet taken until none is left: a
// thread that wakes late finds its share copied by those that woke first. On the H100 machine
// a side's copy in a call went from 0.20-0.23 ms to 0.15-0.17 with all woken by the caller
// (bench/results/h100-2026-12-06-copy-wake); waking them cost the caller 0.04 ms, hence the
// relay.
//
//   ParallelCopy copy(3);                        // three threads besides the caller's
//   copy.copy(destination, source, size, 8);     // eight slices, taken by whoever is free
//
// A copy may also be started and finished apart (start(), finish()), so that the caller sends
// the value's frame while the threads fill its buffer: the receiver's read, dispatch and
// decoding overlap the copy rather than follow it. The thread that copies the last slice then
// writes one byte on `notify_fd` (the write end of a pipe whose read end went with the frame),
// which tells the receiver the bytes are all there (docs/protocol.md, "Values").
//
// Thread safety: copy() and start() may be called from several threads at once; the copies
// then run one after another (a start waits for the copy before it to be finished). The
// threads do not survive a fork: of_this_process() makes a forked child its own.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace isohost::wire {

class ParallelCopy {
 public:
  explicit ParallelCopy(unsigned helpers);
  ~ParallelCopy();  // stops and joins the threads; no copy may be in flight
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  // Copies `size` bytes from `source` to `destination` (not overlapping) in `slices` slices of
  // one size (the last shorter), taken by the calling thread and up to slices - 1 of the
  // threads, and returns once every slice is copied.
  void copy(std::byte* destination, const std::byte* source, std::size_t size, unsigned slices);

  // copy() in two steps: start() posts the slices to the threads and returns at once (once
  // the copy before it is finished); finish() takes the slices still untaken, with the
  // threads, and returns once every slice is copied. Every start() must be followed by one
  // finish() (on any thread) before the next copy can start. With no threads, finish() copies
  // it all. The last slice's thread writes one byte on `notify_fd` unless it is -1; the fd
  // must stay open until finish() returns.
  void start(std::byte* destination, const std::byte* source, std::size_t size, unsigned slices,
             int notify_fd = -1);
  void finish();

  [[nodiscard]] unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

  // This process's copy threads, `helpers` of them as the first call asks (callers ask for the
  // same number each time). Never destroyed: a copy may be in flight on another thread, and in
  // a forked child, which gets threads of its own, its parent's threads are not there to join.
  // Throws std::system_error when no thread can be started.
  static ParallelCopy& of_this_process(unsigned helpers);

 private:
  // start(), for copy() too, where the caller takes a slice at once (one thread fewer woken).
  void post(std::byte* destination, const std::byte* source, std::size_t size, unsigned slices,
            int notify_fd, bool caller_copies);
  void serve();            // a helper thread: sleeps until a copy is posted, takes slices of it
  void take_slices();      // copies slices until none is left untaken
  void all_copied();       // by the last slice's thread: tells notify_fd_, then finish()
  void wake_the_others();  // by the first thread a copy wakes

  // One copy at a time, from start() until finish() returns: the fields below describe it.
  std::atomic<bool> in_flight_{false};
  std::byte* destination_ = nullptr;
  const std::byte* source_ = nullptr;
  std::size_t size_ = 0;
  std::size_t step_ = 0;
  int notify_fd_ = -1;
  // The copy's slice count (high 32 bits) and the next slice to take (low 32 bits), in one
  // word: a thread that takes a slice reads both at once, so one that wakes after its copy is
  // done sees nothing left to take, never a count of the next copy beside an old index. The
  // fields above stay as they are while a slice is taken and not yet copied (copy() waits for
  // `left_`), so a thread that took one reads its copy's.
  std::atomic<std::uint64_t> slices_{0};
  std::atomic<std::uint32_t> left_{0};    // slices taken by nobody or not yet copied
  std::atomic<bool> copied_{false};       // every slice copied and notify_fd_ told
  std::atomic<std::uint32_t> posted_{0};  // bumped for each copy: the threads wait on it
  std::atomic<unsigned> to_wake_{0};      // threads the first one woken wakes in its turn
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace isohost::wire
