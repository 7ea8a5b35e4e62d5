#pragma once

// What `isohost footprint` measured, and the ways it is shown: the seed's table, JSON, SVG.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "probe/smaps.hpp"

namespace isohost::cli {

struct StageFigures {
  std::string key;   // bare, numpy, torch, cuda, tensor, release
  std::string name;  // the seed's words: "after import torch"
  // Why the stage was not measured ("no NVIDIA driver (...)", "No module named 'numpy'");
  // empty when it was.
  std::string skipped;
  probe::MemoryFootprint ram;
  std::optional<std::uint64_t> vram;  // nullopt: unknown
  std::string vram_method;
  // torch's caching allocator, from the worker's report, when CUDA is initialised.
  std::optional<std::uint64_t> allocator_reserved;
  double seconds = 0;
};

struct WorkerFigures {
  int pid = 0;
  probe::MemoryFootprint ram;
  std::optional<std::uint64_t> vram;
};

struct FootprintReport {
  std::string python;          // the interpreter as given
  std::string python_version;  // from the worker's hello
  std::string torch;           // version, or empty
  std::string device;          // "NVIDIA H200 (driver 580.159.04)" or "none: <why>"
  std::string module_loading;  // LAZY or EAGER
  std::vector<StageFigures> stages;
  std::vector<WorkerFigures> workers;  // with --workers N

  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

void print_table(const FootprintReport& report);
// One chart per report, a stacked bar per stage: private anonymous, shared file-backed (MB),
// VRAM context, VRAM allocator (MiB).
std::string render_svg(const std::vector<FootprintReport>& reports);

}  // namespace isohost::cli
