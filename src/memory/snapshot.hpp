#pragma once
// The inputs of the memory arithmetic: what the probes and workers reported at one moment.
//
// A Snapshot is plain data. The pool fills it (NVML for devices and per-process VRAM,
// /proc/PID/smaps_rollup for PSS, /proc/meminfo for host RAM, the workers' own allocator
// reports, the GrantBook for pending grants); ledger.hpp turns it into books, admission.hpp
// and ram_relief.hpp decide from them. Figures that a probe could not read are std::nullopt,
// never a guessed 0.
//
//   Snapshot snapshot{.taken_at = now, .settings = settings_from_config};
//   snapshot.devices.push_back({.index = 0, .total = nvml.total, .free = nvml.free,
//                               .foreign = sum_of_nvml_processes_not_ours});
//   snapshot.processes.push_back({.worker_id = "sdxl", .pid = 4242, .state = WorkerState::idle,
//   ...}); snapshot.pending.assign(book.outstanding().begin(), book.outstanding().end());

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/units.hpp"

namespace isohost::memory {

// A worker's lifecycle state as far as memory is concerned.
enum class WorkerState {
  starting,    // spawned, not yet ready: holds little, can be neither released nor reaped yet
  idle,        // ready, no call in flight: may be released, slept, hibernated or reaped
  busy,        // a call in flight: frees nothing until the call ends
  hibernated,  // its whole GPU state moved into its own host RAM: 0 VRAM
  // Idle and alive, its torch storages moved into its own host RAM by its sleep; it holds its
  // CUDA context and what sleep could not move. It may be hibernated (the driver moves what is
  // left) or reaped, never slept again or released: it has nothing more for either to give.
  asleep,
};

constexpr std::string_view to_string(WorkerState state) noexcept {
  switch (state) {
    case WorkerState::starting:
      return "starting";
    case WorkerState::idle:
      return "idle";
    case WorkerState::busy:
      return "busy";
    case WorkerState::hibernated:
      return "hibernated";
    case WorkerState::asleep:
      return "asleep";
  }
  return "unknown";
}

// Whether a worker's GPU state can be moved to host RAM; all three must hold. Kept as three
// facts, not one flag, so a refusal to hibernate can say exactly why.
struct HibernationSupport {
  bool env_allows = false;        // [env.NAME] hibernate = true
  bool driver_supports = false;   // libcuda.so.1 exports the cuCheckpointProcess* calls
  bool has_cuda_context = false;  // the worker opened a context (NVML lists it)

  constexpr bool possible() const noexcept {
    return env_allows && driver_supports && has_cuda_context;
  }
};

// A worker that uses no GPU.
inline constexpr int kNoDevice = -1;

// One worker process, as the probes and the worker itself reported it.
struct ProcessFigures {
  std::string worker_id{};  // the environment's name: unique among live workers
  std::int32_t pid = 0;
  WorkerState state = WorkerState::idle;
  TimePoint last_used{};  // when its last call ended (start time if it never had one); LRU order
  Bytes pss = 0;          // smaps_rollup Pss, the worker's fair share of host RAM

  // NVML's per-process used memory; nullopt where NVML cannot attribute memory to processes
  // (some containers, some drivers). The ledger then counts only what it knows for certain.
  std::optional<Bytes> vram_used{};
  // torch.cuda.memory_reserved() / memory_allocated() from the worker's report; nullopt when
  // the worker did not report (no torch, or not asked yet).
  std::optional<Bytes> allocator_reserved{};
  std::optional<Bytes> allocator_allocated{};
  // Allocated bytes the worker says its `release` would drop besides the allocator's cache
  // (its own model caches); 0 when it does not know. Clamped to allocator_allocated.
  Bytes release_can_free = 0;

  // Bytes the checkpoint moved off the card (its VRAM just before); 0 unless hibernated.
  Bytes hibernated_bytes = 0;
  // True when `pss` and the snapshot's MemAvailable were read after the checkpoint, so they
  // already show hibernated_bytes; false (the default) makes the ledger add them itself.
  bool pss_counts_hibernated = false;

  HibernationSupport hibernation{};
  int device = 0;  // the device index it is pinned to (CUDA_VISIBLE_DEVICES), or kNoDevice
  // Its environment is kept (Request::Kind::keep): a caller's job needs what it holds, so it is
  // never reaped; a release, sleep or hibernation keeps the process and may still act on it.
  bool kept = false;

  // Its runtime offers `sleep` and torch has a CUDA context in it: its torch storages can be
  // copied into its host RAM at bus speed and freed, and a hibernation sleeps first.
  bool can_sleep = false;
  // What its sleep moved into its host RAM; nonzero while asleep, or hibernated after a sleep.
  // Already inside `pss` (the destination is ordinary memory the worker owns), so the ledger
  // never adds it again; the planner counts it as the model a reap would have to rebuild.
  Bytes slept_bytes = 0;
  // Its environment's mean start-to-ready so far: what a reap's undo waits before the
  // model is rebuilt. nullopt when none was seen (TransferRates::start stands in).
  std::optional<Duration> start_time{};
};

// One GPU as NVML sees it.
struct DeviceFigures {
  int index = 0;
  Bytes total = 0;
  Bytes free = 0;
  // Memory held by processes NVML lists on this device that isohost does not manage. It is
  // never free and never reclaimable: isohost cannot ask them for anything.
  Bytes foreign = 0;
};

// /proc/meminfo.
struct HostRam {
  Bytes mem_total = 0;
  Bytes mem_available = 0;
};

// Identifies a grant in a GrantBook; never reused within one book.
using GrantId = std::uint64_t;

// Bytes promised to a worker and not yet seen in use (or returned). Until it is settled, the
// next admission must not promise the same bytes again.
struct PendingGrant {
  GrantId id = 0;
  std::string requester{};
  int device = 0;
  Bytes bytes = 0;
  TimePoint granted_at{};
};

// What moving bytes costs on this machine, in seconds per GiB one way unless said otherwise:
// what the admission planner prices its steps with. The defaults come from the H200 figures in
// issue 14, and the pool overwrites them with the rates it measures on its own transfers.
struct TransferRates {
  // A sleep: torch storages copied to host RAM and freed. The H200 probe moved 10 GiB in about
  // 0.2 s each way (19.5 ms/GiB); 50 ms/GiB is the top of the 20-50 ms/GiB expected through a
  // small reused pinned staging area into ordinary memory.
  double sleep_out = 0.05;
  double sleep_in = 0.05;  // its wake: the storages back onto the card
  // cuCheckpointProcess: what sleep did not move (or everything, without sleep). Measured on
  // the H200: 451 ms/GiB out, 178 ms/GiB in.
  double driver_out = 0.45;
  double driver_in = 0.18;
  // Rebuilding a reaped worker's model from disk onto the card: an assumption on the safe side
  // of an NVMe's few GB/s until the pool measures loads.
  double reload = 0.5;
  // Seconds (not per GiB) for a fresh worker to start and be ready, when its environment has
  // no start measured yet (ProcessFigures::start_time). On the H200 a fresh worker and its
  // 10 GiB model took 3.7 to 4.1 s; 5 s leaves room for heavier imports.
  double start = 5.0;
};

// The memory settings from [host]; defaults here are the ones used when the config says
// nothing.
struct MemorySettings {
  // Kept free on every card for the driver, cuBLAS workspaces and fragmentation
  // (vram_reserve_mib).
  Bytes vram_reserve = mib(512);
  // All workers' PSS together may not exceed this; 0 = no budget (ram_budget_mb).
  Bytes ram_budget = 0;
  // MemAvailable is kept at or above this; 0 = only never more than is available
  // (ram_floor_mb).
  Bytes ram_floor = 0;
  // How long an admission may wait for busy workers before it is refused; 0 = never wait
  // (admission_wait_seconds).
  Duration admission_wait = std::chrono::seconds(30);
  // A grant not seen in use within this is returned (GrantBook::expire).
  Duration grant_lifetime = std::chrono::seconds(60);
  // What the planner prices sleep, hibernation and reaps with.
  TransferRates rates{};
};

// Everything the memory arithmetic needs, read at one moment.
struct Snapshot {
  TimePoint taken_at{};  // "now" for every decision made from this snapshot
  std::vector<ProcessFigures> processes{};
  std::vector<DeviceFigures> devices{};
  HostRam host_ram{};
  std::vector<PendingGrant> pending{};
  MemorySettings settings{};
};

}  // namespace isohost::memory
