#include "wire/frame.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "wire/json_depth.hpp"

namespace isohost::wire {
namespace {

void put_u16(std::uint8_t* out, std::uint16_t v) {
  out[0] = static_cast<std::uint8_t>(v);
  out[1] = static_cast<std::uint8_t>(v >> 8);
}

void put_u32(std::uint8_t* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint16_t get_u16(const std::uint8_t* in) {
  return static_cast<std::uint16_t>(in[0] | (in[1] << 8));
}

std::uint32_t get_u32(const std::uint8_t* in) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

}  // namespace

std::vector<std::uint8_t> encode_frame(const nlohmann::ordered_json& body,
                                       std::uint32_t buffer_count) {
  if (!body.is_object()) throw WireError("frame body must be a JSON object");
  if (buffer_count > kMaxBuffers) {
    throw WireError("frame carries " + std::to_string(buffer_count) + " buffers; at most " +
                    std::to_string(kMaxBuffers) + " are allowed");
  }
  // Invalid UTF-8 in a string is replaced rather than thrown on: a caller's odd bytes should
  // not take the connection down.
  std::string text = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (text.size() > kMaxJsonLength) {
    throw WireError("frame body of " + std::to_string(text.size()) + " bytes exceeds the " +
                    std::to_string(kMaxJsonLength) + "-byte limit");
  }
  std::vector<std::uint8_t> out(kHeaderSize + text.size());
  std::copy(kMagic.begin(), kMagic.end(), out.begin());
  put_u16(&out[4], kProtocolVersion);
  put_u16(&out[6], 0);
  put_u32(&out[8], static_cast<std::uint32_t>(text.size()));
  put_u32(&out[12], buffer_count);
  std::memcpy(out.data() + kHeaderSize, text.data(), text.size());
  return out;
}

FrameHeader decode_header(std::span<const std::uint8_t, kHeaderSize> bytes) {
  if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) {
    std::string seen;
    for (int i = 0; i < 4; ++i) {
      const auto c = bytes[i];
      seen += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    throw WireError("bad frame magic '" + seen + "' (expected 'ISOH'): the peer wrote "
                    "something that is not a protocol frame");
  }
  const auto version = get_u16(&bytes[4]);
  if (version != kProtocolVersion) {
    throw WireError("frame has protocol version " + std::to_string(version) + "; this host speaks " +
                    std::to_string(kProtocolVersion));
  }
  if (get_u16(&bytes[6]) != 0) throw WireError("frame has unknown flags set");
  FrameHeader header{get_u32(&bytes[8]), get_u32(&bytes[12])};
  if (header.json_length == 0 || header.json_length > kMaxJsonLength) {
    throw WireError("frame announces a JSON body of " + std::to_string(header.json_length) +
                    " bytes; allowed 1 to " + std::to_string(kMaxJsonLength));
  }
  if (header.buffer_count > kMaxBuffers) {
    throw WireError("frame announces " + std::to_string(header.buffer_count) +
                    " buffers; at most " + std::to_string(kMaxBuffers) + " are allowed");
  }
  return header;
}

nlohmann::ordered_json decode_body(std::span<const std::uint8_t> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (json_depth(text) > kMaxJsonDepth) throw WireError(too_deep("frame body"));
  auto body = nlohmann::ordered_json::parse(bytes.begin(), bytes.end(), nullptr,
                                            /*allow_exceptions=*/false);
  if (body.is_discarded()) throw WireError("frame body is not valid JSON");
  if (!body.is_object()) throw WireError("frame body is JSON but not an object");
  return body;
}

void FrameReader::append(std::span<const std::uint8_t> bytes) {
  // Compact lazily so a long-lived connection does not grow its buffer without bound.
  if (consumed_ > 0 && consumed_ == bytes_.size()) {
    bytes_.clear();
    consumed_ = 0;
  } else if (consumed_ > (1u << 20)) {
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
}

void FrameReader::append_fd(UniqueFd fd) {
  // Closed here rather than kept: a peer that attaches descriptors to frames that announce none
  // would otherwise fill this process's descriptor table. next() says what happened.
  if (fds_.size() >= kMaxPendingFds) {
    ++unclaimed_fds_;
    return;
  }
  fds_.push_back(std::move(fd));
}

std::optional<Frame> FrameReader::next() {
  if (poisoned_) throw WireError("frame stream already failed");
  try {
    if (unclaimed_fds_ > 0) {
      throw WireError("more than " + std::to_string(kMaxPendingFds) +
                      " descriptors arrived that no frame announced; the rest were closed");
    }
    if (!header_) {
      if (buffered_bytes() < kHeaderSize) return std::nullopt;
      header_ = decode_header(std::span<const std::uint8_t, kHeaderSize>(bytes_.data() + consumed_,
                                                                          kHeaderSize));
    }
    const std::size_t total = kHeaderSize + header_->json_length;
    if (buffered_bytes() < total) return std::nullopt;
    // The descriptors were attached to the header's first byte, so they have arrived by now.
    if (fds_.size() < header_->buffer_count) {
      throw WireError("frame announces " + std::to_string(header_->buffer_count) +
                      " buffers but " + std::to_string(fds_.size()) + " descriptors arrived");
    }
    Frame frame;
    frame.body = decode_body(
        std::span<const std::uint8_t>(bytes_.data() + consumed_ + kHeaderSize, header_->json_length));
    for (std::uint32_t i = 0; i < header_->buffer_count; ++i) {
      frame.buffers.push_back(std::move(fds_.front()));
      fds_.pop_front();
    }
    consumed_ += total;
    header_.reset();
    return frame;
  } catch (const WireError&) {
    poisoned_ = true;
    throw;
  }
}

}  // namespace isohost::wire
