#pragma once

// A benchmark figure as `isohost bench` reports it: a median and p99 beside the physical limit
// measured in the same run, and their ratio.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace isohost::bench {

struct Figure {
  std::string name;
  std::string unit;
  double median = 0;
  double p99 = 0;
  // The physical limit this figure is compared with (same unit), where one applies.
  std::optional<double> limit;
  std::string limit_name;

  [[nodiscard]] std::optional<double> ratio() const;
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

// Median and 99th percentile of samples (sorted in place).
Figure summarize(std::string name, std::string unit, std::vector<double>& samples);

void print_figures(const std::vector<Figure>& figures, bool json);

}  // namespace isohost::bench
