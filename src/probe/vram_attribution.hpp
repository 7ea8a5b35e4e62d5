#pragma once

// Deciding, per worker, where its VRAM figure can come from.
//
// NVML reports each process with the pid the driver sees. When the host runs in a container
// with its own pid namespace, those are the outer namespace's pids: NVML then lists processes
// but never ours, and its per-process figures cannot be matched to workers. The worker's own
// report (CUDA initialised, allocator reserved) and the drop in the device's free memory
// measured around its context creation are then the only way to charge it.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "probe/gpu_types.hpp"

namespace isohost::probe {

enum class VramAttribution {
  // NVML lists the worker's pid with a figure: use it.
  nvml_pid,
  // NVML cannot give this worker's figure, though the worker reports a CUDA context: NVML
  // lists none of our pids (another pid namespace, or no process listing at all), or lists
  // the pid with no figure (MIG). Use the worker's report and the device free drop.
  device_free_drop,
  // NVML does list our pids, so the namespaces agree, yet not this worker's, though it reports
  // a context: the two snapshots disagree (a context being created or torn down between them).
  // Keep the previous figure and sample again.
  unknown,
  // The worker reports no CUDA context and NVML does not list it: it holds no VRAM.
  no_context,
};

// One worker as the host knows it, for one device.
struct WorkerCudaState {
  pid_t pid = 0;
  // The worker says it has a CUDA context on the device whose processes are being matched
  // (workers are pinned to one device, so this is the worker's device).
  bool cuda_initialised = false;
};

struct VramSource {
  pid_t pid = 0;
  VramAttribution attribution = VramAttribution::unknown;
  // NVML's figure, set only when attribution is nvml_pid.
  std::optional<uint64_t> nvml_used;

  bool operator==(const VramSource&) const = default;
};

// True when at least one of our pids is in NVML's list, which shows that NVML's pids and ours
// are in the same namespace. False also when NVML lists nothing.
bool pids_visible(const std::vector<GpuProcess>& listed, const std::vector<pid_t>& ours);

// Pure: one VramSource per worker, in the workers' order. `listed` is one device's
// Nvml::processes(); `workers` are the workers pinned to that device. A pid NVML lists wins over
// the worker's report (a listed worker that says it has no context has a stale report).
std::vector<VramSource> attribute_vram(const std::vector<GpuProcess>& listed,
                                       const std::vector<WorkerCudaState>& workers);

}  // namespace isohost::probe
