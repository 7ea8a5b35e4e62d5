#include <filesystem>

#include "benchmarks.hpp"
#include "cli/commands.hpp"
#include "cli/default_python.hpp"
#include "cli/progress_line.hpp"

namespace isohost::cli {
namespace {

struct BenchCommandOptions {
  std::string name;
  std::string python;
  int rounds = 2000;
  bool json = false;
  bool cuda = false;
};

}  // namespace

void add_bench_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<BenchCommandOptions>();
  auto* sub = app.add_subcommand("bench", "Measure isohost beside the machine's physical limits");
  sub->add_option(
         "name", options->name,
         "rtt, start, probe, pss, hibernate, sleep, switch, transfer, admission or comfyui")
      ->required()
      ->check(CLI::IsMember({"rtt", "start", "probe", "pss", "hibernate", "sleep", "switch",
                             "transfer", "admission", "comfyui"}));
  sub->add_option("--python", options->python,
                  "interpreter for the workers (default: a python3 that has torch; for comfyui, "
                  ".venv/comfyui/bin/python of the source tree)");
  sub->add_option("--rounds", options->rounds, "repetitions")->check(CLI::Range(10, 1000000));
  sub->add_flag("--json", options->json, "print a JSON array of figures");
  sub->add_flag("--cuda", options->cuda,
                "pss: open a CUDA context in each worker after it starts (needs a GPU)");
  commands.emplace_back(sub, [options] {
    if (options->python.empty() && options->name == "comfyui") {
      options->python = (std::filesystem::path(ISOHOST_SOURCE_PYTHON_DIR).parent_path() / ".venv" /
                         "comfyui" / "bin" / "python")
                            .string();
    }
    ProgressLine progress("bench " + options->name);
    progress.show("starting");
    bench::BenchOptions bench_options{
        .python = options->python.empty() ? default_python() : options->python,
        .rounds = options->rounds,
        .cuda = options->cuda};
    const auto figures = options->name == "rtt"         ? bench::bench_rtt(bench_options)
                         : options->name == "start"     ? bench::bench_start(bench_options)
                         : options->name == "pss"       ? bench::bench_pss(bench_options)
                         : options->name == "hibernate" ? bench::bench_hibernate(bench_options)
                         : options->name == "sleep"     ? bench::bench_sleep(bench_options)
                         : options->name == "switch"    ? bench::bench_switch(bench_options)
                         : options->name == "transfer"  ? bench::bench_transfer(bench_options)
                         : options->name == "admission" ? bench::bench_admission(bench_options)
                         : options->name == "comfyui"   ? bench::bench_comfyui(bench_options)
                                                        : bench::bench_probe(bench_options);
    bench::print_figures(figures, options->json);
    return 0;
  });
}

}  // namespace isohost::cli
