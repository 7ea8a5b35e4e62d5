#pragma once

// Where the host's GPU figures come from: NVML on a real machine, or a file that a test writes
// (SimulatedGpu) where there is no GPU. The pool and `isohost ps` read only this interface, so
// the admission path runs the same code in CI as on the card.
//
// Methods that query a device throw ProbeError naming the call and the device.

#include <string>
#include <vector>

#include "probe/gpu_types.hpp"

namespace isohost::probe {

class GpuSource {
 public:
  virtual ~GpuSource() = default;

  virtual std::string driver_version() const = 0;
  virtual std::vector<GpuDevice> devices() const = 0;
  // Every process with memory on the device, as the driver numbers it.
  virtual std::vector<GpuProcess> processes(unsigned index) const = 0;
};

}  // namespace isohost::probe
