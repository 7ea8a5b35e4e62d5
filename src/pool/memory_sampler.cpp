#include "pool/memory_sampler.hpp"

#include "probe/nvml.hpp"
#include "probe/probe_error.hpp"
#include "probe/vram_attribution.hpp"

namespace isohost::pool {

MemorySampler::MemorySampler(unsigned device) : device_(device) {
  auto opened = probe::Nvml::open();
  if (!opened.nvml) {
    reason_ = "no NVIDIA driver (" + opened.failure + ")";
    return;
  }
  nvml_ = std::move(opened.nvml);
  try {
    if (nvml_->device_count() <= device_) {
      reason_ = "no GPU " + std::to_string(device_) + " (NVML sees " +
                std::to_string(nvml_->device_count()) + ")";
      return;
    }
    gpu_ = nvml_->device(device_);
    baseline_used_ = gpu_->used;
  } catch (const probe::ProbeError& e) {
    reason_ = e.what();
    gpu_.reset();
  }
}

MemorySampler::~MemorySampler() = default;

std::optional<probe::GpuDevice> MemorySampler::device_now() const {
  if (!gpu_) return std::nullopt;
  try {
    return nvml_->device(device_);
  } catch (const probe::ProbeError&) {
    return std::nullopt;
  }
}

std::string MemorySampler::driver_version() const {
  if (!nvml_) return "";
  try {
    return nvml_->driver_version();
  } catch (const probe::ProbeError&) {
    return "";
  }
}

std::vector<ProcessMemory> MemorySampler::sample(const std::vector<ProcessQuery>& processes) {
  std::vector<ProcessMemory> out;
  out.reserve(processes.size());
  for (const auto& p : processes) {
    ProcessMemory m;
    m.pid = p.pid;
    try {
      m.ram = probe::read_footprint(p.pid);
    } catch (const probe::ProbeError& e) {
      m.error = e.what();
    }
    out.push_back(std::move(m));
  }
  if (!gpu_) return out;
  std::vector<probe::GpuProcess> listed;
  std::optional<probe::GpuDevice> now;
  try {
    listed = nvml_->processes(device_);
    now = nvml_->device(device_);
  } catch (const probe::ProbeError&) {
    return out;
  }
  std::vector<probe::WorkerCudaState> workers;
  for (const auto& p : processes) workers.push_back({p.pid, p.cuda_initialised});
  const auto sources = probe::attribute_vram(listed, workers);
  std::size_t dropped = 0;
  for (const auto& s : sources) dropped += s.attribution == probe::VramAttribution::device_free_drop;
  const std::uint64_t drop = now->used > baseline_used_ ? now->used - baseline_used_ : 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    switch (sources[i].attribution) {
      case probe::VramAttribution::nvml_pid:
        out[i].vram = sources[i].nvml_used;
        out[i].vram_method = "nvml";
        break;
      case probe::VramAttribution::no_context:
        out[i].vram = 0;
        out[i].vram_method = "no_context";
        break;
      case probe::VramAttribution::device_free_drop:
        out[i].vram = drop / dropped;
        out[i].vram_method = "device_free_drop";
        break;
      case probe::VramAttribution::unknown:
        break;
    }
  }
  return out;
}

}  // namespace isohost::pool
