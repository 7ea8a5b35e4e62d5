#pragma once

// A GPU that exists only as a JSON file, for tests of memory management on machines without
// one (`[host] simulated_gpu = "gpu.json"`). The file is read again at every query, so a test
// (or a worker, standing in for its allocations) changes the card by rewriting it:
//
//   {"devices": [{"index": 0, "name": "sim", "total_mib": 1000}],
//    "processes": [{"pid": 4242, "device": 0, "used_mib": 600}]}
//
// Like the driver, it frees the memory of a process that has exited: entries whose pid is
// gone are ignored. free = total - the live processes' use.

#include <string>
#include <vector>

#include "probe/gpu_source.hpp"

namespace isohost::probe {

class SimulatedGpu : public GpuSource {
 public:
  explicit SimulatedGpu(std::string path) : path_(std::move(path)) {}

  std::string driver_version() const override { return "simulated"; }
  std::vector<GpuDevice> devices() const override;
  std::vector<GpuProcess> processes(unsigned index) const override;

 private:
  std::string path_;
};

}  // namespace isohost::probe
