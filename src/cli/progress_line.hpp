#pragma once

// Long CLI work (`footprint` stages, `bench` figures) tells a person at a terminal what it is
// doing: one line on stderr that each step overwrites, cleared when the work ends. Nothing at
// all when stderr is not a terminal, so logs, pipes and the JSON on stdout stay clean.

#include <string>

namespace isohost::cli {

class ProgressLine {
 public:
  // `task` prefixes every step ("footprint", "bench rtt"). While it lives, it is the line that
  // note_progress() writes to.
  explicit ProgressLine(std::string task);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void show(const std::string& step);

 private:
  void clear();
  std::string task_;
  bool terminal_;
  std::size_t shown_ = 0;  // characters on the line now
};

// Shows `step` on the ProgressLine alive now, if any: for code below the command (a benchmark's
// figures) that does not hold the line.
void note_progress(const std::string& step);

}  // namespace isohost::cli
