#include "probe/vram_attribution.hpp"

#include <algorithm>

namespace isohost::probe {
namespace {

const GpuProcess* find_pid(const std::vector<GpuProcess>& listed, pid_t pid) {
  const auto found =
      std::find_if(listed.begin(), listed.end(), [pid](const GpuProcess& process) { return process.pid == pid; });
  return found == listed.end() ? nullptr : &*found;
}

VramSource attribute_one(const std::vector<GpuProcess>& listed, const WorkerCudaState& worker, bool visible) {
  VramSource source;
  source.pid = worker.pid;
  if (const GpuProcess* process = find_pid(listed, worker.pid)) {
    source.attribution = process->used ? VramAttribution::nvml_pid : VramAttribution::device_free_drop;
    if (process->used) source.nvml_used = process->used;
  } else if (!worker.cuda_initialised) {
    source.attribution = VramAttribution::no_context;
  } else {
    source.attribution = visible ? VramAttribution::unknown : VramAttribution::device_free_drop;
  }
  return source;
}

}  // namespace

bool pids_visible(const std::vector<GpuProcess>& listed, const std::vector<pid_t>& ours) {
  return std::any_of(ours.begin(), ours.end(), [&listed](pid_t pid) { return find_pid(listed, pid) != nullptr; });
}

std::vector<VramSource> attribute_vram(const std::vector<GpuProcess>& listed,
                                       const std::vector<WorkerCudaState>& workers) {
  std::vector<pid_t> ours;
  ours.reserve(workers.size());
  for (const WorkerCudaState& worker : workers) ours.push_back(worker.pid);
  const bool visible = pids_visible(listed, ours);

  std::vector<VramSource> sources;
  sources.reserve(workers.size());
  for (const WorkerCudaState& worker : workers) sources.push_back(attribute_one(listed, worker, visible));
  return sources;
}

}  // namespace isohost::probe
