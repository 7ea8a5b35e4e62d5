#include "wire/parallel_copy.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <numeric>
#include <thread>
#include <vector>

namespace isohost::wire {
namespace {

std::vector<std::byte> pattern(std::size_t size, unsigned seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) % 251);
  return bytes;
}

TEST(ParallelCopy, EverySliceIsCopiedWhateverTheSizeAndSliceCount) {
  ParallelCopy copy(3);
  for (const std::size_t size :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{(1 << 20) + 3}}) {
    for (const unsigned slices : {1U, 2U, 4U, 9U, 64U}) {  // more than the threads: taken in turn
      const auto source = pattern(size, slices);
      std::vector<std::byte> destination(size + 1, std::byte{0xEE});
      copy.copy(destination.data(), source.data(), size, slices);
      EXPECT_TRUE(std::equal(source.begin(), source.end(), destination.begin()))
          << size << " bytes in " << slices << " slices";
      EXPECT_EQ(destination[size], std::byte{0xEE}) << "nothing past the end";
    }
  }
}

TEST(ParallelCopy, CallersOnSeveralThreadsShareTheThreads) {
  ParallelCopy copy(2);
  constexpr std::size_t kSize = 3 << 20;
  std::vector<std::thread> callers;
  std::vector<int> whole(4);  // not vector<bool>: its bits share words between threads
  for (unsigned caller = 0; caller < 4; ++caller) {
    callers.emplace_back([&, caller] {
      const auto source = pattern(kSize, caller);
      for (int round = 0; round < 20; ++round) {
        std::vector<std::byte> destination(kSize);
        copy.copy(destination.data(), source.data(), kSize, 3);
        if (destination != source) return;
      }
      whole[caller] = 1;
    });
  }
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(std::accumulate(whole.begin(), whole.end(), 0), 4);
}

TEST(ParallelCopy, NoHelpersCopiesOnTheCallerAlone) {
  ParallelCopy copy(0);
  const auto source = pattern(100000, 5);
  std::vector<std::byte> destination(source.size());
  copy.copy(destination.data(), source.data(), source.size(), 4);
  EXPECT_EQ(destination, source);
}

TEST(ParallelCopy, AProcessHasOneSetOfThreadsTheFirstCallerSized) {
  auto& threads = ParallelCopy::of_this_process(2);
  EXPECT_EQ(&ParallelCopy::of_this_process(5), &threads);
  EXPECT_EQ(threads.helpers(), 2U);
  const auto source = pattern(1 << 20, 9);
  std::vector<std::byte> destination(source.size());
  threads.copy(destination.data(), source.data(), source.size(), 3);
  EXPECT_EQ(destination, source);
}

}  // namespace
}  // namespace isohost::wire
