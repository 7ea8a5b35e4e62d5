#include "wire/socket_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "wire/memfd.hpp"

namespace isohost::wire {
namespace {

struct SocketPair {
  UniqueFd a, b;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

TEST(SocketIo, MemfdBuffersTravelWithTheirFrame) {
  SocketPair pair;
  auto buffer = create_memfd("test", 1 << 20);
  {
    auto map = MappedBuffer::map(buffer.get(), MappedBuffer::Access::read_write);
    std::memset(map.bytes().data(), 0x5a, map.bytes().size());
  }
  const int fds[] = {buffer.get()};
  send_frame(pair.a.get(), {{"op", "data"}, {"size", 1 << 20}}, fds);
  FrameReader reader;
  auto frame = receive_frame(pair.b.get(), reader);
  ASSERT_TRUE(frame);
  ASSERT_EQ(frame->buffers.size(), 1U);
  EXPECT_EQ(memfd_size(frame->buffers[0].get()), 1U << 20);
  auto map = MappedBuffer::map(frame->buffers[0].get(), MappedBuffer::Access::read_only);
  EXPECT_EQ(static_cast<int>(map.bytes()[12345]), 0x5a);
  EXPECT_EQ(::fcntl(frame->buffers[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC)
      << "received descriptors must not leak into spawned workers";
  EXPECT_EQ(::ftruncate(frame->buffers[0].get(), 10), -1) << "sealed against shrinking";
}

TEST(SocketIo, SendQueueDeliversLargeFramesThroughANonBlockingSocket) {
  SocketPair pair;
  ASSERT_EQ(::fcntl(pair.a.get(), F_SETFL, O_NONBLOCK), 0);
  const std::string big(8 << 20, 'x');  // far beyond the socket buffer
  SendQueue queue;
  queue.push({{"op", "big"}, {"data", big}});
  queue.push({{"op", "small"}});
  std::thread reader_thread([&] {
    FrameReader reader;
    auto first = receive_frame(pair.b.get(), reader);
    auto second = receive_frame(pair.b.get(), reader);
    EXPECT_EQ((*first).body["data"].get<std::string>().size(), big.size());
    EXPECT_EQ((*second).body["op"], "small");
  });
  while (!queue.flush(pair.a.get())) std::this_thread::yield();
  reader_thread.join();
}

TEST(SocketIo, EndOfFileAndWouldBlockAreReported) {
  SocketPair pair;
  ASSERT_EQ(::fcntl(pair.b.get(), F_SETFL, O_NONBLOCK), 0);
  FrameReader reader;
  EXPECT_EQ(receive_some(pair.b.get(), reader), ReceiveStatus::would_block);
  pair.a.reset();
  EXPECT_EQ(receive_some(pair.b.get(), reader), ReceiveStatus::end_of_file);
}

}  // namespace
}  // namespace isohost::wire
