#include "wire/parallel_copy.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
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

TEST(ParallelCopy, AStartedCopyIsDoneByTheThreadsAndToldOnItsPipe) {
  ParallelCopy copy(2);
  std::array<int, 2> pipe_fds{};
  ASSERT_EQ(::pipe(pipe_fds.data()), 0);
  const auto source = pattern((4 << 20) + 11, 3);
  std::vector<std::byte> destination(source.size());
  copy.start(destination.data(), source.data(), source.size(), 16, pipe_fds[1]);
  // The caller takes no slice until finish(): the threads copy it all and tell the pipe.
  char told = 0;
  ASSERT_EQ(::read(pipe_fds[0], &told, 1), 1);
  EXPECT_EQ(told, 'r');
  EXPECT_EQ(destination, source);
  copy.finish();
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(ParallelCopy, FinishCopiesWhatNoThreadTook) {
  ParallelCopy copy(0);
  std::array<int, 2> pipe_fds{};
  ASSERT_EQ(::pipe(pipe_fds.data()), 0);
  const auto source = pattern(300000, 8);
  std::vector<std::byte> destination(source.size());
  copy.start(destination.data(), source.data(), source.size(), 5, pipe_fds[1]);
  copy.finish();
  EXPECT_EQ(destination, source);
  char told = 0;
  EXPECT_EQ(::read(pipe_fds[0], &told, 1), 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(ParallelCopy, ACopyAskedForWhileOneIsStartedWaitsAndBothAreWhole) {
  ParallelCopy copy(1);
  const auto first = pattern(1 << 20, 1);
  const auto second = pattern(1 << 20, 2);
  std::vector<std::byte> first_copy(first.size());
  std::vector<std::byte> second_copy(second.size());
  copy.start(first_copy.data(), first.data(), first.size(), 4);
  std::thread other([&] { copy.copy(second_copy.data(), second.data(), second.size(), 4); });
  copy.finish();  // the other thread's copy begins only after this
  other.join();
  EXPECT_EQ(first_copy, first);
  EXPECT_EQ(second_copy, second);
}

TEST(ParallelCopy, AnEmptyStartedCopyIsToldAtOnce) {
  ParallelCopy copy(1);
  std::array<int, 2> pipe_fds{};
  ASSERT_EQ(::pipe(pipe_fds.data()), 0);
  copy.start(nullptr, nullptr, 0, 4, pipe_fds[1]);
  char told = 0;
  EXPECT_EQ(::read(pipe_fds[0], &told, 1), 1);
  copy.finish();
  copy.finish();  // a finish with nothing started returns at once
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

}  // namespace
}  // namespace isohost::wire
