#pragma once

// Moving frames over a connected AF_UNIX stream socket, descriptors attached with SCM_RIGHTS.
// The functions are thin and stateless; the event loop decides when to call them.

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/frame.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::wire {

enum class ReceiveStatus {
  data,         // some bytes (and perhaps descriptors) went into the reader
  would_block,  // nothing to read now (non-blocking socket)
  end_of_file,  // the peer closed its end
};

// One recvmsg into `reader`. Descriptors arrive close-on-exec. Throws std::system_error on a
// socket error other than EAGAIN/EINTR, and WireError if the kernel truncated the descriptors.
ReceiveStatus receive_some(int socket_fd, FrameReader& reader);

// Frames waiting to go out on a non-blocking socket, sent in order. The descriptors of a frame
// ride on the sendmsg that carries its first byte, as the protocol requires.
class SendQueue {
 public:
  void push(const nlohmann::ordered_json& body, std::vector<UniqueFd> buffers = {});

  // Sends as much as the socket takes without blocking. Returns true when the queue is empty.
  // Throws std::system_error on a socket error (EPIPE included: the peer is gone).
  bool flush(int socket_fd);

  [[nodiscard]] bool empty() const { return pending_.empty(); }

 private:
  struct Pending {
    std::vector<std::uint8_t> bytes;
    std::vector<UniqueFd> buffers;
    std::size_t sent = 0;
  };
  std::deque<Pending> pending_;
};

// Blocking send of one whole frame: for simple synchronous peers (tests, the control client).
void send_frame(int socket_fd, const nlohmann::ordered_json& body,
                std::span<const int> buffers = {});

// Blocking receive of one whole frame using `reader` for leftovers between calls. Returns
// nullopt at end-of-file.
std::optional<Frame> receive_frame(int socket_fd, FrameReader& reader);

}  // namespace isohost::wire
