#include "cli/progress_line.hpp"

#include <unistd.h>

#include <cstdio>

namespace isohost::cli {
namespace {

// One command runs at a time, on the main thread.
ProgressLine* g_current = nullptr;

}  // namespace

ProgressLine::ProgressLine(std::string task)
    : task_(std::move(task)), terminal_(::isatty(STDERR_FILENO) == 1) {
  g_current = this;
}

ProgressLine::~ProgressLine() {
  clear();
  if (g_current == this) g_current = nullptr;
}

void ProgressLine::show(const std::string& step) {
  if (!terminal_) return;
  const auto text = task_ + ": " + step;
  // Overwritten in place: a carriage return, the text, and spaces over what a longer line left.
  std::fprintf(stderr, "\r%s%*s", text.c_str(),
               static_cast<int>(shown_ > text.size() ? shown_ - text.size() : 0), "");
  std::fflush(stderr);
  shown_ = text.size();
}

void ProgressLine::clear() {
  if (!terminal_ || shown_ == 0) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(shown_), "");
  std::fflush(stderr);
  shown_ = 0;
}

void note_progress(const std::string& step) {
  if (g_current != nullptr) g_current->show(step);
}

}  // namespace isohost::cli
