#include "probe/simulated_gpu.hpp"

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "probe/probe_error.hpp"

namespace isohost::probe {

namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

nlohmann::ordered_json read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ProbeError(ProbeError::Cause::unreadable,
                     "cannot read simulated GPU " + path + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    auto doc = nlohmann::ordered_json::parse(text.str());
    if (!doc.is_object() || !doc.value("devices", nlohmann::ordered_json()).is_array()) {
      throw ProbeError(ProbeError::Cause::malformed, "simulated GPU " + path + " has no \"devices\" array");
    }
    return doc;
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ProbeError(ProbeError::Cause::malformed, "simulated GPU " + path + ": " + e.what());
  }
}

bool process_alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

std::vector<GpuProcess> live_processes(const nlohmann::ordered_json& doc, unsigned index) {
  std::vector<GpuProcess> out;
  for (const auto& p : doc.value("processes", nlohmann::ordered_json::array())) {
    const auto pid = p.value("pid", pid_t{0});
    if (p.value("device", 0U) != index || !process_alive(pid)) continue;
    out.push_back({.pid = pid, .used = p.value("used_mib", std::uint64_t{0}) * kMiB});
  }
  return out;
}

}  // namespace

std::vector<GpuDevice> SimulatedGpu::devices() const {
  const auto doc = read_file(path_);
  std::vector<GpuDevice> out;
  try {
    for (const auto& d : doc["devices"]) {
      GpuDevice device{.index = d.value("index", 0U),
                       .name = d.value("name", std::string("simulated")),
                       .uuid = "GPU-simulated-" + std::to_string(d.value("index", 0U)),
                       .total = d.value("total_mib", std::uint64_t{0}) * kMiB};
      for (const auto& p : live_processes(doc, device.index)) device.used += p.used.value_or(0);
      device.used = std::min(device.used, device.total);
      device.free = device.total - device.used;
      out.push_back(std::move(device));
    }
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ProbeError(ProbeError::Cause::malformed, "simulated GPU " + path_ + ": " + e.what());
  }
  return out;
}

std::vector<GpuProcess> SimulatedGpu::processes(unsigned index) const {
  try {
    return live_processes(read_file(path_), index);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ProbeError(ProbeError::Cause::malformed, "simulated GPU " + path_ + ": " + e.what());
  }
}

}  // namespace isohost::probe
