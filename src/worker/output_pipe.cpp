#include "worker/output_pipe.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace isohost::worker {
namespace {

// The length of the UTF-8 sequence at `at`, 0 if none starts there (a stray continuation byte,
// an overlong form, a surrogate, beyond U+10FFFF or cut short).
std::size_t utf8_length(std::string_view text, std::size_t at) {
  const auto byte = [&text](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned lead = byte(at);
  std::size_t length = 0;
  unsigned low = 0x80;
  unsigned high = 0xBF;  // the second byte's range
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

void append_escaped(std::string& out, unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 0xF];
}

}  // namespace

std::string printable_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (std::size_t at = 0; at < line.size();) {
    const auto lead = static_cast<unsigned char>(line[at]);
    const std::size_t length = utf8_length(line, at);
    // C1 controls (U+0080 to U+009F) are C2 80 to C2 9F.
    const bool control = length == 1 ? (lead < 0x20 && lead != '\t') || lead == 0x7F
                                     : length == 2 && lead == 0xC2 &&
                                           static_cast<unsigned char>(line[at + 1]) <= 0x9F;
    if (length == 0 || control) {
      for (std::size_t i = 0; i < std::max<std::size_t>(length, 1); ++i)
        append_escaped(out, static_cast<unsigned char>(line[at + i]));
      at += std::max<std::size_t>(length, 1);
    } else {
      out.append(line.substr(at, length));
      at += length;
    }
  }
  return out;
}

OutputPipe::OutputPipe(asio::io_context& io, wire::UniqueFd read_end, OnLine on_line)
    : pipe_(io, read_end.release()), on_line_(std::move(on_line)) {
  pipe_.non_blocking(true);
}

void OutputPipe::start() { read_some(); }

void OutputPipe::read_some() {
  pipe_.async_wait(asio::posix::stream_descriptor::wait_read,
                   [self = shared_from_this()](const asio::error_code& ec) {
                     if (!ec && self->read_available()) {
                       self->read_some();
                       return;
                     }
                     // The worker's end (or ours): its line not ended is its last.
                     if (!self->partial_.empty()) self->emit(std::exchange(self->partial_, {}));
                   });
}

bool OutputPipe::read_available() {
  if (!pipe_.is_open()) return false;
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), buffer_, sizeof buffer_);
    if (n > 0) {
      consume(buffer_, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // else its end, or an error
    }
  }
}

void OutputPipe::drain() {
  if (!pipe_.is_open()) return;
  read_available();
  if (!partial_.empty()) emit(std::move(partial_));
  partial_.clear();
}

void OutputPipe::close() {
  asio::error_code ignored;
  pipe_.close(ignored);
}

void OutputPipe::consume(const char* data, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      emit(std::move(partial_));
      partial_.clear();
    } else if (partial_.size() < kMaxLineBytes) {
      partial_ += data[i];
    }
  }
}

void OutputPipe::emit(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  tail_.push_back(printable_line(line));
  if (tail_.size() > kTailLines) tail_.pop_front();
  on_line_(std::move(line));
}

}  // namespace isohost::worker
