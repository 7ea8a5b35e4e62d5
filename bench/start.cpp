#include "benchmarks.hpp"
#include "elapsed.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "pool/pool.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"

namespace isohost::bench {
namespace {

// The floor under any process start: fork, exit, wait.
Figure fork_exit_wait(int rounds) {
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    samples.push_back(elapsed<std::milli>(start));
  }
  return summarize("start.fork", "ms", samples);
}

// What starting a process holds its caller for while the caller holds `bytes` of touched memory,
// as a Python host that embeds the pool (ComfyUI with its models in RAM) does: fork() alone (page
// tables copied; the old spawn paid this and then waited for exec) as the limit, and
// proc::spawn of /bin/true (CLONE_VM | CLONE_VFORK: nothing copied; held until exec).
std::vector<Figure> start_from_large_host(std::size_t bytes, int rounds) {
  std::vector<std::byte> held(bytes);
  std::memset(held.data(), 1, held.size());
  const auto label = std::to_string(bytes >> 30) + "GiB";
  std::vector<double> fork_samples;
  std::vector<double> spawn_samples;
  for (int i = 0; i < rounds; ++i) {
    auto start = Clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    fork_samples.push_back(elapsed<std::milli>(start));
    ::waitpid(pid, nullptr, 0);
    start = Clock::now();
    auto child = proc::spawn({.program = "/bin/true", .argv = {"true"}, .env = {}});
    spawn_samples.push_back(elapsed<std::milli>(start));
    proc::reap(child.pidfd.get());
  }
  auto fork = summarize("start.fork_call_held_" + label, "ms", fork_samples);
  auto spawn = summarize("start.spawn_held_" + label, "ms", spawn_samples);
  spawn.limit = fork.median;
  spawn.limit_name = fork.name;
  return {fork, spawn};
}

// Spawn to ready: a fresh pool per sample, so every call is a cold start. With `module`, the
// first call imports it, and the figure runs to that call's answer.
Figure cold_start(const std::string& name, const BenchOptions& options, const std::string& module,
                  int rounds, const Figure& limit) {
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    pool::Config config;
    config.environments["bench"] = pool::EnvironmentConfig{.name = "bench", .python = options.python};
    pool::Pool pool(config, {.sweep_orphans = false});
    const auto start = Clock::now();
    if (module.empty()) {
      pool.call("bench", "os:getpid").get();
    } else {
      pool.call("bench", "isohost_worker.stages:import_module", {module}).get();
    }
    samples.push_back(elapsed<std::milli>(start));
  }
  auto figure = summarize(name, "ms", samples);
  figure.limit = limit.median;
  figure.limit_name = limit.name;
  return figure;
}

// Spawn to ready from a zygote that has preloaded torch: one pool whose zygote is up before the
// clock starts; each sample reaps the worker, so the next call forks a new one and runs a call
// that imports torch (already imported: the zygote did it).
Figure zygote_start(const BenchOptions& options, int rounds, const Figure& limit) {
  pool::Config config;
  config.environments["bench"] = pool::EnvironmentConfig{
      .name = "bench", .python = options.python, .preload = {"torch"}, .prestart = true};
  pool::Pool pool(config, {.sweep_orphans = false});
  const auto zygote_ready = [&pool] {
    const auto status = pool.status().get();
    return !status.zygotes.empty() && status.zygotes[0].state == "ready";
  };
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (!zygote_ready() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    pool.call("bench", "isohost_worker.stages:import_module", {"torch"}).get();
    samples.push_back(elapsed<std::milli>(start));
    if (pool.status().get().workers.at(0).origin != "zygote") {
      throw std::runtime_error("start.torch_zygote: the worker was not forked from the zygote");
    }
    pool.submit({pool::Request::Kind::reap, "bench"}).get();
  }
  auto figure = summarize("start.torch_zygote", "ms", samples);
  figure.limit = limit.median;
  figure.limit_name = limit.name;
  return figure;
}

}  // namespace

std::vector<Figure> bench_start(const BenchOptions& options) {
  const int rounds = std::max(5, options.rounds / 100);
  auto fork = fork_exit_wait(200);
  auto torch = cold_start("start.torch", options, "torch", rounds, fork);
  std::vector<Figure> figures{fork, cold_start("start.bare", options, "", rounds, fork), torch,
                              zygote_start(options, rounds * 4, torch)};
  for (auto& figure : start_from_large_host(std::size_t{1} << 30, 50)) figures.push_back(figure);
  return figures;
}

}  // namespace isohost::bench
