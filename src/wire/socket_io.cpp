#include "wire/socket_io.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace isohost::wire {
namespace {

constexpr std::size_t kReceiveChunk = 64 * 1024;

std::system_error socket_error(const char* what) {
  return {errno, std::generic_category(), what};
}

// Sends bytes[offset..] with `fds` attached when non-empty. Returns bytes sent, or -1 with
// errno set.
ssize_t send_with_fds(int socket_fd, const std::uint8_t* bytes, std::size_t length,
                      std::span<const int> fds) {
  iovec iov{const_cast<std::uint8_t*>(bytes), length};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxBuffers)];
  if (!fds.empty()) {
    const std::size_t fd_bytes = sizeof(int) * fds.size();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fd_bytes);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fd_bytes);
    std::memcpy(CMSG_DATA(cmsg), fds.data(), fd_bytes);
  }
  ssize_t n;
  do {
    n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

// One recvmsg into `reader`: returns the byte count (0 at end-of-file), or -1 with errno set.
// Takes ownership of every descriptor before anything can throw, so none leaks.
ssize_t receive_into(int socket_fd, FrameReader& reader, int flags) {
  std::uint8_t buffer[kReceiveChunk];
  iovec iov{buffer, sizeof buffer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxBuffers)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket_fd, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      reader.append_fd(UniqueFd(fd));
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    throw WireError("peer sent more descriptors than a frame may carry");
  }
  reader.append(std::span<const std::uint8_t>(buffer, static_cast<std::size_t>(n)));
  return n;
}

}  // namespace

ReceiveStatus receive_some(int socket_fd, FrameReader& reader) {
  const ssize_t n = receive_into(socket_fd, reader, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ReceiveStatus::would_block;
    throw socket_error("recvmsg");
  }
  return n == 0 ? ReceiveStatus::end_of_file : ReceiveStatus::data;
}

void SendQueue::push(const nlohmann::ordered_json& body, std::vector<UniqueFd> buffers) {
  pending_.push_back(
      Pending{encode_frame(body, static_cast<std::uint32_t>(buffers.size())), std::move(buffers)});
}

bool SendQueue::flush(int socket_fd) {
  while (!pending_.empty()) {
    Pending& front = pending_.front();
    std::vector<int> fds;
    if (front.sent == 0) {
      for (const auto& b : front.buffers) fds.push_back(b.get());
    }
    const ssize_t n = send_with_fds(socket_fd, front.bytes.data() + front.sent,
                                    front.bytes.size() - front.sent, fds);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      throw socket_error("sendmsg");
    }
    front.sent += static_cast<std::size_t>(n);
    // Once sent, the peer holds its own copies of the descriptors; ours close here.
    front.buffers.clear();
    if (front.sent == front.bytes.size()) pending_.pop_front();
  }
  return true;
}

void send_frame(int socket_fd, const nlohmann::ordered_json& body, std::span<const int> buffers) {
  const auto bytes = encode_frame(body, static_cast<std::uint32_t>(buffers.size()));
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send_with_fds(socket_fd, bytes.data() + sent, bytes.size() - sent,
                                    sent == 0 ? buffers : std::span<const int>{});
    if (n < 0) throw socket_error("sendmsg");
    sent += static_cast<std::size_t>(n);
  }
}

std::optional<Frame> receive_frame(int socket_fd, FrameReader& reader) {
  for (;;) {
    if (auto frame = reader.next()) return frame;
    const ssize_t n = receive_into(socket_fd, reader, 0);
    if (n < 0) throw socket_error("recvmsg");
    if (n == 0) return std::nullopt;
  }
}

}  // namespace isohost::wire
