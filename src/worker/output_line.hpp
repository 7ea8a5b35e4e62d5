#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace isohost::worker {

// A line a worker wrote to its stdout or stderr, as the host hands it to whoever asked for the
// workers' output instead of its log (Worker::Events::on_output; the Python host's
// Host(on_output=...)).
struct OutputLine {
  enum class Stream : std::uint8_t { out, err };

  // The worker's environment.
  std::string env;
  pid_t pid = -1;
  Stream stream = Stream::out;
  // The bytes as written, without the newline (nor a '\r' before it) and cut at
  // OutputPipe::kMaxLineBytes: not necessarily UTF-8, control characters included. Whoever
  // shows it to a person escapes what it must (printable_line does for the host's log).
  std::string text;
};

// "stdout" or "stderr".
inline const char* stream_name(OutputLine::Stream stream) {
  return stream == OutputLine::Stream::err ? "stderr" : "stdout";
}

}  // namespace isohost::worker
