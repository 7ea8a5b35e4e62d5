#pragma once

// The live screen of `isohost top`: ncurses, redrawn from top_frame.hpp's frames, with keys to
// act on the selected row's environment. It knows the host only through a HostLink, so what it
// asks and how is top_command.cpp's business.

#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace isohost::cli::top {

// How the screen reaches the host. Both functions block, so the screen runs them on threads
// of their own and keeps drawing and reading keys meanwhile; both may run at once.
struct HostLink {
  // The metrics answer's value (top_frame.hpp's Sample::metrics). Throws when the host cannot be
  // reached or refuses; the message is shown as it is.
  std::function<nlohmann::ordered_json()> metrics;
  // Sends `op` ("release", "hibernate", "wake", "reap") for `env` and returns one line saying
  // what came of it, a refusal included. Throws only when the host cannot be reached.
  std::function<std::string(const std::string& op, const std::string& env)> act;
};

struct ScreenOptions {
  std::chrono::milliseconds interval{1000};  // between the starts of two metrics requests
};

// Runs the screen on the terminal until `q`; returns the exit code. Needs a terminal on stdin
// and stdout (the caller prints a plain frame otherwise).
int run_screen(const HostLink& link, const ScreenOptions& options);

}  // namespace isohost::cli::top
