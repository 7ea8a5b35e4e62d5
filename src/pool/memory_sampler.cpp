#include "pool/memory_sampler.hpp"

#include <algorithm>
#include <set>

#include "probe/nvml.hpp"
#include "probe/probe_error.hpp"
#include "probe/proc_status.hpp"
#include "probe/simulated_gpu.hpp"
#include "probe/vram_attribution.hpp"

namespace isohost::pool {

MemorySampler::MemorySampler(const std::string& simulated_gpu) {
  if (simulated_gpu.empty()) {
    auto opened = probe::Nvml::open();
    if (!opened.nvml) {
      reason_ = "no NVIDIA driver (" + opened.failure + ")";
      return;
    }
    source_ = std::move(opened.nvml);
  } else {
    source_ = std::make_unique<probe::SimulatedGpu>(simulated_gpu);
  }
  try {
    const auto devices = source_->devices();
    if (devices.empty()) {
      reason_ = "the driver lists no GPU";
      return;
    }
    gpu_ = devices.front();
    for (const auto& d : devices) baseline_used_[d.index] = d.used;
  } catch (const probe::ProbeError& e) {
    reason_ = e.what();
    gpu_.reset();
  }
}

MemorySampler::~MemorySampler() = default;

std::optional<probe::GpuDevice> MemorySampler::device_now() const {
  if (!gpu_) return std::nullopt;
  try {
    for (auto& d : source_->devices()) {
      if (d.index == gpu_->index) return d;
    }
  } catch (const probe::ProbeError&) {
  }
  return std::nullopt;
}

std::vector<DeviceMemory> MemorySampler::devices_now(const std::vector<ProcessQuery>& processes) const {
  std::vector<DeviceMemory> out;
  if (!gpu_) return out;
  std::vector<pid_t> ours;
  bool any_context = false;
  for (const auto& p : processes) {
    ours.push_back(p.pid);
    any_context = any_context || p.cuda_initialised;
  }
  try {
    for (auto& device : source_->devices()) {
      const auto listed = source_->processes(device.index);
      DeviceMemory d{.device = std::move(device)};
      // Unmatched pids are only foreign when NVML's pids are ours to compare (same namespace),
      // or when none of our processes holds a context at all.
      if (!any_context || probe::pids_visible(listed, ours)) {
        std::uint64_t foreign = 0;
        for (const auto& p : listed) {
          if (std::find(ours.begin(), ours.end(), p.pid) == ours.end()) foreign += p.used.value_or(0);
        }
        d.foreign = foreign;
      }
      out.push_back(std::move(d));
    }
  } catch (const probe::ProbeError&) {
    out.clear();
  }
  return out;
}

std::string MemorySampler::driver_version() const {
  if (!source_) return "";
  try {
    return source_->driver_version();
  } catch (const probe::ProbeError&) {
    return "";
  }
}

probe::MemoryFootprint MemorySampler::read_ram(pid_t pid, RamReading how) {
  const auto it = exact_ram_.find(pid);
  if (how == RamReading::from_counters && it != exact_ram_.end()) {
    return probe::moved_to_rss(it->second.ram, probe::read_rss_counters(pid).rss);
  }
  auto ram = probe::read_footprint(pid);
  exact_ram_[pid] = ExactRam{.ram = ram, .at = std::chrono::steady_clock::now()};
  return ram;
}

std::vector<ProcessMemory> MemorySampler::sample(const std::vector<ProcessQuery>& processes,
                                                 RamReading ram) {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(exact_ram_,
                [now](const auto& entry) { return now - entry.second.at > kExactRamMaxAge; });
  std::vector<ProcessMemory> out;
  out.reserve(processes.size());
  for (const auto& p : processes) {
    ProcessMemory m;
    m.pid = p.pid;
    try {
      m.ram = read_ram(p.pid, ram);
    } catch (const probe::ProbeError& e) {
      m.error = e.what();
    }
    out.push_back(std::move(m));
  }
  if (!gpu_) return out;
  std::set<unsigned> devices;
  for (const auto& p : processes) devices.insert(p.device);
  for (unsigned device : devices) attribute(device, processes, out);
  return out;
}

// Fills `out[i].vram` for the processes pinned to `device`.
void MemorySampler::attribute(unsigned device, const std::vector<ProcessQuery>& processes,
                              std::vector<ProcessMemory>& out) const {
  std::vector<probe::GpuProcess> listed;
  std::optional<probe::GpuDevice> now;
  try {
    listed = source_->processes(device);
    for (auto& d : source_->devices()) {
      if (d.index == device) now = d;
    }
  } catch (const probe::ProbeError&) {
    return;
  }
  if (!now) return;
  std::vector<std::size_t> index;
  std::vector<probe::WorkerCudaState> workers;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    if (processes[i].device != device) continue;
    index.push_back(i);
    workers.push_back({processes[i].pid, processes[i].cuda_initialised});
  }
  const auto sources = probe::attribute_vram(listed, workers);
  std::size_t dropped = 0;
  for (const auto& s : sources) dropped += s.attribution == probe::VramAttribution::device_free_drop;
  const auto baseline = baseline_used_.contains(device) ? baseline_used_.at(device) : now->used;
  const std::uint64_t drop = now->used > baseline ? now->used - baseline : 0;
  for (std::size_t k = 0; k < sources.size(); ++k) {
    auto& m = out[index[k]];
    switch (sources[k].attribution) {
      case probe::VramAttribution::nvml_pid:
        m.vram = sources[k].nvml_used;
        m.vram_method = "nvml";
        break;
      case probe::VramAttribution::no_context:
        m.vram = 0;
        m.vram_method = "no_context";
        break;
      case probe::VramAttribution::device_free_drop:
        m.vram = drop / dropped;
        m.vram_method = "device_free_drop";
        break;
      case probe::VramAttribution::unknown:
        break;
    }
  }
}

}  // namespace isohost::pool
