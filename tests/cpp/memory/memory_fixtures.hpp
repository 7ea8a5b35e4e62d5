#pragma once
// Small builders for memory tests: workers and snapshots described in MiB, so each table row
// reads like the situation it tests.

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memory/admission.hpp"
#include "memory/snapshot.hpp"

namespace isohost::memory::testing {

// Seconds since an arbitrary start: tests never read a clock.
inline TimePoint at(int seconds) { return TimePoint{} + std::chrono::seconds(seconds); }

// The moment every snapshot below is taken.
inline const TimePoint kNow = at(1000);

inline constexpr Bytes kCardMiB = 24576;  // a 24 GiB card

// One worker as a table row: what its VRAM is made of, in MiB.
struct WorkerRow {
  std::string id{};
  WorkerState state = WorkerState::idle;
  Bytes context_mib = 612;  // fixed: VRAM used beyond the allocator's reserve
  Bytes held_mib = 0;       // allocated and in use
  Bytes cache_mib = 0;      // reserved, not allocated
  int last_used_s = 0;
  bool hibernatable = false;
  Bytes pss_mib = 600;
  int device = 0;
  bool can_sleep = false;
  Bytes slept_mib = 0;  // in its host RAM after a sleep (and inside pss_mib: add it there)
  std::optional<double> start_s{};  // its environment's median start; none measured by default
};

inline std::optional<Duration> start_time_of(const WorkerRow& row) {
  if (!row.start_s) return std::nullopt;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*row.start_s));
}

inline ProcessFigures figures_of(const WorkerRow& row) {
  static std::int32_t next_pid = 1000;
  return {.worker_id = row.id,
          .pid = next_pid++,
          .state = row.state,
          .last_used = at(row.last_used_s),
          .pss = mib(row.pss_mib),
          .vram_used = mib(row.context_mib + row.held_mib + row.cache_mib),
          .allocator_reserved = mib(row.held_mib + row.cache_mib),
          .allocator_allocated = mib(row.held_mib),
          .hibernation = {.env_allows = row.hibernatable,
                          .driver_supports = row.hibernatable,
                          .has_cuda_context = row.context_mib > 0},
          .device = row.device,
          .can_sleep = row.can_sleep,
          .slept_bytes = mib(row.slept_mib),
          .start_time = start_time_of(row)};
}

// GPU 0 with `free_mib` free and `foreign_mib` held by processes isohost does not manage;
// host RAM 64 GiB with 32 GiB available; default settings (reserve 512 MiB).
inline Snapshot snapshot_of(const std::vector<WorkerRow>& rows, Bytes free_mib,
                            Bytes foreign_mib = 0) {
  Snapshot snapshot{.taken_at = kNow,
                    .devices = {{.index = 0,
                                 .total = mib(kCardMiB),
                                 .free = mib(free_mib),
                                 .foreign = mib(foreign_mib)}},
                    .host_ram = {.mem_total = mib(65536), .mem_available = mib(32768)}};
  for (const WorkerRow& row : rows) snapshot.processes.push_back(figures_of(row));
  return snapshot;
}

inline AdmissionRequest request_for(Bytes need_mib, std::string requester = "requester") {
  return {.requester = std::move(requester), .device = 0, .bytes = mib(need_mib)};
}

// "release a", "reap b": a plan's steps in order, for comparing with a table row.
inline std::vector<std::string> step_names(const AdmissionPlan& plan) {
  std::vector<std::string> names;
  for (const AdmissionStep& step : plan.steps) {
    names.push_back(std::string(to_string(step.kind)) + " " + step.worker_id);
  }
  return names;
}

}  // namespace isohost::memory::testing
