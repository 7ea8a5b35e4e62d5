#pragma once

// What NVML tells about a GPU and the processes on it, as plain values.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace isohost::probe {

struct GpuDevice {
  // NVML's index, in PCI bus order. It ignores CUDA_VISIBLE_DEVICES and can differ from CUDA's
  // default (fastest first) order, so match a worker's device by uuid, not by index.
  unsigned index = 0;
  std::string name;
  // "GPU-xxxxxxxx-..."; CUDA_VISIBLE_DEVICES accepts it, which pins a worker unambiguously.
  std::string uuid;
  // Bytes of device memory (nvmlDeviceGetMemoryInfo). used includes what the driver reserves.
  uint64_t total = 0;
  uint64_t free = 0;
  uint64_t used = 0;

  bool operator==(const GpuDevice&) const = default;
};

struct GpuProcess {
  // As the driver numbers it: in a container with its own pid namespace this is the host's
  // pid, not ours (see vram_attribution.hpp).
  pid_t pid = 0;
  // Device memory the process holds, context included. nullopt where NVML cannot say
  // (NVML_VALUE_NOT_AVAILABLE: MIG instances, some containers, Windows WDDM).
  std::optional<uint64_t> used;
  // Listed only as a graphics process (a process with both a compute and a graphics context
  // is reported once, as compute).
  bool graphics = false;

  bool operator==(const GpuProcess&) const = default;
};

}  // namespace isohost::probe
