#pragma once

// The lines workers write to their stdout and stderr, for a Python host that asked for them
// (Host(on_output=...), docs/python-api.md, "Worker output"): pushed on the pool's loop thread,
// taken by the host's thread "isohost-output", which hands them to its handler.
//
//   options.on_output = [lines](worker::OutputLine line) { lines->push(std::move(line)); };
//   while (auto batch = lines->take(1s)) { for (auto& line : batch->lines) ...; }
//
// Bounded: past kMaxQueuedBytes waiting, a line is dropped and counted (the next batch says how
// many), so a worker that floods its output while the handler is slow cannot grow the host
// without end, and the loop never waits for Python.
// Numbered: every line pushed counts, dropped or not, so a caller can wait until the lines read
// before its call's reply have been taken and handled (pushed() then, a batch's `through`).
// Thread safety: every method on any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "worker/output_line.hpp"

namespace isohost::binding {

class OutputQueue {
 public:
  static constexpr std::size_t kMaxQueuedBytes = 4 << 20;
  // What a line costs besides its text (its environment's name, the vector's slot), so that a
  // flood of empty lines is bounded too.
  static constexpr std::size_t kLineOverhead = 64;

  struct Batch {
    // In the order they were pushed.
    std::vector<worker::OutputLine> lines;
    // Lines pushed after these that did not fit.
    std::uint64_t dropped = 0;
    // How many lines had been pushed when this batch was taken: these, those dropped, and
    // every one before.
    std::uint64_t through = 0;
  };

  // Never blocks; does nothing once closed.
  void push(worker::OutputLine line);
  // How many lines have been pushed so far.
  [[nodiscard]] std::uint64_t pushed() const { return pushed_.load(std::memory_order_acquire); }
  // What came since the last take, waiting at most `limit` for the first (an empty batch when
  // none came); nullopt once closed and taken to the end.
  std::optional<Batch> take(std::chrono::milliseconds limit);
  // No line is queued after this; take() hands out what is queued, then nullopt. Called once
  // the pool has ended, so that a worker's last words still reach the handler.
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<worker::OutputLine> queued_;
  std::size_t queued_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::atomic<std::uint64_t> pushed_{0};
  bool closed_ = false;
};

}  // namespace isohost::binding
