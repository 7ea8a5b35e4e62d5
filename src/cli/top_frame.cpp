#include "cli/top_frame.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace isohost::cli::top {
namespace {

using json = nlohmann::ordered_json;

// The column widths of the table; the bars and the last column take what the terminal has left.
constexpr int kEnvWidth = 14;
constexpr int kPidWidth = 8;
constexpr int kGenWidth = 4;
constexpr int kStateWidth = 11;
constexpr int kNumberWidth = 7;  // PSS, PRIVATE, VRAM
constexpr int kRateWidth = 8;
constexpr int kIdleWidth = 7;
constexpr int kAdmissionMinWidth = 16;
constexpr int kRowBarMax = 10;  // cells; a row's bars compare rows, they need not be long
constexpr int kRowBarMin = 3;   // narrower than this a bar says nothing: it is left out
constexpr int kDeviceBarMin = 10;

// A member of an object, or null: the host's JSON is read without ever throwing.
const json& at(const json& object, const char* key) {
  static const json null;
  if (!object.is_object()) return null;
  const auto it = object.find(key);
  return it == object.end() ? null : *it;
}

// A member that should be an array, or an empty one: never a copy, so pointers into it hold.
const json& list(const json& object, const char* key) {
  static const json empty = json::array();
  const auto& value = at(object, key);
  return value.is_array() ? value : empty;
}

std::optional<double> number(const json& value) {
  if (value.is_number()) return value.get<double>();
  return std::nullopt;
}

std::string text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer() || value.is_number_unsigned()) return value.dump();
  if (value.is_number_float()) return fmt::format("{:g}", value.get<double>());
  return "-";
}

// Code points, which is what the terminal shows for the ASCII and names a frame holds.
int display_width(const std::string& s) {
  return static_cast<int>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The first `width` code points of `s`.
std::string clip(const std::string& s, int width) {
  int seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((s[i] & 0xC0) != 0x80 && seen++ == width) return s.substr(0, i);
  }
  return s;
}

std::string pad_right(const std::string& s, int width) {
  const auto clipped = clip(s, width);
  return clipped +
         std::string(static_cast<std::size_t>(std::max(0, width - display_width(clipped))), ' ');
}

std::string pad_left(const std::string& s, int width) {
  const auto clipped = clip(s, width);
  return std::string(static_cast<std::size_t>(std::max(0, width - display_width(clipped))), ' ') +
         clipped;
}

// Cuts a line at `width` code points, span by span, so no line is wider than the terminal.
Line clip_line(Line line, int width) {
  Line out;
  int left = std::max(0, width);
  for (auto& span : line) {
    if (left == 0) break;
    span.text = clip(span.text, left);
    left -= display_width(span.text);
    if (!span.text.empty()) out.push_back(std::move(span));
  }
  return out;
}

std::string scaled(double bytes, double unit, const char* suffix) {
  static constexpr const char* kPrefixes[] = {"", "K", "M", "G", "T", "P"};
  std::size_t i = 0;
  double value = std::max(0.0, bytes);
  while (value >= unit && i + 1 < std::size(kPrefixes)) {
    value /= unit;
    ++i;
  }
  // Three significant figures at most: "643M", "12.3G", "1.21T".
  const char* format = i == 0 || value >= 100 ? "{:.0f}{}{}"
                       : value >= 10          ? "{:.1f}{}{}"
                                              : "{:.2f}{}{}";
  return fmt::format(fmt::runtime(format), value, kPrefixes[i], i == 0 ? "" : suffix);
}

std::string ram_or_dash(const json& bytes) {
  const auto v = number(bytes);
  return v ? ram_text(*v) : "-";
}

// One segment of a device bar: what it counts, its character and its style.
struct Segment {
  const char* name;
  char glyph;
  Style style;
  double bytes;
};

// Cells per segment over `cells`: proportional, at least one for any segment that holds bytes
// (a 612 MiB context on a 141 GiB card would otherwise not show at all); `free` takes the rest.
std::vector<int> segment_cells(const std::vector<Segment>& segments, double total, int cells) {
  std::vector<int> out(segments.size(), 0);
  if (total <= 0) return out;
  int used = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].style == Style::free || segments[i].bytes <= 0) continue;
    const int want = std::max(1, static_cast<int>(std::lround(segments[i].bytes / total * cells)));
    out[i] = std::min(want, cells - used);
    used += out[i];
  }
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].style == Style::free) out[i] = cells - used;
  }
  return out;
}

Line bar_spans(const std::vector<Segment>& segments, double total, int cells) {
  Line line{{"[", Style::dim}};
  const auto widths = segment_cells(segments, total, cells);
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (widths[i] > 0)
      line.push_back(
          {std::string(static_cast<std::size_t>(widths[i]), segments[i].glyph), segments[i].style});
  }
  if (total <= 0) line.push_back({std::string(static_cast<std::size_t>(cells), ' '), Style::dim});
  line.push_back({"]", Style::dim});
  return line;
}

void append(Line& line, Line more) {
  for (auto& span : more) line.push_back(std::move(span));
}

// The VRAM hibernated workers moved off `device` into their RAM. Workers without a "device"
// field are booked on device 0, as admission books them.
double hibernated_on(const json& status, double device) {
  double bytes = 0;
  for (const auto& w : list(status, "workers")) {
    const auto moved = number(at(at(w, "hibernation"), "vram_moved"));
    if (moved && number(at(w, "device")).value_or(0) == device) bytes += *moved;
  }
  return bytes;
}

std::vector<Line> device_lines(const json& status, const json& device, int width) {
  const double total = number(at(device, "total")).value_or(0);
  const double used = number(at(device, "used")).value_or(0);
  const double workers = number(at(device, "workers_vram")).value_or(0);
  const double foreign = number(at(device, "foreign")).value_or(0);
  const double hibernated = hibernated_on(status, number(at(device, "index")).value_or(0));
  const std::vector<Segment> segments{
      {"fixed", '#', Style::fixed, number(at(device, "fixed")).value_or(0)},
      {"held", '=', Style::held, number(at(device, "held")).value_or(0)},
      {"reclaimable", '~', Style::reclaimable, number(at(device, "reclaimable")).value_or(0)},
      {"foreign", 'X', Style::foreign, foreign},
      {"other", '+', Style::other, std::max(0.0, used - workers - foreign)},
      // Not on the card: drawn over free space, as what a wake would take back.
      {"hibernated", ':', Style::hibernated, std::min(hibernated, std::max(0.0, total - used))},
      {"free", '.', Style::free, std::max(0.0, total - used)},
  };
  const std::string label =
      fmt::format("GPU {} {} ", text(at(device, "index")), clip(text(at(device, "name")), 24));
  const std::string figures = fmt::format(" {} of {} used", vram_text(used), vram_text(total));
  const int cells =
      std::max(kDeviceBarMin, width - display_width(label) - display_width(figures) - 2);
  Line bar{{label, Style::title}};
  append(bar, bar_spans(segments, total, cells));
  bar.push_back({figures, Style::normal});
  // The legend: each segment's character and bytes, so the bar reads without colour; it wraps
  // by item rather than lose the last ones on a narrow terminal.
  std::vector<Line> items;
  for (const auto& s : segments) {
    // The bar draws hibernated bytes only where free space can show them; the legend counts all.
    const double bytes = s.style == Style::hibernated ? hibernated : s.bytes;
    if (bytes <= 0 && (s.style == Style::other || s.style == Style::hibernated)) continue;
    items.push_back({{fmt::format("{} ", s.glyph), s.style},
                     {fmt::format("{} {}  ", s.name, vram_text(bytes)), Style::dim}});
  }
  if (const auto grantable = number(at(device, "grantable"))) {
    items.push_back({{fmt::format("grantable {}", vram_text(*grantable)), Style::dim}});
  }
  std::vector<Line> out{bar, {{"  ", Style::normal}}};
  for (auto& item : items) {
    if (out.back().size() > 1 && display_width(line_text(out.back()) + line_text(item)) > width) {
      out.push_back({{"  ", Style::normal}});
    }
    append(out.back(), std::move(item));
  }
  for (auto& line : out) {
    auto& last = line.back().text;
    last.erase(last.find_last_not_of(' ') + 1);
  }
  return out;
}

Line host_line(const json& metrics, const json& status) {
  const auto& host = at(status, "host");
  Line line{{"isohost top", Style::title},
            {fmt::format("  host pid {}", text(at(host, "pid"))), Style::normal}};
  if (const auto up = number(at(metrics, "uptime_seconds"))) {
    line.push_back({"  up " + duration_text(*up), Style::normal});
  }
  const auto& system = at(status, "system_memory");
  const auto total = number(at(system, "total"));
  const auto available = number(at(system, "available"));
  if (total && available) {
    line.push_back(
        {fmt::format("  RAM {} used of {}", ram_text(*total - *available), ram_text(*total)),
         Style::normal});
  } else {
    line.push_back({"  RAM -", Style::dim});
  }
  if (const auto pss = number(at(host, "pss"))) {
    line.push_back({"  host PSS " + ram_text(*pss), Style::dim});
  }
  if (const auto age = number(at(metrics, "sample_age_seconds"))) {
    line.push_back({"  sampled " + duration_text(*age) + " ago", Style::dim});
  }
  return line;
}

// The seconds between two answers: the host's uptime when both give it (the host's own clock,
// unaffected by how long the answers took to arrive), else when they arrived here.
std::optional<double> interval(const Sample& previous, const Sample& current) {
  const auto before = number(at(previous.metrics, "uptime_seconds"));
  const auto now = number(at(current.metrics, "uptime_seconds"));
  const double seconds =
      before && now ? *now - *before
                    : std::chrono::duration<double>(current.taken_at - previous.taken_at).count();
  if (seconds <= 0) return std::nullopt;
  return seconds;
}

const json* find_worker(const json& status, const json& pid) {
  for (const auto& w : list(status, "workers")) {
    if (at(w, "pid") == pid) return &w;
  }
  return nullptr;
}

// Calls per second: the environment's counter when the host keeps one (it counts every
// worker the environment had), else the worker's own count while its pid stays the same.
std::string call_rate(const Sample* previous, const Sample& current, const json& worker) {
  if (previous == nullptr) return "-";
  const auto seconds = interval(*previous, current);
  if (!seconds) return "-";
  const std::string env = text(at(worker, "env"));
  const char* envs = "envs";
  auto before = number(at(at(at(previous->metrics, envs), env.c_str()), "calls"));
  auto now = number(at(at(at(current.metrics, envs), env.c_str()), "calls"));
  if (!before || !now) {
    const json* earlier = find_worker(at(previous->metrics, "status"), at(worker, "pid"));
    if (earlier == nullptr) return "-";
    before = number(at(*earlier, "calls"));
    now = number(at(worker, "calls"));
  }
  if (!before || !now || *now < *before) return "-";
  return fmt::format("{:.1f}", (*now - *before) / *seconds);
}

std::string admission_text(const json& admission) {
  if (!admission.is_object()) return "-";
  std::string out = text(at(admission, "action"));
  if (at(admission, "for").is_string()) out += " for '" + text(at(admission, "for")) + "'";
  if (const auto ago = number(at(admission, "seconds_ago")))
    out += " " + duration_text(*ago) + " ago";
  return out;
}

Style state_style(const std::string& state) {
  if (state == "ready" || state == "busy") return Style::normal;
  if (state == "hibernated" || state == "hibernating" || state == "waking" || state == "asleep")
    return Style::hibernated;
  return Style::warning;
}

// How the table shares the width: the fixed columns, three bars, and the admission column.
struct Layout {
  int bar = 0;        // cells per row bar; 0 leaves them out
  int admission = 0;  // the last column
};

Layout layout_for(int width) {
  const int fixed = kEnvWidth + kPidWidth + kGenWidth + kStateWidth + 3 * kNumberWidth +
                    kRateWidth + kIdleWidth + 9;  // a space before each column but the first
  const int spare = width - fixed - kAdmissionMinWidth;
  Layout out;
  out.bar = std::clamp(spare / 3 - 3, 0, kRowBarMax);  // each bar: a space and two brackets
  if (out.bar < kRowBarMin) out.bar = 0;
  out.admission =
      std::max(kAdmissionMinWidth, width - fixed - (out.bar > 0 ? 3 * (out.bar + 3) : 0));
  return out;
}

// A row's bar: `value` of `scale`, in `cells`; empty when either is unknown.
Line row_bar(std::optional<double> value, double scale, int cells, Style style) {
  if (cells == 0) return {};
  const int filled = value && scale > 0
                         ? std::clamp(static_cast<int>(std::lround(*value / scale * cells)),
                                      *value > 0 ? 1 : 0, cells)
                         : 0;
  return {{" [", Style::dim},
          {std::string(static_cast<std::size_t>(filled), '|'), style},
          {std::string(static_cast<std::size_t>(cells - filled), ' '), Style::dim},
          {"]", Style::dim}};
}

// A number column and its bar.
void add_figure(Line& line, const std::string& figure, std::optional<double> value, double scale,
                int cells, Style style) {
  line.push_back(
      {" " + pad_left(figure, kNumberWidth), figure == "-" ? Style::dim : Style::normal});
  append(line, row_bar(value, scale, cells, style));
}

// The largest value of `key` over the workers and zygotes, so bars compare rows.
double largest(const json& status, std::initializer_list<const char*> keys) {
  double out = 0;
  for (const char* kind : {"workers", "zygotes"}) {
    for (const auto& row : list(status, kind)) {
      for (const char* key : keys) out = std::max(out, number(at(row, key)).value_or(0));
    }
  }
  return out;
}

struct Scales {
  double ram = 0;  // PSS and private share one scale: private is part of PSS
  double vram = 0;
};

Row worker_row(const Sample* previous, const Sample& current, const json& w, const Scales& scales,
               const Layout& layout) {
  const std::string env = text(at(w, "env"));
  const std::string state = text(at(w, "state"));
  Line line{{pad_right(env, kEnvWidth), Style::normal},
            {" " + pad_left(text(at(w, "pid")), kPidWidth), Style::normal},
            {" " + pad_left(text(at(w, "generation")), kGenWidth), Style::normal},
            {" " + pad_right(state, kStateWidth), state_style(state)}};
  add_figure(line, ram_or_dash(at(w, "pss")), number(at(w, "pss")), scales.ram, layout.bar,
             Style::ram);
  add_figure(line, ram_or_dash(at(w, "private")), number(at(w, "private")), scales.ram, layout.bar,
             Style::ram);
  // A VRAM figure NVML could not give is unknown ("?"), as `isohost ps` writes it.
  const bool measured = at(w, "vram_method").is_string();
  const std::string vram = number(at(w, "vram")) ? vram_text(*number(at(w, "vram")))
                           : measured            ? "?"
                                                 : "-";
  add_figure(line, vram, number(at(w, "vram")), scales.vram, layout.bar, Style::fixed);
  line.push_back({" " + pad_left(call_rate(previous, current, w), kRateWidth), Style::normal});
  const auto idle = number(at(w, "idle_seconds"));
  const bool resting = state != "busy" && state != "starting";
  line.push_back(
      {" " + pad_left(idle && resting ? duration_text(*idle) : "-", kIdleWidth), Style::normal});
  const auto& admission = at(at(at(current.metrics, "envs"), env.c_str()), "last_admission");
  line.push_back({" " + clip(admission_text(admission), layout.admission), Style::normal});
  const auto pid = number(at(w, "pid"));
  return {.env = env,
          .zygote = false,
          .pid = pid ? static_cast<long>(*pid) : -1,
          .line = std::move(line)};
}

Row zygote_row(const json& z, const Scales& scales, const Layout& layout) {
  const std::string env = text(at(z, "env"));
  const std::string state = text(at(z, "state"));
  Line line{{pad_right(env + " (zygote)", kEnvWidth), Style::dim},
            {" " + pad_left(text(at(z, "pid")), kPidWidth), Style::normal},
            {" " + pad_left("-", kGenWidth), Style::dim},
            {" " + pad_right(state, kStateWidth), state_style(state)}};
  add_figure(line, ram_or_dash(at(z, "pss")), number(at(z, "pss")), scales.ram, layout.bar,
             Style::ram);
  add_figure(line, ram_or_dash(at(z, "private")), number(at(z, "private")), scales.ram, layout.bar,
             Style::ram);
  add_figure(line, "-", std::nullopt, scales.vram, layout.bar,
             Style::fixed);  // a zygote opens no context
  line.push_back({" " + pad_left("-", kRateWidth) + " " + pad_left("-", kIdleWidth), Style::dim});
  const bool refused = at(z, "refusal").is_string();
  const std::string note =
      refused ? "refused: " + text(at(z, "refusal")) : "zygote, " + text(at(z, "forks")) + " forks";
  line.push_back({" " + clip(note, layout.admission), refused ? Style::warning : Style::dim});
  const auto pid = number(at(z, "pid"));
  return {.env = env,
          .zygote = true,
          .pid = pid ? static_cast<long>(*pid) : -1,
          .line = std::move(line)};
}

Line column_names(const Layout& layout) {
  const auto bar_gap = [&](const std::string& name) {
    return " " + pad_left(name, kNumberWidth) +
           (layout.bar > 0 ? std::string(static_cast<std::size_t>(layout.bar + 3), ' ') : "");
  };
  return {{pad_right("ENV", kEnvWidth) + " " + pad_left("PID", kPidWidth) + " " +
               pad_left("GEN", kGenWidth) + " " + pad_right("STATE", kStateWidth) + bar_gap("PSS") +
               bar_gap("PRIVATE") + bar_gap("VRAM") + " " + pad_left("CALLS/S", kRateWidth) + " " +
               pad_left("IDLE", kIdleWidth) + " LAST ADMISSION",
           Style::title}};
}

}  // namespace

std::string ram_text(double bytes) { return scaled(bytes, 1000.0, ""); }

std::string vram_text(double bytes) { return scaled(bytes, 1024.0, "i"); }

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 0.1) return fmt::format("{:.0f}ms", seconds * 1000);
  if (seconds < 10) return fmt::format("{:.1f}s", seconds);
  const auto s = static_cast<long long>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

Frame build_frame(const Sample* previous, const Sample& current, const FrameOptions& options) {
  const int width = std::max(1, options.width);
  const auto& status = at(current.metrics, "status");
  Frame frame;
  frame.header.push_back(host_line(current.metrics, status));
  const auto& devices = list(status, "devices");
  for (const auto& device : devices) {
    for (auto& line : device_lines(status, device, width)) frame.header.push_back(std::move(line));
  }
  if (devices.empty()) {
    // Older hosts say why under "gpu", newer ones under "gpu_unavailable_reason".
    const auto& reason =
        at(status, "gpu").is_string() ? at(status, "gpu") : at(status, "gpu_unavailable_reason");
    frame.header.push_back(
        {{"GPU: none (" + (reason.is_string() ? text(reason) : "the host gave no device") + ")",
          Style::warning}});
  }
  const auto layout = layout_for(width);
  const Scales scales{.ram = largest(status, {"pss", "private"}),
                      .vram = largest(status, {"vram"})};
  frame.columns = column_names(layout);
  for (const auto& w : list(status, "workers")) {
    frame.rows.push_back(worker_row(previous, current, w, scales, layout));
  }
  for (const auto& z : list(status, "zygotes")) {
    frame.rows.push_back(zygote_row(z, scales, layout));
  }
  for (auto& line : frame.header) line = clip_line(std::move(line), width);
  frame.columns = clip_line(std::move(frame.columns), width);
  for (auto& row : frame.rows) row.line = clip_line(std::move(row.line), width);
  return frame;
}

std::string line_text(const Line& line) {
  std::string out;
  for (const auto& span : line) out += span.text;
  return out;
}

std::string plain_text(const Frame& frame) {
  std::string out;
  for (const auto& line : frame.header) out += line_text(line) + "\n";
  out += "\n" + line_text(frame.columns) + "\n";
  for (const auto& row : frame.rows) out += line_text(row.line) + "\n";
  if (frame.rows.empty()) out += "(no workers running)\n";
  return out;
}

std::string outcome_text(const std::string& op, const std::string& env,
                         const nlohmann::ordered_json& reply) {
  const std::string what = op + " '" + env + "'";
  if (at(reply, "ok") != true) {
    const auto& error = at(reply, "error");
    return what + " failed: " + text(at(error, "kind")) + ": " + text(at(error, "message"));
  }
  const auto& value = at(reply, "value");
  // What did not happen says so under its key with false, and why.
  for (const char* key : {"released", "reaped", "hibernated", "asleep", "woken"}) {
    if (at(value, key) == false) return what + ": not done: " + text(at(value, "reason"));
  }
  const auto seconds = number(at(value, "seconds"));
  std::string out = what + ": done" + (seconds ? " in " + duration_text(*seconds) : "");
  const auto change = [&](const char* name, const char* before, const char* after, auto unit) {
    const auto a = number(at(value, before));
    const auto b = number(at(value, after));
    if (a && b) out += fmt::format(", {} {} -> {}", name, unit(*a), unit(*b));
  };
  if (op == "release") {
    change("RSS", "rss_before", "rss_after", ram_text);
    change("VRAM cache", "reserved_before", "reserved_after", vram_text);
  } else if (op == "reap") {
    out += fmt::format(", pid {} (generation {}) ended", text(at(value, "pid")),
                       text(at(value, "generation")));
  } else if (const auto moved = number(at(value, op == "wake" ? "vram_restored" : "vram_moved"))) {
    out += fmt::format(", {} {}", vram_text(*moved),
                       op == "wake" ? "back on the card" : "moved into its RAM");
  }
  return out;
}

nlohmann::ordered_json metrics_from_ps(const nlohmann::ordered_json& ps_value) {
  return {{"status", ps_value}};
}

}  // namespace isohost::cli::top
