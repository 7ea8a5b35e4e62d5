#include "cli/footprint_report.hpp"

#include <iostream>

#include <fmt/format.h>

namespace isohost::cli {
namespace {

// RAM in MB (10^6), VRAM in MiB, as the seed writes them.
std::string mb(std::uint64_t bytes) { return fmt::format("{:.0f} MB", bytes / 1e6); }

std::string mib(const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return "unknown";
  if (*bytes == 0) return "0";
  return fmt::format("{:.0f} MiB", *bytes / 1048576.0);
}

nlohmann::ordered_json optional_bytes(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

}  // namespace

nlohmann::ordered_json FootprintReport::to_json() const {
  auto stages_json = nlohmann::ordered_json::array();
  for (const auto& s : stages) {
    nlohmann::ordered_json stage{{"key", s.key}, {"name", s.name}};
    if (!s.skipped.empty()) {
      stage["skipped"] = s.skipped;
    } else {
      stage.update({{"rss", s.ram.rss},
                    {"pss", s.ram.pss},
                    {"private_anon", s.ram.pss_anon},
                    {"file", s.ram.pss_file},
                    {"swap", s.ram.swap},
                    {"lazy_free", s.ram.lazy_free},
                    {"vram", optional_bytes(s.vram)},
                    {"vram_method", s.vram_method},
                    {"allocator_reserved", optional_bytes(s.allocator_reserved)},
                    {"seconds", s.seconds}});
    }
    stages_json.push_back(std::move(stage));
  }
  nlohmann::ordered_json out{
      {"python", python},
      {"python_version", python_version},
      {"torch", torch.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(torch)},
      {"device", device},
      {"module_loading", module_loading},
      {"stages", std::move(stages_json)}};
  if (!workers.empty()) {
    std::uint64_t pss = 0;
    std::uint64_t rss = 0;
    std::optional<std::uint64_t> vram = 0;
    auto each = nlohmann::ordered_json::array();
    for (const auto& w : workers) {
      pss += w.ram.pss;
      rss += w.ram.rss;
      vram = (vram && w.vram) ? std::optional(*vram + *w.vram) : std::nullopt;
      each.push_back({{"pid", w.pid}, {"rss", w.ram.rss}, {"pss", w.ram.pss}, {"vram", optional_bytes(w.vram)}});
    }
    out["workers"] = {{"count", workers.size()}, {"pss_sum", pss}, {"rss_sum", rss},
                      {"vram_sum", optional_bytes(vram)}, {"each", std::move(each)}};
  }
  return out;
}

void print_table(const FootprintReport& report) {
  std::cout << fmt::format("python {} ({}), torch {}, CUDA_MODULE_LOADING={}\ndevice: {}\n\n",
                           report.python, report.python_version,
                           report.torch.empty() ? "not installed" : report.torch,
                           report.module_loading, report.device);
  std::cout << "| Stage | RAM, PSS | of which private (anonymous) | VRAM | RSS | file-backed | s |\n"
               "|---|---|---|---|---|---|---|\n";
  std::string last_skip;
  for (const auto& s : report.stages) {
    if (!s.skipped.empty()) {
      std::cout << fmt::format("| {} | skipped: {} | | | | | |\n", s.name,
                               s.skipped == last_skip ? "as above" : s.skipped);
      last_skip = s.skipped;
      continue;
    }
    std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f} |\n", s.name, mb(s.ram.pss),
                             mb(s.ram.pss_anon), mib(s.vram), mb(s.ram.rss), mb(s.ram.pss_file),
                             s.seconds);
  }
  for (const auto& s : report.stages) {
    if (s.skipped.empty() && s.ram.lazy_free > 0) {
      std::cout << fmt::format(
          "\n{}: {} of its RAM is freed lazily (the last sleep's host buffer, "
          "kept for the next one; the kernel takes it when it needs memory).\n",
          s.name, mb(s.ram.lazy_free));
    }
  }
  if (report.workers.empty()) return;
  std::cout << fmt::format("\n{} workers on the same interpreter (after import torch{}):\n\n",
                           report.workers.size(), report.device.rfind("none", 0) == 0 ? "" : " and the CUDA context");
  std::cout << "| Worker pid | RSS | PSS | VRAM |\n|---|---|---|---|\n";
  std::uint64_t pss = 0;
  std::uint64_t rss = 0;
  for (const auto& w : report.workers) {
    pss += w.ram.pss;
    rss += w.ram.rss;
    std::cout << fmt::format("| {} | {} | {} | {} |\n", w.pid, mb(w.ram.rss), mb(w.ram.pss), mib(w.vram));
  }
  std::cout << fmt::format("| sum | {} | {} | |\n", mb(rss), mb(pss));
  std::cout << fmt::format("\nPSS sum is {:.0f}% of RSS sum: the shared library pages are counted once.\n",
                           rss > 0 ? 100.0 * static_cast<double>(pss) / static_cast<double>(rss) : 0.0);
}

}  // namespace isohost::cli
