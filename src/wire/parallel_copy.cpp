#include "wire/parallel_copy.hpp"

#include <unistd.h>

#include <algorithm>
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
  if (size == 0) return;
  slices = std::clamp<std::size_t>(slices, 1, std::min<std::size_t>(size, 1U << 30));
  const std::lock_guard one_copy(copying_);
  destination_ = destination;
  source_ = source;
  size_ = size;
  step_ = (size + slices - 1) / slices;
  slices = static_cast<unsigned>((size + step_ - 1) / step_);  // none empty
  left_.store(slices);
  slices_.store(std::uint64_t{slices} << 32U);  // published: the fields above go with it
  if (slices > 1 && !threads_.empty()) {
    posted_.fetch_add(1);
    // One system call for every sleeping thread; those past slices - 1 find nothing to take.
    if (slices - 1 >= threads_.size()) {
      posted_.notify_all();
    } else {
      for (unsigned woken = 0; woken < slices - 1; ++woken) posted_.notify_one();
    }
  }
  take_slices();
  for (auto left = left_.load(); left != 0; left = left_.load()) left_.wait(left);
}

void ParallelCopy::take_slices() {
  for (;;) {
    const std::uint64_t taken = slices_.fetch_add(1);
    const auto index = static_cast<std::uint32_t>(taken);
    if (index >= static_cast<std::uint32_t>(taken >> 32U)) return;
    const std::size_t begin = index * step_;
    std::memcpy(destination_ + begin, source_ + begin, std::min(step_, size_ - begin));
    if (left_.fetch_sub(1) == 1) left_.notify_all();
  }
}

void ParallelCopy::serve() {
  std::uint32_t seen = posted_.load();
  for (;;) {
    posted_.wait(seen);
    seen = posted_.load();
    if (stopping_.load()) return;
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
