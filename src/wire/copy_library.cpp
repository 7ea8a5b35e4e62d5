// libisohost_copy.so: ParallelCopy for python/isohost_worker/parallel_copy.py, which loads it
// with ctypes from beside the runtime's packages (build/python). A C entry point and no Python
// headers: one library serves every interpreter a worker may run under (Python 3.9 and later,
// each environment's own), where an extension module would need a build for each. ctypes
// releases the GIL around the call, so the copy threads and the caller run Python-free.
// Built into no other target (CMakeLists.txt).

#include <cstddef>
#include <exception>

#include "wire/parallel_copy.hpp"

// Copies `size` bytes from `source` to `destination` (not overlapping) in `slices` slices, on
// this process's copy threads: `threads` of them counting the caller's, as many as the first
// call asks for. Returns 0 once every byte is copied, -1 when nothing was copied because the
// threads could not be started (the caller copies another way).
extern "C" __attribute__((visibility("default"))) int isohost_copy_memory(
    void* destination, const void* source, std::size_t size, unsigned slices,
    unsigned threads) noexcept {
  try {
    auto& copy = isohost::wire::ParallelCopy::of_this_process(threads > 0 ? threads - 1 : 0);
    copy.copy(static_cast<std::byte*>(destination), static_cast<const std::byte*>(source), size,
              slices);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// isohost_copy_memory in two steps, so that the caller sends the value's frame while the threads
// copy (ParallelCopy::start): returns 0 once the copy is posted (after the copy before it is
// finished), -1 when the threads could not be started (nothing was posted: the caller copies
// another way). Each 0 must be followed by one isohost_copy_finish(). `notify_fd`: a pipe's
// write end, told one byte once every byte is copied (-1: none).
extern "C" __attribute__((visibility("default"))) int isohost_copy_start(
    void* destination, const void* source, std::size_t size, unsigned slices, unsigned threads,
    int notify_fd) noexcept {
  try {
    auto& copy = isohost::wire::ParallelCopy::of_this_process(threads > 0 ? threads - 1 : 0);
    copy.start(static_cast<std::byte*>(destination), static_cast<const std::byte*>(source), size,
               slices, notify_fd);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// Takes the started copy's slices left with the threads; returns once every byte is copied.
extern "C" __attribute__((visibility("default"))) void isohost_copy_finish(
    unsigned threads) noexcept {
  isohost::wire::ParallelCopy::of_this_process(threads > 0 ? threads - 1 : 0).finish();
}
