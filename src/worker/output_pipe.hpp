#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "wire/unique_fd.hpp"

namespace isohost::worker {

// A line of a worker's output as the host logs and reports it: control characters other than
// tab (C0, DEL and C1: ANSI escapes, NULs, carriage returns) and bytes that are not UTF-8 become
// \xNN, so a worker cannot drive the operator's terminal or corrupt a log; valid UTF-8 text stays
// as it is.
std::string printable_line(std::string_view line);

// Reads a worker's stdout or stderr line by line on the event loop, hands every line to
// `on_line` as the worker wrote it (without its newline, nor a '\r' before it; whoever logs it
// makes it printable_line's form) and keeps the last few, printable, for crash reports. Output
// is a pipe apart from the protocol socket, so nothing printed can corrupt a frame.
class OutputPipe : public std::enable_shared_from_this<OutputPipe> {
 public:
  static constexpr std::size_t kTailLines = 20;
  // A longer line is cut here; the rest of it, up to its newline, is dropped.
  static constexpr std::size_t kMaxLineBytes = 16 * 1024;
  using OnLine = std::function<void(std::string line)>;

  OutputPipe(asio::io_context& io, wire::UniqueFd read_end, OnLine on_line);

  void start();
  // Reads whatever is already in the pipe without waiting and hands on its whole lines; a line
  // not ended yet waits for its newline. So the lines a worker wrote before its reply are handed
  // on before the reply is. False once the pipe has ended (or failed). Every read is made here,
  // in order: the loop only waits for the pipe to be readable (an asio read of its own, done
  // ahead of its handler, had its bytes overwritten and handed on after later ones).
  bool read_available();
  // read_available(), then the line not ended, if any: the last words of a dead worker.
  void drain();
  void close();

  [[nodiscard]] const std::deque<std::string>& tail() const { return tail_; }

 private:
  void read_some();
  void consume(const char* data, std::size_t size);
  void emit(std::string line);

  asio::posix::stream_descriptor pipe_;
  OnLine on_line_;
  std::string partial_;
  std::deque<std::string> tail_;
  char buffer_[4096];
};

}  // namespace isohost::worker
