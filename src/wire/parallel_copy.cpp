#include "wire/parallel_copy.hpp"

#include <unistd.h>
#include <asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <latch>
#include <mutex>
#include <new>

namespace isohost::wire {

ParallelCopy::ParallelCopy(unsigned helpers) : helpers_(helpers), threads_(std::max(1U, helpers)) {}

ParallelCopy::~ParallelCopy() { threads_.join(); }

void ParallelCopy::copy(std::byte* destination, const std::byte* source, std::size_t size,
                        unsigned slices) {
  slices = std::clamp(slices, 1U, helpers_ + 1);
  const std::size_t step = (size + slices - 1) / slices;
  std::latch copied(slices - 1);
  for (unsigned index = 1; index < slices; ++index) {
    const std::size_t begin = std::min(size, index * step);
    const std::size_t length = std::min(step, size - begin);
    auto slice = [&copied, destination, source, begin, length] {
      std::memcpy(destination + begin, source + begin, length);
      copied.count_down();
    };
    try {
      asio::post(threads_, slice);
    } catch (const std::bad_alloc&) {  // the slices posted before still count down `copied`
      slice();
    }
  }
  std::memcpy(destination, source, std::min(step, size));
  copied.wait();
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
