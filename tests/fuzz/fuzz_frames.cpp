// Bytes from a worker: the reader must answer each with a frame, "more bytes", or WireError,
// whatever the split, and never crash, hang or read out of bounds.

#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/frame.hpp"
#include "wire/json_depth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace isohost::wire;
  // The first byte picks where the stream is split, as recvmsg may split it.
  const std::size_t split = size == 0 ? 0 : data[0] % size;
  FrameReader reader;
  try {
    reader.append(std::span<const std::uint8_t>(data, split));
    while (reader.next()) {
    }
    reader.append(std::span<const std::uint8_t>(data + split, size - split));
    while (auto frame = reader.next()) {
      // What the host does with a body: print it into a message, copy it.
      const auto copy = frame->body;
      (void)copy.dump();
    }
  } catch (const WireError&) {
  }
  // The bytes as one body on their own.
  try {
    (void)decode_body(std::span<const std::uint8_t>(data, size));
  } catch (const WireError&) {
  }
  return 0;
}
