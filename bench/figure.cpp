#include "figure.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "cli/progress_line.hpp"

namespace isohost::bench {

std::optional<double> Figure::ratio() const {
  if (!limit || *limit <= 0) return std::nullopt;
  return median / *limit;
}

nlohmann::ordered_json Figure::to_json() const {
  auto optional = [](std::optional<double> v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
  };
  return {{"name", name}, {"unit", unit},   {"median", median},
          {"p99", p99},   {"limit", optional(limit)}, {"ratio", optional(ratio())}};
}

Figure summarize(std::string name, std::string unit, std::vector<double>& samples) {
  cli::note_progress("measured " + name);
  Figure f{std::move(name), std::move(unit)};
  if (samples.empty()) return f;
  std::sort(samples.begin(), samples.end());
  f.median = samples[samples.size() / 2];
  f.p99 = samples[std::min(samples.size() - 1, static_cast<std::size_t>(std::ceil(samples.size() * 0.99)) - 1)];
  return f;
}

void print_figures(const std::vector<Figure>& figures, bool json) {
  if (json) {
    auto out = nlohmann::ordered_json::array();
    for (const auto& f : figures) out.push_back(f.to_json());
    std::cout << out.dump(2) << std::endl;
    return;
  }
  std::cout << fmt::format("{:<24} {:>12} {:>12} {:<4} {:>12}  {:<28} {:>7}\n", "figure", "median",
                           "p99", "unit", "limit", "limit is", "ratio");
  for (const auto& f : figures) {
    std::cout << fmt::format("{:<24} {:>12.3f} {:>12.3f} {:<4} {:>12}  {:<28} {:>7}\n", f.name,
                             f.median, f.p99, f.unit,
                             f.limit ? fmt::format("{:.3f}", *f.limit) : "-", f.limit_name,
                             f.ratio() ? fmt::format("{:.2f}", *f.ratio()) : "-");
  }
}

}  // namespace isohost::bench
