#pragma once

// The GPU as NVML sees it, with libnvidia-ml loaded at run time, so that the host builds and
// runs on machines with no driver and never opens a CUDA context itself.
//
//   NvmlOpenResult opened = Nvml::open();
//   if (!opened.nvml) log("no GPU figures: {}", opened.failure);
//   else for (const GpuDevice& d : opened.nvml->devices()) ... opened.nvml->processes(d.index)

#include <memory>
#include <string>
#include <vector>

#include "probe/gpu_source.hpp"
#include "probe/gpu_types.hpp"

namespace isohost::probe {

class Nvml;

struct NvmlOpenResult {
  std::unique_ptr<Nvml> nvml;  // null when NVML cannot be used
  // Why nvml is null, for a person: "libnvidia-ml.so.1 not found: <dlerror>",
  // "libnvidia-ml.so.1 lacks nvmlInit_v2", "nvmlInit failed: Driver Not Loaded".
  std::string failure;
};

// One initialised NVML session (nvmlInit on open, nvmlShutdown and dlclose on destruction;
// NVML counts inits, so several sessions may coexist).
//
// Thread-compatible: the object is immutable after open() and NVML is thread-safe, so its const
// methods may run concurrently; destroying it must not overlap a call. Methods that query a
// device throw ProbeError (nvml_failed) naming the call, the device and NVML's error string.
class Nvml : public GpuSource {
 public:
  static constexpr const char* default_library = "libnvidia-ml.so.1";

  // library: what to dlopen; tests pass a fake. Never throws: failure is a value, since a
  // machine without a GPU is a normal case, not an error.
  static NvmlOpenResult open(const char* library = default_library);

  ~Nvml() override;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const override;
  unsigned device_count() const;
  GpuDevice device(unsigned index) const;
  std::vector<GpuDevice> devices() const override;

  // Every process with a context on the device, compute and graphics lists merged
  // (merge_gpu_processes). Uses nvmlDevice{Compute,Graphics}RunningProcesses_v3, else _v2,
  // else the original (each has its own struct layout), growing the array while NVML answers
  // NVML_ERROR_INSUFFICIENT_SIZE (processes may start between the calls).
  std::vector<GpuProcess> processes(unsigned index) const override;

 private:
  struct Symbols;
  Nvml(void* library, std::unique_ptr<const Symbols> symbols);

  void* library_;
  std::unique_ptr<const Symbols> symbols_;
};

// Pure. A pid in both lists counts once, as compute (NVML reports the process's whole usage in
// each list, so adding them would count it twice). A pid listed twice within one list (one
// process on several MIG instances) is summed, unknown if either part is unknown. Order of
// first appearance is kept.
std::vector<GpuProcess> merge_gpu_processes(const std::vector<GpuProcess>& compute,
                                            const std::vector<GpuProcess>& graphics);

}  // namespace isohost::probe
