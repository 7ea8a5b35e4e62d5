#include "pool/memory_snapshot.hpp"

#include "pool/pool.hpp"

namespace isohost::pool {

memory::WorkerState memory_state(worker::WorkerState state) {
  switch (state) {
    case worker::WorkerState::ready:
      return memory::WorkerState::idle;
    case worker::WorkerState::hibernated:
      return memory::WorkerState::hibernated;
    case worker::WorkerState::asleep:
      return memory::WorkerState::asleep;
    case worker::WorkerState::starting:
      return memory::WorkerState::starting;
    default:
      return memory::WorkerState::busy;
  }
}

memory::MemorySettings memory_settings(const HostSettings& host) {
  return {.vram_reserve = host.vram_reserve,
          .ram_budget = host.ram_budget,
          .ram_floor = host.ram_floor,
          .admission_wait = host.admission_wait,
          .grant_lifetime = host.grant_lifetime};
}

namespace {

// The worker's report is null when it could not answer (busy in C code, or dying).
std::optional<memory::Bytes> allocator_figure(const nlohmann::ordered_json& report,
                                              const char* key) {
  if (!report.is_object()) return std::nullopt;
  const auto allocator = report.value("allocator", nlohmann::ordered_json());
  if (!allocator.is_object() ||
      !allocator.value(key, nlohmann::ordered_json()).is_number_unsigned())
    return std::nullopt;
  return allocator[key].get<memory::Bytes>();
}

template <typename T>
T report_figure(const nlohmann::ordered_json& report, const char* key, T fallback) {
  if (!report.is_object()) return fallback;
  const auto value = report.value(key, nlohmann::ordered_json());
  try {
    return value.is_null() ? fallback : value.get<T>();
  } catch (const nlohmann::ordered_json::exception&) {
    return fallback;  // a worker's report is input, not trusted to be well formed
  }
}

memory::ProcessFigures process_figures(const WorkerStatus& w, memory::TimePoint now) {
  const auto idle = std::chrono::duration_cast<memory::Duration>(std::chrono::duration<double>(w.idle_seconds));
  memory::ProcessFigures p{.worker_id = w.env,
                           .pid = w.pid,
                           .state = memory_state(w.worker_state),
                           .last_used = now - idle,
                           .allocator_reserved = allocator_figure(w.report, "reserved"),
                           .allocator_allocated = allocator_figure(w.report, "allocated"),
                           .release_can_free = report_figure(w.report, "release_can_free", memory::Bytes{0}),
                           .device = static_cast<int>(w.device),
                           .kept = w.kept};
  if (w.memory) {
    if (w.memory->ram) p.pss = w.memory->ram->pss;
    p.vram_used = w.memory->vram;
  }
  // Whether the driver has the checkpoint API is learnt at the first try (the host loads it
  // only then); a failed try is remembered per request by the admission driver.
  const bool context = report_figure(w.report, "cuda_initialized", false) ||
                       (w.memory && w.memory->vram_method == "nvml" && w.memory->vram.value_or(0) > 0);
  p.hibernation = {.env_allows = w.hibernate_allowed, .driver_supports = true, .has_cuda_context = context};
  if (w.hibernation) {
    p.hibernated_bytes = w.hibernation->vram_moved.value_or(0);
    p.pss_counts_hibernated = true;  // read after the checkpoint
  }
  p.can_sleep =
      offers_sleep(w.hello) && context && report_figure(w.report, "torch_imported", false);
  if (w.sleep) p.slept_bytes = w.sleep->bytes;
  if (w.mean_start_seconds) {
    p.start_time = std::chrono::duration_cast<memory::Duration>(
        std::chrono::duration<double>(*w.mean_start_seconds));
  }
  return p;
}

}  // namespace

memory::Snapshot make_snapshot(const PoolStatus& status, const HostSettings& host,
                               std::span<const memory::PendingGrant> pending, memory::TimePoint now) {
  memory::Snapshot snapshot{.taken_at = now, .settings = memory_settings(host)};
  snapshot.settings.rates = status.rates;
  for (const auto& w : status.workers) {
    if (w.worker_state == worker::WorkerState::stopping || w.worker_state == worker::WorkerState::dead) continue;
    snapshot.processes.push_back(process_figures(w, now));
  }
  for (const auto& d : status.devices) {
    snapshot.devices.push_back({.index = static_cast<int>(d.device.index),
                                .total = d.device.total,
                                .free = d.device.free,
                                .foreign = d.foreign.value_or(0)});
  }
  if (status.system_memory) {
    snapshot.host_ram = {.mem_total = status.system_memory->total, .mem_available = status.system_memory->available};
  }
  snapshot.pending.assign(pending.begin(), pending.end());
  return snapshot;
}

}  // namespace isohost::pool
