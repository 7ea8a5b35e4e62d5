// A worker's output reaches the host's log and crash reports with its control bytes escaped:
// what a worker prints must not drive the operator's terminal. Or, where the host asked for it,
// its handler, as written and before the call's outcome.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include "pool/pool.hpp"
#include "support/test_support.hpp"
#include "worker/output_pipe.hpp"

namespace isohost::worker {
namespace {

using ::testing::HasSubstr;

// The reply's read of the pipe (read_available, before the call's outcome) and the loop's own
// reading must hand the bytes on once each, in the order the worker wrote them: an asio read
// done ahead of its handler had its bytes overwritten by the reply's read and handed on after
// them (under load, a flood's lines came out cut, swapped and counted twice).
TEST(OutputPipe, TheReplysReadAndTheLoopsKeepTheWorkersOrder) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  wire::UniqueFd read_end(ends[0]);
  wire::UniqueFd write_end(ends[1]);
  asio::io_context io;
  std::vector<std::string> lines;
  auto pipe = std::make_shared<OutputPipe>(io, std::move(read_end),
                                           [&lines](std::string line) { lines.push_back(line); });
  const auto write = [&write_end](std::string_view text) {
    ASSERT_EQ(::write(write_end.get(), text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
  };
  write("a\nb\n");
  pipe->start();  // the loop's read: asio may make it at once and run its handler later
  write("c\n");
  EXPECT_TRUE(pipe->read_available());  // the reply's
  io.poll();
  write("d\npartial");
  io.poll();
  EXPECT_THAT(lines, ::testing::ElementsAre("a", "b", "c", "d"));
  write_end.reset();  // the worker's end: its line not ended is its last
  io.run();
  EXPECT_THAT(lines, ::testing::ElementsAre("a", "b", "c", "d", "partial"));
  EXPECT_FALSE(pipe->read_available());
}

TEST(PrintableLine, EscapesControlBytesAndKeepsUtf8Text) {
  const std::pair<std::string, std::string> cases[] = {
      {"plain text", "plain text"},
      {"tab\tstays", "tab\tstays"},
      {"\x1b[31mNOISY\x1b[0m", "\\x1b[31mNOISY\\x1b[0m"},
      {std::string("nul\0one\x01two\x02", 12), "nul\\x00one\\x01two\\x02"},
      {"cr\rdel\x7f", "cr\\x0ddel\\x7f"},
      {"caf\xc3\xa9 \xe7\x94\xbb \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe7\x94\xbb \xf0\x9f\x98\x80"},
      {"csi \xc2\x9b[2J", "csi \\xc2\\x9b[2J"},      // U+009B, a C1 control
      {"nbsp \xc2\xa0", "nbsp \xc2\xa0"},            // U+00A0, printable
      {"bad \xff byte", "bad \\xff byte"},           // never UTF-8
      {"cut \xe7\x94", "cut \\xe7\\x94"},            // a sequence cut short
      {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},  // '/' written in two bytes
      {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
      {"stray \x80", "stray \\x80"},
  };
  for (const auto& [line, shown] : cases) EXPECT_EQ(printable_line(line), shown) << shown;
}

// Collects the messages the host logs while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<Sink>()) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() { return sink_->text(); }

 private:
  class Sink : public spdlog::sinks::sink {
   public:
    void log(const spdlog::details::log_msg& msg) override {
      const std::lock_guard lock(mutex_);
      text_.append(msg.payload.data(), msg.payload.size()).push_back('\n');
    }
    void flush() override {}
    void set_pattern(const std::string&) override {}
    void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
    std::string text() {
      const std::lock_guard lock(mutex_);
      return text_;
    }

   private:
    std::mutex mutex_;
    std::string text_;
  };
  std::shared_ptr<Sink> sink_;
};

TEST(PoolWorkerOutput, ControlBytesAreEscapedInTheLogAndTheCrashReport) {
  test_support::TempDir dir;
  std::ofstream(dir.path + "/isohost_noisy.py")
      << "import os\n"
         "def noisy():\n"
         "    os.write(1, b'OUT \\x1b[31mNOISY\\x1b[0m\\x00\\x01\\x02\\ttab caf\\xc3\\xa9\\n')\n"
         "    os.write(2, b'ERR bad \\xff byte \\xc2\\x9b\\n')\n"
         "    return 1\n"
         "def dies():\n"
         "    os.write(2, b'LAST \\x1b[2Jwords\\n')\n"
         "    os._exit(3)\n";
  auto config = test_support::fixture_config({"a"});
  config.environments["a"].path.push_back(dir.path);
  LogCapture log;
  {
    pool::Pool pool(config);
    EXPECT_EQ(pool.call("a", "isohost_noisy:noisy").get(), 1);
    const auto error = test_support::call_error(pool.call("a", "isohost_noisy:dies"));
    EXPECT_THAT(error.what(), HasSubstr("LAST \\x1b[2Jwords"));
    EXPECT_TRUE(test_support::eventually(
        [&log] { return log.text().find("ERR bad") != std::string::npos; }));
  }
  const auto text = log.text();
  EXPECT_THAT(text, HasSubstr("OUT \\x1b[31mNOISY\\x1b[0m\\x00\\x01\\x02\ttab caf\xc3\xa9"));
  EXPECT_THAT(text, HasSubstr("ERR bad \\xff byte \\xc2\\x9b"));
  EXPECT_THAT(text, HasSubstr("LAST \\x1b[2Jwords"));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\0'), std::string::npos) << text;
}

std::vector<std::string> texts(const std::vector<OutputLine>& lines, OutputLine::Stream stream) {
  std::vector<std::string> out;
  for (const auto& line : lines)
    if (line.stream == stream) out.push_back(line.text);
  return out;
}

TEST(PoolWorkerOutput, AHandlerGetsTheLinesAsWrittenBeforeTheReplyAndTheLogDoesNot) {
  test_support::TempDir dir;
  std::ofstream(dir.path + "/isohost_told.py")
      << "import os\n"
         "def told():\n"
         "    os.write(1, b'OUT \\x1b[31mred\\xff\\r\\nsecond\\n')\n"
         "    os.write(2, b'ERR line\\n')\n"
         "    os.write(1, b'unended')\n"
         "    return os.getpid()\n";
  auto config = test_support::fixture_config({"a"});
  config.environments["a"].path.push_back(dir.path);
  std::mutex mutex;
  std::vector<OutputLine> lines;
  LogCapture log;
  {
    pool::Pool pool(config, pool::PoolOptions{.on_output = [&](OutputLine line) {
                      const std::lock_guard lock(mutex);
                      lines.push_back(std::move(line));
                    }});
    const auto pid = pool.call("a", "isohost_told:told").get().get<pid_t>();
    {
      // Handed over on the loop before the call's outcome: no waiting here. In order within
      // each stream; the two pipes may be read either first.
      const std::lock_guard lock(mutex);
      EXPECT_EQ(texts(lines, OutputLine::Stream::out),
                (std::vector<std::string>{"OUT \x1b[31mred\xff", "second"}));
      EXPECT_EQ(texts(lines, OutputLine::Stream::err), std::vector<std::string>{"ERR line"});
      for (const auto& line : lines) {
        EXPECT_EQ(line.env, "a");
        EXPECT_EQ(line.pid, pid);
      }
    }
  }  // the pool ends the worker: its line without a newline comes then
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3].text, "unended");
  EXPECT_EQ(log.text().find("ERR line"), std::string::npos) << log.text();
  EXPECT_EQ(log.text().find("second"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace isohost::worker
