// `isohost bench hibernate`: the driver's checkpoint and restore beside the bus they move
// bytes over, and waking a warm worker beside starting a fresh one to the same state. Needs an
// NVIDIA GPU with the checkpoint API (CUDA 12.8+ driver) and torch with CUDA in the worker.

#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "elapsed.hpp"
#include "pool/pool.hpp"
#include "stage_worker.hpp"

namespace isohost::bench {
namespace {

constexpr const char* kEnv = kStageEnv;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Trip {
  double out_ms = 0;
  double in_ms = 0;
  double moved = 0;  // bytes off the card (NVML)
};

// One hibernation and one wake, timed as a caller of the pool sees them.
Trip round_trip(pool::Pool& pool) {
  auto start = Clock::now();
  const auto out = pool.submit({pool::Request::Kind::hibernate, kEnv}).get();
  Trip trip{.out_ms = elapsed<std::milli>(start)};
  if (!out.value("hibernated", false)) {
    throw std::runtime_error("bench hibernate: " +
                             out.value("reason", std::string("not hibernated")));
  }
  trip.moved = out.value("vram_before", nlohmann::ordered_json()).is_number()
                   ? out["vram_before"].get<double>()
                   : 0;
  start = Clock::now();
  const auto in = pool.submit({pool::Request::Kind::wake, kEnv}).get();
  trip.in_ms = elapsed<std::milli>(start);
  if (!in.value("woken", false)) throw std::runtime_error("bench hibernate: wake: " + in.dump());
  return trip;
}

Figure with_limit(Figure figure, double limit, std::string limit_name) {
  figure.limit = limit;
  figure.limit_name = std::move(limit_name);
  return figure;
}

// Spawn, import torch, context, then `bytes` copied in from host RAM: the state a wake reaches.
double cold_start_ms(const BenchOptions& options, std::uint64_t bytes) {
  pool::Pool pool(stage_worker_config(options), {.sweep_orphans = false});
  const auto start = Clock::now();
  stage(pool, "import_module", {"torch"});
  stage(pool, "open_cuda_context");
  const double to_context = elapsed<std::milli>(start);
  return to_context + stage(pool, "copy_in", {bytes})["copy_ms"].get<double>();
}

}  // namespace

std::vector<Figure> bench_hibernate(const BenchOptions& options) {
  const int rounds = std::max(3, options.rounds / 400);
  pool::Pool pool(stage_worker_config(options), {.sweep_orphans = false});
  stage(pool, "import_module", {"torch"});
  stage(pool, "open_cuda_context");
  const auto pinned = stage(pool, "pinned_copy_ms_per_gib", {std::uint64_t{1} << 30});
  const double d2h = pinned["d2h"].get<double>();
  const double h2d = pinned["h2d"].get<double>();

  std::vector<double> context_out, context_in;
  double context_bytes = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto trip = round_trip(pool);
    context_out.push_back(trip.out_ms);
    context_in.push_back(trip.in_ms);
    context_bytes = trip.moved;
  }

  std::vector<double> out_per_gib, in_per_gib, wake_4gib;
  std::uint64_t held = 0;
  for (const std::uint64_t gib : {1, 4, 10}) {
    // Grow what the worker holds to `gib` GiB of tensors besides its context.
    stage(pool, "hold_tensor", {(gib << 30) - held});
    held = gib << 30;
    for (int i = 0; i < rounds; ++i) {
      const auto trip = round_trip(pool);
      const double moved_gib =
          (trip.moved > 0 ? trip.moved : static_cast<double>(held) + context_bytes) / kGiB;
      out_per_gib.push_back(trip.out_ms / moved_gib);
      in_per_gib.push_back(trip.in_ms / moved_gib);
      if (gib == 4) wake_4gib.push_back(trip.in_ms);
    }
  }
  stage(pool, "drop_tensors");

  std::vector<double> cold;
  for (int i = 0; i < rounds; ++i) cold.push_back(cold_start_ms(options, std::uint64_t{4} << 30));
  const auto cold_figure = summarize("start.cold_4GiB", "ms", cold);

  const double context_gib = context_bytes / kGiB;
  return {
      with_limit(summarize("hibernate.out_per_GiB", "ms", out_per_gib), d2h,
                 "pinned D2H copy per GiB"),
      with_limit(summarize("hibernate.in_per_GiB", "ms", in_per_gib), h2d,
                 "pinned H2D copy per GiB"),
      with_limit(summarize("hibernate.context_only_out", "ms", context_out), d2h * context_gib,
                 "pinned D2H of the context"),
      with_limit(summarize("hibernate.context_only_in", "ms", context_in), h2d * context_gib,
                 "pinned H2D of the context"),
      with_limit(summarize("hibernate.wake_4GiB", "ms", wake_4gib), cold_figure.median,
                 "start.cold_4GiB"),
      cold_figure,
  };
}

}  // namespace isohost::bench
