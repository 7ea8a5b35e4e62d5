#include "wire/parallel_copy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace isohost::wire {

ParallelCopy::ParallelCopy(unsigned helpers) {
  threads_.reserve(helpers);
  try {
    for (unsigned index = 0; index < helpers; ++index) threads_.emplace_back([this] { serve(); });
  } catch (const std::system_error&) {
    if (threads_.empty()) throw;  // copy with those there are
  }
}

ParallelCopy::~ParallelCopy() {
  stopping_.store(true);
  posted_.fetch_add(1);
  posted_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ParallelCopy::copy(std::byte* destination, const std::byte* source, std::size_t size,
                        unsigned slices) {
  post(destination, source, size, slices, -1, true);
  finish();
}

void ParallelCopy::start(std::byte* destination, const std::byte* source, std::size_t size,
                         unsigned slices, int notify_fd) {
  post(destination, source, size, slices, notify_fd, false);
}

void ParallelCopy::post(std::byte* destination, const std::byte* source, std::size_t size,
                        unsigned slices, int notify_fd, bool caller_copies) {
  for (bool busy = false; !in_flight_.compare_exchange_weak(busy, true); busy = false) {
    in_flight_.wait(true);
  }
  slices =
      size == 0 ? 0 : std::clamp<std::size_t>(slices, 1, std::min<std::size_t>(size, 1U << 30));
  destination_ = destination;
  source_ = source;
  size_ = size;
  notify_fd_ = notify_fd;
  step_ = slices == 0 ? 0 : (size + slices - 1) / slices;
  if (slices != 0) slices = static_cast<unsigned>((size + step_ - 1) / step_);  // none empty
  copied_.store(false);
  left_.store(slices);
  slices_.store(std::uint64_t{slices} << 32U);  // published: the fields above go with it
  if (slices == 0) {
    all_copied();
    return;
  }
  // The caller wakes one thread, and that one the others: waking sixteen took the caller
  // 0.04 ms on the H100 machine, in the way of the frame it sends next.
  const std::size_t wanted =
      std::min<std::size_t>(slices - (caller_copies ? 1 : 0), threads_.size());
  if (wanted > 0) {
    to_wake_.store(wanted - 1);
    posted_.fetch_add(1);
    posted_.notify_one();
  }
}

void ParallelCopy::wake_the_others() {
  const unsigned more = to_wake_.exchange(0);
  if (more + 1 >= threads_.size()) {
    posted_.notify_all();  // one system call for every sleeping thread
  } else {
    for (unsigned woken = 0; woken < more; ++woken) posted_.notify_one();
  }
}

void ParallelCopy::finish() {
  if (!in_flight_.load()) return;  // nothing started (a forked child's own threads)
  take_slices();
  while (!copied_.load()) copied_.wait(false);
  in_flight_.store(false);
  in_flight_.notify_one();
}

void ParallelCopy::take_slices() {
  for (;;) {
    const std::uint64_t taken = slices_.fetch_add(1);
    const auto index = static_cast<std::uint32_t>(taken);
    if (index >= static_cast<std::uint32_t>(taken >> 32U)) return;
    const std::size_t begin = index * step_;
    std::memcpy(destination_ + begin, source_ + begin, std::min(step_, size_ - begin));
    if (left_.fetch_sub(1) == 1) all_copied();
  }
}

// Every slice is copied: the copy's fields stay as they are until finish() sees copied_.
void ParallelCopy::all_copied() {
  if (notify_fd_ >= 0) {
    const char ready = 'r';
    // A receiver that closed its end (EPIPE; Python ignores SIGPIPE) no longer waits for it.
    while (::write(notify_fd_, &ready, 1) < 0 && errno == EINTR) {
    }
  }
  copied_.store(true);
  copied_.notify_all();
}

void ParallelCopy::serve() {
  // From 0, the count at construction: a copy (or the destructor) posted before this thread
  // first runs still wakes it.
  std::uint32_t seen = 0;
  for (;;) {
    posted_.wait(seen);
    seen = posted_.load();
    if (stopping_.load()) return;
    if (to_wake_.load() != 0) wake_the_others();
    take_slices();
  }
}

ParallelCopy& ParallelCopy::of_this_process(unsigned helpers) {
  static std::mutex guard;
  static ParallelCopy* threads = nullptr;
  static pid_t owner = 0;
  const std::lock_guard lock(guard);
  if (threads == nullptr || owner != ::getpid()) {
    threads = new ParallelCopy(helpers);  // NOLINT(cppcoreguidelines-owning-memory): see above
    owner = ::getpid();
  }
  return *threads;
}

}  // namespace isohost::wire
