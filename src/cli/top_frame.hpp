#pragma once

// One frame of `isohost top`, made from the host's answers alone: pure, so it is tested without
// a terminal, and the same frame is drawn by ncurses (top_screen.cpp) or printed as plain text
// (--once, or stdout not a terminal).
//
//   Sample now{.metrics = answer["value"], .taken_at = Clock::now()};
//   Frame frame = build_frame(previous ? &*previous : nullptr, now, {.width = COLS});
//   std::cout << plain_text(frame);
//
// Every figure comes from the host's JSON as it is; a field that is missing or of the wrong
// type shows as "-" and never throws, so a host of another version still gets a frame.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace isohost::cli::top {

using Clock = std::chrono::steady_clock;

// One answer of the host.
struct Sample {
  // The value of {"op": "metrics"}: {"status": <ps's value>, "uptime_seconds", "envs", ...}.
  nlohmann::ordered_json metrics;
  // When the answer arrived here: the interval for rates when the host gives no uptime.
  Clock::time_point taken_at{};
};

// What a piece of text shows, so a screen can colour it; plain text ignores it. Each bar
// segment also has its own character, so a frame reads without colour.
enum class Style {
  normal,
  title,        // the header and the table's column names
  dim,          // legends, units, "-"
  warning,      // no GPU, a refusal, a worker that is not ready
  fixed,        // VRAM a worker holds until hibernate or reap: its CUDA context
  held,         // VRAM a worker's allocations use: hibernate or reap gives it back
  reclaimable,  // VRAM a worker's allocator caches: release gives it back
  hibernated,   // VRAM moved into a hibernated worker's RAM: off the card until it wakes
  foreign,      // VRAM held by processes isohost does not manage
  other,        // VRAM used on the card by neither (the driver, figures read at other moments)
  free,
  ram,  // a row's PSS or private bar
};

struct Span {
  std::string text;
  Style style = Style::normal;
};

using Line = std::vector<Span>;

// A worker's or a zygote's row; `env` is what the keys act on.
struct Row {
  std::string env;
  bool zygote = false;
  long pid = -1;
  Line line;
};

struct Frame {
  std::vector<Line> header;  // the host, then one line or two per device
  Line columns;              // the table's column names
  std::vector<Row> rows;     // workers, then zygotes
};

struct FrameOptions {
  int width = 100;  // the terminal's columns; every line fits in it
};

// The frame for `current`; `previous` (the answer before it, or nullptr) gives calls per second.
Frame build_frame(const Sample* previous, const Sample& current, const FrameOptions& options);

// The frame as lines of text, each ending in '\n', none wider than the width it was made for.
std::string plain_text(const Frame& frame);
// One line's text.
std::string line_text(const Line& line);

// Wraps a ps answer's value in the shape of a metrics answer, for a host that predates the
// metrics op: the frame then has no uptime, counters or admissions, and rates come from each
// worker's own call count.
nlohmann::ordered_json metrics_from_ps(const nlohmann::ordered_json& ps_value);

// One line on what `op` ("release", "hibernate", "wake", "reap") for `env` came to, from the
// host's whole answer ({"ok": ...}): the receipt in short, why it was not done, or the error.
std::string outcome_text(const std::string& op, const std::string& env,
                         const nlohmann::ordered_json& reply);

// "643M", "1.2G" (RAM, decimal as `isohost ps` writes it) and "612Mi", "1.2Gi" (VRAM).
std::string ram_text(double bytes);
std::string vram_text(double bytes);
// "0.4s", "12s", "5m02s", "3h07m", "2d04h".
std::string duration_text(double seconds);

}  // namespace isohost::cli::top
