#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "python_samples.hpp"
#include "worker/runtime_location.hpp"

namespace isohost::bench {
namespace {

Figure figure_of(const nlohmann::ordered_json& samples, const std::string& key) {
  auto values = samples.at(key).get<std::vector<double>>();
  return summarize("comfyui." + key, "ms", values);
}

// The target an isolated figure is held to, as a limit beside it.
Figure with_limit(Figure figure, double limit, std::string limit_name) {
  figure.limit = limit;
  figure.limit_name = std::move(limit_name);
  return figure;
}

}  // namespace

std::vector<Figure> bench_comfyui(const BenchOptions& options) {
  // $ISOHOST_SOURCE_DIR where the binary runs away from its build tree (the GPU machine).
  const char* moved = std::getenv("ISOHOST_SOURCE_DIR");
  const std::filesystem::path source =
      moved != nullptr && *moved != '\0'
          ? std::filesystem::path(moved)
          : std::filesystem::path(ISOHOST_SOURCE_PYTHON_DIR).parent_path();
  const auto script = source / "bench" / "comfyui" / "bench_comfyui.py";
  const auto samples =
      python_samples("ISOHOST_BUILD_PYTHON=" + shell_quote(worker::find_worker_runtime()) + " " +
                         shell_quote(options.python) + " " + shell_quote(script.string()) + " " +
                         std::to_string(std::max(10, options.rounds / 40)),
                     "is " + options.python + " ComfyUI's environment (scripts/setup --comfyui)?");
  std::vector<Figure> figures{figure_of(samples, "raw_trip"), figure_of(samples, "copy_12MiB")};
  const double copy = figures.back().median;
  double isohost_invert = 0;  // the peers' node: 1 - image
  for (const char* node : {"Invert", "Blur"}) {
    auto in_process = figure_of(samples, std::string("node_in_process.") + node);
    figures.push_back(in_process);
    figures.push_back(with_limit(figure_of(samples, std::string("node_isolated.") + node),
                                 in_process.median + 1.0 + 2 * copy,
                                 "in process + 1 ms + 2 copies"));
    if (std::string(node) == "Invert") isohost_invert = figures.back().median;
  }
  // The peers, measured in the same run where their environments exist: each beside isohost's
  // isolated call of the same node (1 - image).
  for (const auto& item : samples.items()) {
    const std::string& key = item.key();
    if (key.rfind("peer_", 0) != 0) continue;
    auto figure = figure_of(samples, key);
    figures.push_back(key.rfind("peer_isolated.", 0) == 0
                          ? with_limit(std::move(figure), isohost_invert, "isohost, the same node")
                          : figure);
  }
  auto workflow = figure_of(samples, "workflow10_in_process");
  figures.push_back(workflow);
  figures.push_back(with_limit(figure_of(samples, "workflow10_isolated"), workflow.median * 1.05,
                               "in process + 5%"));
  // The same with every output sent back to ComfyUI after each node (keep_outputs_in_workers
  // false), as before outputs stayed in the workers: what keeping them saves.
  if (samples.contains("workflow10_isolated_crossing")) {
    figures.push_back(with_limit(figure_of(samples, "workflow10_isolated_crossing"),
                                 workflow.median * 1.05, "in process + 5%"));
  }
  return figures;
}

}  // namespace isohost::bench
