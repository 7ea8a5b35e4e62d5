#pragma once

// Frames of the host-worker protocol (docs/protocol.md) as pure functions over bytes.
//
//   auto bytes = encode_frame({{"op", "ping"}, {"id", 1}}, 0);
//   FrameReader reader;
//   reader.append(bytes);
//   while (auto frame = reader.next()) { ... }   // throws WireError on a malformed frame
//
// Nothing here touches a descriptor except to carry it: sockets live in socket_io.hpp.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/unique_fd.hpp"

namespace isohost::wire {

inline constexpr std::array<std::uint8_t, 4> kMagic{'I', 'S', 'O', 'H'};
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::size_t kHeaderSize = 16;
inline constexpr std::uint32_t kMaxJsonLength = 64u << 20;
inline constexpr std::uint32_t kMaxBuffers = 64;
// Descriptors received and not yet claimed by a frame: those of the frame being read and of the
// next one, whose first byte may come in the same read. More means a peer sends descriptors no
// frame announces.
inline constexpr std::size_t kMaxPendingFds = 2 * kMaxBuffers;

// A frame that breaks the protocol. The connection it came from cannot be trusted after it.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FrameHeader {
  std::uint32_t json_length = 0;
  std::uint32_t buffer_count = 0;
};

// One decoded message: its JSON object and the buffers (memfds) that travelled with it.
struct Frame {
  nlohmann::ordered_json body;
  std::vector<UniqueFd> buffers;
};

// Header followed by the JSON body; the caller attaches `buffer_count` descriptors to the
// send that carries the first byte. Throws WireError when the body is not an object or is too
// large, or when there are too many buffers.
std::vector<std::uint8_t> encode_frame(const nlohmann::ordered_json& body,
                                       std::uint32_t buffer_count = 0);

// Validates a 16-byte header. Throws WireError naming what is wrong.
FrameHeader decode_header(std::span<const std::uint8_t, kHeaderSize> bytes);

// Parses and validates a body: UTF-8 JSON, an object, nested at most kMaxJsonDepth deep.
// Throws WireError.
nlohmann::ordered_json decode_body(std::span<const std::uint8_t> bytes);

// Reassembles frames from a byte stream and the descriptors received beside it. Bytes and
// descriptors may arrive in any split; descriptors are handed to frames in arrival order. More
// than kMaxPendingFds waiting at once is a WireError from next().
// After a WireError the reader is poisoned: the stream has lost its framing.
class FrameReader {
 public:
  void append(std::span<const std::uint8_t> bytes);
  void append_fd(UniqueFd fd);

  // The next complete frame, or nullopt until more bytes arrive.
  std::optional<Frame> next();

  [[nodiscard]] std::size_t buffered_bytes() const { return bytes_.size() - consumed_; }

 private:
  std::vector<std::uint8_t> bytes_;
  std::size_t consumed_ = 0;
  std::deque<UniqueFd> fds_;
  // Descriptors closed on arrival because kMaxPendingFds were already waiting.
  std::size_t unclaimed_fds_ = 0;
  std::optional<FrameHeader> header_;
  bool poisoned_ = false;
};

}  // namespace isohost::wire
