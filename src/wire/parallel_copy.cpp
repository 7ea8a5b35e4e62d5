#include "wire/parallel_copy.hpp"

#include <asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <latch>

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
    asio::post(threads_, [&copied, destination, source, begin, length] {
      std::memcpy(destination + begin, source + begin, length);
      copied.count_down();
    });
  }
  std::memcpy(destination, source, std::min(step, size));
  copied.wait();
}

}  // namespace isohost::wire
