// `isohost footprint`: the seed's measurement, made by a host from outside a real worker.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/default_python.hpp"
#include "cli/footprint_report.hpp"
#include "cli/progress_line.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/pool.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct FootprintOptions {
  std::string python;
  std::string stages = "bare,numpy,torch,cuda,tensor,asleep,hibernated,woken,release";
  std::string module_loading = "lazy";
  int workers = 0;
  bool json = false;
  std::string svg;
};

struct StageSpec {
  const char* key;
  const char* name;
};

constexpr StageSpec kStages[] = {
    {"bare", "bare interpreter"},
    {"numpy", "after import numpy"},
    {"torch", "after import torch"},
    {"cuda", "after the CUDA context"},
    {"tensor", "holding a 1 GiB tensor"},
    {"asleep", "asleep (its tensors in RAM)"},
    {"hibernated", "hibernated (GPU state in RAM)"},
    {"woken", "woken (GPU state restored)"},
    {"release", "after del and empty_cache()"},
};

constexpr const char* kEnv = "footprint";
constexpr const char* kStagesModule = "isohost_worker.stages";

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

pool::Config footprint_config(const std::string& python, const std::string& module_loading,
                              int workers) {
  pool::Config config;
  config.source = "(isohost footprint)";
  config.host.idle_reap = std::chrono::milliseconds(0);
  auto add = [&](const std::string& name) {
    config.environments[name] = pool::EnvironmentConfig{
        .name = name, .python = python, .env = {{"CUDA_MODULE_LOADING", module_loading}}};
  };
  if (workers == 0) add(kEnv);
  for (int i = 1; i <= workers; ++i) add("w" + std::to_string(i));
  return config;
}

// Runs the selected stages in one worker, measuring it from outside after each.
class StageRunner {
 public:
  StageRunner(const std::string& python, const std::string& mode, pool::MemorySampler& sampler)
      : pool_(footprint_config(python, mode, 0), {.sweep_orphans = false}), sampler_(sampler) {}

  void run(const std::vector<std::string>& selected, FootprintReport& report) {
    pid_ = pool_.call(kEnv, "os:getpid").get().get<int>();
    const auto status = pool_.status().get().workers.at(0);
    report.python_version = status.hello.value("python", "");
    const double startup =
        std::chrono::duration<double>(status.ready_at.value_or(Clock::now()) - status.spawned_at).count();
    for (const auto& spec : kStages) {
      const std::string key = spec.key;
      const bool wanted = std::find(selected.begin(), selected.end(), key) != selected.end();
      // A later stage needs the earlier ones' state: run them, report only what was asked.
      const bool needed = wanted || needed_by_later(key, selected);
      if (!needed) continue;
      note_progress(fmt::format("stage {} ({})", key, spec.name));
      StageFigures figures{.key = key, .name = spec.name};
      if (key == "bare") {
        figures.seconds = startup;
      } else {
        figures.skipped = step(key, figures.seconds, report);
      }
      if (figures.skipped.empty()) measure(figures);
      if (wanted) report.stages.push_back(std::move(figures));
    }
  }

 private:
  static bool needed_by_later(const std::string& key, const std::vector<std::string>& selected) {
    const auto chosen = [&](const char* k) { return std::find(selected.begin(), selected.end(), k) != selected.end(); };
    // Sleep and hibernation stages need the tensor before them; release does not need them.
    const bool resting = chosen("asleep") || chosen("hibernated") || chosen("woken");
    if (key == "hibernated" && chosen("woken") && !chosen("asleep")) return true;
    if ((key == "torch" || key == "cuda" || key == "tensor") && resting) return true;
    const std::vector<std::string> chain{"torch", "cuda", "tensor", "release"};
    auto pos = std::find(chain.begin(), chain.end(), key);
    if (pos == chain.end()) return false;
    for (auto later = pos + 1; later != chain.end(); ++later) {
      if (std::find(selected.begin(), selected.end(), *later) != selected.end()) return true;
    }
    return false;
  }

  // Takes the worker through one stage; returns why it was skipped, or "".
  std::string step(const std::string& key, double& seconds, FootprintReport& report) {
    const bool resting = key == "asleep" || key == "hibernated" || key == "woken";
    if ((key == "cuda" || key == "tensor" || key == "release" || resting) && !gpu_skip_.empty()) {
      return gpu_skip_;
    }
    if (resting) return resting_step(key, seconds);
    if (key == "cuda") {
      if (!torch_missing_.empty()) return gpu_skip_ = torch_missing_;
      if (!sampler_.has_gpu()) return gpu_skip_ = sampler_.gpu_unavailable_reason();
      const auto status = call("cuda_status", {}, seconds);
      if (!status.value("available", false)) {
        return gpu_skip_ = "torch " + status.value("torch", std::string()) + " cannot use CUDA here";
      }
    }
    try {
      if (key == "numpy" || key == "torch") {
        const auto answer = call("import_module", {key}, seconds);
        if (key == "torch")
          report.torch = answer.value("version", nlohmann::ordered_json()).is_string()
                             ? answer["version"].get<std::string>()
                             : "";
      } else if (key == "cuda") {
        call("open_cuda_context", {}, seconds);
      } else if (key == "tensor") {
        call("hold_tensor", {std::uint64_t{1} << 30}, seconds);
      } else if (key == "release") {
        call("drop_tensors", {}, seconds);
      }
    } catch (const isohost::Error& e) {
      const std::string message = e.detail().is_object() ? e.detail().value("message", e.what()) : e.what();
      if (key == "torch") torch_missing_ = "torch: " + message;
      return message;
    }
    return "";
  }

  // Puts the worker to sleep, hibernates it (from asleep, the driver moves only what is left)
  // or wakes it, through the pool; returns why it did not happen, or "".
  std::string resting_step(const std::string& key, double& seconds) {
    if (key == "woken" && !resting_) return "the worker was neither asleep nor hibernated";
    const auto kind = key == "asleep"       ? pool::Request::Kind::sleep
                      : key == "hibernated" ? pool::Request::Kind::hibernate
                                            : pool::Request::Kind::wake;
    const auto start = Clock::now();
    const auto answer = pool_.submit({kind, kEnv}).get();
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const bool done = answer.value(key, false);
    resting_ = key == "woken" ? !done && resting_ : done || resting_;
    return done ? "" : answer.value("reason", std::string("not done"));
  }

  nlohmann::ordered_json call(const std::string& function, nlohmann::ordered_json args,
                              double& seconds) {
    if (args.is_null()) args = nlohmann::ordered_json::array();
    const auto start = Clock::now();
    auto answer = pool_.call(kEnv, std::string(kStagesModule) + ":" + function, std::move(args)).get();
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return answer;
  }

  void measure(StageFigures& figures) {
    const auto report = pool_.submit({pool::Request::Kind::query, kEnv, {{"op", "memory"}}}).get();
    // A hibernated worker's context is in its RAM: NVML must not be asked to find it on the card.
    const bool cuda = report.value("cuda_initialized", false) && !report.value("hibernated", false);
    if (report.contains("allocator") && report["allocator"].is_object()) {
      figures.allocator_reserved = report["allocator"].value("reserved", std::uint64_t{0});
    }
    const auto sample = sampler_.sample({{pid_, cuda}}).at(0);
    if (sample.ram) figures.ram = *sample.ram;
    figures.vram = sample.vram;
    figures.vram_method = sample.vram_method;
  }

  pool::Pool pool_;
  pool::MemorySampler& sampler_;
  int pid_ = -1;
  std::string torch_missing_;
  std::string gpu_skip_;
  bool resting_ = false;  // asleep or hibernated, so that `woken` has something to do
};

// N workers on one interpreter, each importing torch (and opening a context where a GPU is).
void measure_workers(const std::string& python, const std::string& mode, int count,
                     pool::MemorySampler& sampler, FootprintReport& report) {
  note_progress(fmt::format("{} workers importing torch", count));
  pool::Pool pool(footprint_config(python, mode, count), {.sweep_orphans = false});
  std::vector<std::future<nlohmann::ordered_json>> imports;
  for (int i = 1; i <= count; ++i) {
    imports.push_back(pool.call("w" + std::to_string(i), std::string(kStagesModule) + ":import_module", {"torch"}));
  }
  for (auto& f : imports) f.get();
  if (sampler.has_gpu()) {
    for (int i = 1; i <= count; ++i) {
      pool.call("w" + std::to_string(i), std::string(kStagesModule) + ":open_cuda_context").get();
    }
  }
  std::vector<pool::ProcessQuery> queries;
  for (const auto& w : pool.status().get().workers) queries.push_back({w.pid, sampler.has_gpu()});
  for (const auto& m : sampler.sample(queries)) {
    report.workers.push_back({.pid = m.pid, .ram = m.ram.value_or(probe::MemoryFootprint{}), .vram = m.vram});
  }
}

FootprintReport measure(const FootprintOptions& o, const std::string& python, const std::string& mode) {
  pool::MemorySampler sampler;
  FootprintReport report;
  report.python = python;
  report.module_loading = mode;
  if (auto device = sampler.device_now()) {
    report.device = device->name + " (driver " + sampler.driver_version() + ")";
  } else {
    report.device = "none: " + sampler.gpu_unavailable_reason();
  }
  const auto selected = split_list(o.stages);
  StageRunner(python, mode, sampler).run(selected, report);
  if (o.workers > 0) measure_workers(python, mode, o.workers, sampler, report);
  return report;
}

// The --svg file, opened before the measurement so that a path that cannot be written is
// refused at once rather than after minutes of work. A file it created is removed again if the
// chart is never written.
class SvgFile {
 public:
  explicit SvgFile(std::string path) : path_(std::move(path)) {
    created_ = ::access(path_.c_str(), F_OK) != 0;
    fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666));
    if (!fd_) fail();
  }
  ~SvgFile() {
    if (fd_ && created_) ::unlink(path_.c_str());
  }
  SvgFile(const SvgFile&) = delete;
  SvgFile& operator=(const SvgFile&) = delete;

  void write(const std::string& text) {
    if (::ftruncate(fd_.get(), 0) != 0) fail();
    for (std::size_t done = 0; done < text.size();) {
      const auto n = ::write(fd_.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno != EINTR) fail();
      if (n > 0) done += static_cast<std::size_t>(n);
    }
    if (::close(fd_.release()) != 0) fail();
  }

 private:
  [[noreturn]] void fail() const {
    throw std::runtime_error("cannot write --svg '" + path_ + "': " + std::strerror(errno));
  }

  std::string path_;
  bool created_ = false;
  wire::UniqueFd fd_;
};

int run_footprint(const FootprintOptions& o) {
  const auto selected = split_list(o.stages);
  if (selected.empty()) {
    throw isohost::Error(isohost::ErrorKind::bad_request,
                         "--stages names no stage; stages are bare, numpy, torch, cuda, tensor, "
                         "asleep, hibernated, woken, release");
  }
  for (const auto& key : selected) {
    const bool known = std::any_of(std::begin(kStages), std::end(kStages),
                                   [&](const StageSpec& s) { return key == s.key; });
    if (!known) {
      throw isohost::Error(
          isohost::ErrorKind::bad_request,
          "unknown stage '" + key +
              "'; stages are bare, numpy, torch, cuda, tensor, asleep, hibernated, woken, release");
    }
  }
  std::optional<SvgFile> svg;
  if (!o.svg.empty()) svg.emplace(o.svg);
  const std::string python = o.python.empty() ? default_python() : o.python;
  std::vector<std::string> modes;
  if (o.module_loading != "eager") modes.emplace_back("LAZY");
  if (o.module_loading != "lazy") modes.emplace_back("EAGER");
  std::vector<FootprintReport> reports;
  ProgressLine progress("footprint");
  for (const auto& mode : modes) {
    progress.show("starting a worker on " + python + " (CUDA_MODULE_LOADING=" + mode + ")");
    reports.push_back(measure(o, python, mode));
  }
  if (o.json) {
    if (reports.size() == 1) {
      std::cout << reports[0].to_json().dump(2) << std::endl;
    } else {
      auto all = nlohmann::ordered_json::array();
      for (const auto& r : reports) all.push_back(r.to_json());
      std::cout << all.dump(2) << std::endl;
    }
  } else {
    for (std::size_t i = 0; i < reports.size(); ++i) {
      if (i > 0) std::cout << "\n";
      print_table(reports[i]);
    }
  }
  if (svg) svg->write(render_svg(reports));
  return 0;
}

}  // namespace

void add_footprint_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<FootprintOptions>();
  auto* sub = app.add_subcommand("footprint", "Measure what a Python ML worker holds, stage by stage");
  sub->add_option("--python", o->python, "interpreter (default: a python3 that has torch)");
  sub->add_option("--stages", o->stages,
                  "comma-separated: bare,numpy,torch,cuda,tensor,asleep,hibernated,woken,release");
  sub->add_option("--module-loading", o->module_loading, "CUDA_MODULE_LOADING: lazy, eager or both")
      ->check(CLI::IsMember({"lazy", "eager", "both"}));
  sub->add_option("--workers", o->workers, "also start N workers on the interpreter and sum them")
      ->check(CLI::Range(0, 64));
  sub->add_flag("--json", o->json, "print JSON (bytes)");
  sub->add_option("--svg", o->svg, "write a stacked bar chart per stage to FILE");
  commands.emplace_back(sub, [o] { return run_footprint(*o); });
}

}  // namespace isohost::cli
