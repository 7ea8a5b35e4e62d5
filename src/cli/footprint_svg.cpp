#include <algorithm>

#include <fmt/format.h>

#include "cli/footprint_report.hpp"

namespace isohost::cli {
namespace {

struct Segment {
  const char* label;
  const char* color;
  double bytes;
  bool vram;
};

constexpr double kLabelWidth = 230;
constexpr double kBarWidth = 640;
constexpr double kRowHeight = 34;
constexpr double kBarHeight = 22;

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<Segment> segments(const StageFigures& s) {
  const double vram = s.vram ? static_cast<double>(*s.vram) : 0;
  const double allocator = std::min(vram, static_cast<double>(s.allocator_reserved.value_or(0)));
  return {{"private anonymous", "#4e79a7", static_cast<double>(s.ram.pss_anon), false},
          {"shared file-backed", "#a0cbe8", static_cast<double>(s.ram.pss_file), false},
          {"VRAM context", "#e15759", vram - allocator, true},
          {"VRAM allocator", "#ff9d9a", allocator, true}};
}

std::string amount(const Segment& seg) {
  return seg.vram ? fmt::format("{:.0f} MiB", seg.bytes / 1048576.0) : fmt::format("{:.0f} MB", seg.bytes / 1e6);
}

std::string chart(const FootprintReport& r, double top, double scale) {
  std::string out = fmt::format(
      R"(<text x="10" y="{}" font-size="15" font-weight="bold">{} (CUDA_MODULE_LOADING={}), torch {}; device: {}</text>)"
      "\n",
      top + 18, escape(r.python), r.module_loading, escape(r.torch.empty() ? "none" : r.torch), escape(r.device));
  double y = top + 32;
  for (const auto& s : r.stages) {
    out += fmt::format(R"(<text x="10" y="{}" font-size="13">{}</text>)" "\n", y + 16, escape(s.name));
    if (!s.skipped.empty()) {
      out += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#777">skipped: {}</text>)" "\n",
                         kLabelWidth, y + 16, escape(s.skipped));
      y += kRowHeight;
      continue;
    }
    double x = kLabelWidth;
    for (const auto& seg : segments(s)) {
      const double w = seg.bytes * scale;
      if (w <= 0) continue;
      out += fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{}: {}</title></rect>)" "\n",
                         x, y, w, kBarHeight, seg.color, seg.label, amount(seg));
      if (w > 56) {
        out += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" fill="#fff">{}</text>)" "\n", x + 4, y + 15, amount(seg));
      }
      x += w;
    }
    y += kRowHeight;
  }
  return out;
}

}  // namespace

std::string render_svg(const std::vector<FootprintReport>& reports) {
  double largest = 1;
  std::size_t rows = 0;
  for (const auto& r : reports) {
    rows += r.stages.size();
    for (const auto& s : r.stages) {
      double total = 0;
      for (const auto& seg : segments(s)) total += seg.bytes;
      largest = std::max(largest, total);
    }
  }
  const double scale = kBarWidth / largest;
  const double legend_height = 40;
  const double height = legend_height + static_cast<double>(reports.size()) * 40 + static_cast<double>(rows) * kRowHeight + 10;
  std::string out = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">)" "\n"
      R"(<rect width="100%" height="100%" fill="#fff"/>)" "\n",
      kLabelWidth + kBarWidth + 20, height);
  double x = 10;
  for (const auto& seg : segments(StageFigures{})) {
    out += fmt::format(R"(<rect x="{}" y="12" width="14" height="14" fill="{}"/><text x="{}" y="24" font-size="12">{} ({})</text>)" "\n",
                       x, seg.color, x + 18, seg.label, seg.vram ? "MiB" : "MB");
    x += 200;
  }
  double top = legend_height;
  for (const auto& r : reports) {
    out += chart(r, top, scale);
    top += 40 + static_cast<double>(r.stages.size()) * kRowHeight;
  }
  return out + "</svg>\n";
}

}  // namespace isohost::cli
