// admission.decision: the planner's time for one request with 16 workers in the ledger, beside
// the cheapest real input of such a decision: reading 16 processes' smaps_rollup, which every
// snapshot of 16 workers costs at least.

#include <unistd.h>

#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "elapsed.hpp"
#include "memory/admission.hpp"
#include "probe/smaps.hpp"

namespace isohost::bench {
namespace {

constexpr int kWorkers = 16;

// A card of 140 GiB nearly full: 16 workers, a third idle with caches, a third idle holding
// models, a third busy; the request needs releases and a reap.
memory::Snapshot crowded_card() {
  memory::Snapshot s{.taken_at = Clock::now()};
  s.devices.push_back({.index = 0, .total = memory::mib(143'771), .free = memory::mib(2'000), .foreign = memory::mib(4'000)});
  s.host_ram = {.mem_total = memory::mib(128'000), .mem_available = memory::mib(100'000)};
  for (int i = 0; i < kWorkers; ++i) {
    const auto held = memory::mib(4'000 + 500 * static_cast<std::uint64_t>(i));
    const auto cache = i % 3 == 0 ? memory::mib(1'000) : 0;
    s.processes.push_back({.worker_id = "env" + std::to_string(i),
                           .pid = 1000 + i,
                           .state = i % 3 == 2 ? memory::WorkerState::busy : memory::WorkerState::idle,
                           .last_used = s.taken_at - std::chrono::seconds(i),
                           .pss = memory::mib(600),
                           .vram_used = memory::mib(612) + held + cache,
                           .allocator_reserved = held + cache,
                           .allocator_allocated = held,
                           .hibernation = {.env_allows = i % 2 == 0, .driver_supports = true, .has_cuda_context = true}});
  }
  return s;
}

}  // namespace

std::vector<Figure> bench_admission(const BenchOptions& options) {
  const auto snapshot = crowded_card();
  const memory::AdmissionRequest request{.requester = "env2", .device = 0, .bytes = memory::mib(12'000)};
  std::vector<double> decisions;
  for (int i = 0; i < options.rounds; ++i) {
    memory::GrantBook book;
    const auto start = Clock::now();
    const auto plan = memory::admit(snapshot, request, book);
    decisions.push_back(elapsed<std::micro>(start));
    if (plan.steps.empty()) throw std::logic_error("the benchmark's request should need steps: " + plan.explain());
  }
  std::vector<double> reads;
  for (int i = 0; i < std::max(10, options.rounds / 10); ++i) {
    const auto start = Clock::now();
    for (int w = 0; w < kWorkers; ++w) probe::read_footprint(::getpid());
    reads.push_back(elapsed<std::micro>(start));
  }
  auto read = summarize("admission.read_16_smaps", "us", reads);
  auto decision = summarize("admission.decision", "us", decisions);
  decision.limit = read.median;
  decision.limit_name = read.name;
  return {read, decision};
}

}  // namespace isohost::bench
