#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "wire/unique_fd.hpp"

namespace isohost::worker {

// Reads a worker's stdout or stderr line by line on the event loop, hands every line to
// `on_line` and keeps the last few for crash reports. Output is a pipe apart from the protocol
// socket, so nothing printed can corrupt a frame.
class OutputPipe : public std::enable_shared_from_this<OutputPipe> {
 public:
  static constexpr std::size_t kTailLines = 20;
  static constexpr std::size_t kMaxLineBytes = 16 * 1024;

  OutputPipe(asio::io_context& io, wire::UniqueFd read_end,
             std::function<void(const std::string&)> on_line);

  void start();
  // Reads whatever is already in the pipe without waiting: the last words of a dead worker.
  void drain();
  void close();

  [[nodiscard]] const std::deque<std::string>& tail() const { return tail_; }

 private:
  void read_some();
  void consume(const char* data, std::size_t size);
  void emit(std::string line);

  asio::posix::stream_descriptor pipe_;
  std::function<void(const std::string&)> on_line_;
  std::string partial_;
  std::deque<std::string> tail_;
  char buffer_[4096];
};

}  // namespace isohost::worker
