#pragma once

// Reads what processes hold, RAM from /proc and VRAM from NVML, as a host sees them from
// outside. Used by `isohost footprint` after each stage and by `isohost ps` for live workers.
//
//   MemorySampler sampler;                       // opens NVML once, if there is a driver
//   auto figures = sampler.sample({{pid, true}});  // worker says CUDA is initialised
//   for (const DeviceMemory& d : sampler.devices_now({{pid, true}})) ...  // free, and foreign use
//
// Thread-compatible: one sampler per thread.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "probe/gpu_types.hpp"
#include "probe/smaps.hpp"

namespace isohost::probe {
class GpuSource;
}

namespace isohost::pool {

struct ProcessMemory {
  pid_t pid = -1;
  // Empty when the process could not be read (gone, or not ours); `error` says why.
  std::optional<probe::MemoryFootprint> ram;
  std::string error;
  // Bytes on the card; nullopt means unknown (no driver, or no way to attribute), never 0.
  std::optional<std::uint64_t> vram;
  // How `vram` was found: "nvml" (NVML's per-process figure), "device_free_drop" (NVML cannot
  // see our pids, e.g. another pid namespace: the drop of device free memory since the sampler
  // opened, shared among such workers), "no_context" (the worker has none: 0), or "unknown".
  std::string vram_method = "unknown";
};

struct ProcessQuery {
  pid_t pid = -1;
  // The worker's own report: it has opened a CUDA context.
  bool cuda_initialised = false;
  // The GPU it is pinned to (NVML's index).
  unsigned device = 0;
};

struct DeviceMemory {
  probe::GpuDevice device;
  // Held by processes on the card that are not ours (NVML lists them): never free, never
  // reclaimable. nullopt when NVML's pids cannot be matched with ours (another pid namespace).
  std::optional<std::uint64_t> foreign;
};

class MemorySampler {
 public:
  // Opens NVML, or reads the simulated GPU file when `simulated_gpu` names one (tests); without
  // a driver the sampler still reads RAM and reports VRAM as unknown.
  explicit MemorySampler(const std::string& simulated_gpu = "");
  ~MemorySampler();
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  // How sample() reads RAM. `exact`: each process's smaps_rollup (PSS and its split), which
  // walks every page table, about 8 ms per GiB of small pages. `from_counters`: the kernel's
  // RSS counters (/proc/PID/status, microseconds), with the process's last exact figures moved
  // by what its RSS did since (probe::moved_to_rss), read exactly again when those are older
  // than kExactRamMaxAge or missing. Admission reads this way: it runs before every wake and
  // load, needs the VRAM exact and the RAM close, and a worker holding a GiB of small pages
  // cost each wake 15 ms of smaps_rollup.
  enum class RamReading : std::uint8_t { exact, from_counters };
  static constexpr std::chrono::seconds kExactRamMaxAge{10};

  std::vector<ProcessMemory> sample(const std::vector<ProcessQuery>& processes,
                                    RamReading ram = RamReading::exact);

  [[nodiscard]] bool has_gpu() const { return gpu_.has_value(); }
  // Why there is no GPU view ("libnvidia-ml.so.1 not found: ..."), empty when there is one.
  [[nodiscard]] const std::string& gpu_unavailable_reason() const { return reason_; }
  // GPU 0 as NVML sees it now; nullopt without a GPU.
  [[nodiscard]] std::optional<probe::GpuDevice> device_now() const;
  // Every GPU now, with what processes other than `ours` hold on it; empty without a GPU.
  [[nodiscard]] std::vector<DeviceMemory> devices_now(const std::vector<ProcessQuery>& ours) const;
  [[nodiscard]] std::string driver_version() const;

 private:
  void attribute(unsigned device, const std::vector<ProcessQuery>& processes,
                 std::vector<ProcessMemory>& out) const;
  probe::MemoryFootprint read_ram(pid_t pid, RamReading how);

  // Each process's last exact RAM reading, for RamReading::from_counters. Entries older than
  // kExactRamMaxAge are dropped, so a pid the kernel reuses meets no stale base.
  struct ExactRam {
    probe::MemoryFootprint ram;
    std::chrono::steady_clock::time_point at;
  };
  std::map<pid_t, ExactRam> exact_ram_;

  std::unique_ptr<probe::GpuSource> source_;
  std::optional<probe::GpuDevice> gpu_;
  // Each device's used memory when the sampler opened: the baseline for device_free_drop.
  std::map<unsigned, std::uint64_t> baseline_used_;
  std::string reason_;
};

}  // namespace isohost::pool
