#include "worker/output_pipe.hpp"

#include <unistd.h>

namespace isohost::worker {

OutputPipe::OutputPipe(asio::io_context& io, wire::UniqueFd read_end,
                       std::function<void(const std::string&)> on_line)
    : pipe_(io, read_end.release()), on_line_(std::move(on_line)) {
  pipe_.non_blocking(true);
}

void OutputPipe::start() { read_some(); }

void OutputPipe::read_some() {
  pipe_.async_read_some(asio::buffer(buffer_),
                        [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
                          if (ec) {
                            if (!self->partial_.empty()) self->emit(std::move(self->partial_));
                            return;
                          }
                          self->consume(self->buffer_, n);
                          self->read_some();
                        });
}

void OutputPipe::drain() {
  if (!pipe_.is_open()) return;
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), buffer_, sizeof buffer_);
    if (n <= 0) break;
    consume(buffer_, static_cast<std::size_t>(n));
  }
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
  on_line_(line);
  tail_.push_back(std::move(line));
  if (tail_.size() > kTailLines) tail_.pop_front();
}

}  // namespace isohost::worker
