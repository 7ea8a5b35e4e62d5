#include "probe/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "probe/probe_error.hpp"

namespace isohost::probe {
namespace {

// The few NVML declarations used, written from NVIDIA's public nvml.h, since no NVML or CUDA
// headers exist at build time. Layouts and values are part of NVML's stable ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFFULL;

constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Taken by the original nvmlDevice*RunningProcesses.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

// Taken by the _v2 and _v3 functions (_v3's header type nvmlProcessInfo_t has this layout).
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);

using ListV2 = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*);
using ListV1 = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v1_t*);

// One kind of process list (compute or graphics) in every version the library has; null where
// it lacks that version.
struct ProcessListFunctions {
  const char* base_name = "";
  ListV2 v3 = nullptr;
  ListV2 v2 = nullptr;
  ListV1 v1 = nullptr;

  bool any() const { return v3 != nullptr || v2 != nullptr || v1 != nullptr; }
};

// Room for the usual number of processes at the first call; more is asked for on demand.
constexpr size_t initial_process_capacity = 64;
// Extra room when growing, for processes that start between NVML's count and our next call.
constexpr size_t process_capacity_slack = 16;
constexpr int max_list_attempts = 8;

GpuProcess to_gpu_process(unsigned int pid, unsigned long long used, bool graphics) {
  GpuProcess process;
  process.pid = static_cast<pid_t>(pid);
  if (used != NVML_VALUE_NOT_AVAILABLE) process.used = used;
  process.graphics = graphics;
  return process;
}

// Calls one version of a list function until the array is big enough.
template <typename Entry, typename Function>
nvmlReturn_t list_into(Function list, nvmlDevice_t device, bool graphics, std::vector<GpuProcess>& out) {
  std::vector<Entry> entries(initial_process_capacity);
  nvmlReturn_t result = NVML_ERROR_INSUFFICIENT_SIZE;
  for (int attempt = 0; attempt < max_list_attempts && result == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    unsigned int count = static_cast<unsigned int>(entries.size());
    result = list(device, &count, entries.data());
    if (result == NVML_ERROR_INSUFFICIENT_SIZE) {
      entries.resize(std::max<size_t>(count, entries.size()) + process_capacity_slack);
    } else if (result == NVML_SUCCESS) {
      const size_t listed = std::min<size_t>(count, entries.size());
      for (size_t i = 0; i < listed; ++i) {
        out.push_back(to_gpu_process(entries[i].pid, entries[i].usedGpuMemory, graphics));
      }
    }
  }
  return result;
}

void* find_symbol(void* library, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = ::dlsym(library, name)) return symbol;
  }
  return nullptr;
}

template <typename Function>
Function symbol_as(void* library, std::initializer_list<const char*> names) {
  return reinterpret_cast<Function>(find_symbol(library, names));
}

ProcessListFunctions find_process_list(void* library, const char* base_name) {
  const std::string base = base_name;
  ProcessListFunctions functions;
  functions.base_name = base_name;
  functions.v3 = symbol_as<ListV2>(library, {(base + "_v3").c_str()});
  functions.v2 = symbol_as<ListV2>(library, {(base + "_v2").c_str()});
  functions.v1 = symbol_as<ListV1>(library, {base.c_str()});
  return functions;
}

NvmlOpenResult open_failure(std::string why) {
  NvmlOpenResult result;
  result.failure = std::move(why);
  return result;
}

}  // namespace

struct Nvml::Symbols {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*system_get_driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*device_get_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*device_get_handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_get_name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*device_get_uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*device_get_memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  ProcessListFunctions compute;
  ProcessListFunctions graphics;

  std::string describe(nvmlReturn_t result) const {
    const char* text = error_string(result);
    return text != nullptr ? text : "NVML error " + std::to_string(result);
  }

  void check(nvmlReturn_t result, const std::string& call) const {
    if (result != NVML_SUCCESS) {
      throw ProbeError(ProbeError::Cause::nvml_failed, call + " failed: " + describe(result));
    }
  }

  // The newest version the driver implements; an older one where a newer answers
  // FUNCTION_NOT_FOUND (a library newer than the driver behind it).
  std::vector<GpuProcess> list(const ProcessListFunctions& functions, nvmlDevice_t device, unsigned index,
                               bool is_graphics) const {
    std::vector<GpuProcess> out;
    std::string used_name = functions.base_name;
    nvmlReturn_t result = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (functions.v3 != nullptr) {
      used_name = std::string(functions.base_name) + "_v3";
      result = list_into<nvmlProcessInfo_v2_t>(functions.v3, device, is_graphics, out);
    }
    if (result == NVML_ERROR_FUNCTION_NOT_FOUND && functions.v2 != nullptr) {
      used_name = std::string(functions.base_name) + "_v2";
      result = list_into<nvmlProcessInfo_v2_t>(functions.v2, device, is_graphics, out);
    }
    if (result == NVML_ERROR_FUNCTION_NOT_FOUND && functions.v1 != nullptr) {
      used_name = functions.base_name;
      result = list_into<nvmlProcessInfo_v1_t>(functions.v1, device, is_graphics, out);
    }
    // The graphics list only adds to the compute one; a device that cannot give it
    // (or a library without it) simply has none to add.
    if (is_graphics && (result == NVML_ERROR_NOT_SUPPORTED || result == NVML_ERROR_FUNCTION_NOT_FOUND)) return {};
    check(result, used_name + "(device " + std::to_string(index) + ")");
    return out;
  }
};

NvmlOpenResult Nvml::open(const char* library_name) {
  const std::string library_text = library_name;
  void* library = ::dlopen(library_name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = ::dlerror();
    return open_failure(library_text + " not found: " + (why != nullptr ? why : "dlopen failed"));
  }

  auto symbols = std::make_unique<Symbols>();
  symbols->init = symbol_as<decltype(symbols->init)>(library, {"nvmlInit_v2", "nvmlInit"});
  symbols->shutdown = symbol_as<decltype(symbols->shutdown)>(library, {"nvmlShutdown"});
  symbols->error_string = symbol_as<decltype(symbols->error_string)>(library, {"nvmlErrorString"});
  symbols->system_get_driver_version =
      symbol_as<decltype(symbols->system_get_driver_version)>(library, {"nvmlSystemGetDriverVersion"});
  symbols->device_get_count =
      symbol_as<decltype(symbols->device_get_count)>(library, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  symbols->device_get_handle_by_index = symbol_as<decltype(symbols->device_get_handle_by_index)>(
      library, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  symbols->device_get_name = symbol_as<decltype(symbols->device_get_name)>(library, {"nvmlDeviceGetName"});
  symbols->device_get_uuid = symbol_as<decltype(symbols->device_get_uuid)>(library, {"nvmlDeviceGetUUID"});
  symbols->device_get_memory_info =
      symbol_as<decltype(symbols->device_get_memory_info)>(library, {"nvmlDeviceGetMemoryInfo"});
  symbols->compute = find_process_list(library, "nvmlDeviceGetComputeRunningProcesses");
  symbols->graphics = find_process_list(library, "nvmlDeviceGetGraphicsRunningProcesses");

  const std::pair<bool, const char*> required[] = {
      {symbols->init != nullptr, "nvmlInit_v2"},
      {symbols->shutdown != nullptr, "nvmlShutdown"},
      {symbols->error_string != nullptr, "nvmlErrorString"},
      {symbols->system_get_driver_version != nullptr, "nvmlSystemGetDriverVersion"},
      {symbols->device_get_count != nullptr, "nvmlDeviceGetCount_v2"},
      {symbols->device_get_handle_by_index != nullptr, "nvmlDeviceGetHandleByIndex_v2"},
      {symbols->device_get_name != nullptr, "nvmlDeviceGetName"},
      {symbols->device_get_uuid != nullptr, "nvmlDeviceGetUUID"},
      {symbols->device_get_memory_info != nullptr, "nvmlDeviceGetMemoryInfo"},
      {symbols->compute.any(), "nvmlDeviceGetComputeRunningProcesses"},
  };
  for (const auto& [found, name] : required) {
    if (!found) {
      ::dlclose(library);
      return open_failure(library_text + " lacks " + name);
    }
  }

  const nvmlReturn_t init_result = symbols->init();
  if (init_result != NVML_SUCCESS) {
    std::string why = "nvmlInit failed: " + symbols->describe(init_result);
    ::dlclose(library);
    return open_failure(std::move(why));
  }

  NvmlOpenResult result;
  result.nvml.reset(new Nvml(library, std::move(symbols)));
  return result;
}

Nvml::Nvml(void* library, std::unique_ptr<const Symbols> symbols)
    : library_(library), symbols_(std::move(symbols)) {}

Nvml::~Nvml() {
  symbols_->shutdown();
  ::dlclose(library_);
}

std::string Nvml::driver_version() const {
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  symbols_->check(symbols_->system_get_driver_version(version, sizeof version), "nvmlSystemGetDriverVersion");
  return version;
}

unsigned Nvml::device_count() const {
  unsigned int count = 0;
  symbols_->check(symbols_->device_get_count(&count), "nvmlDeviceGetCount_v2");
  return count;
}

GpuDevice Nvml::device(unsigned index) const {
  const std::string on_device = "(device " + std::to_string(index) + ")";
  nvmlDevice_t handle = nullptr;
  symbols_->check(symbols_->device_get_handle_by_index(index, &handle), "nvmlDeviceGetHandleByIndex_v2" + on_device);

  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  symbols_->check(symbols_->device_get_name(handle, name, sizeof name), "nvmlDeviceGetName" + on_device);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  symbols_->check(symbols_->device_get_uuid(handle, uuid, sizeof uuid), "nvmlDeviceGetUUID" + on_device);
  nvmlMemory_t memory{};
  symbols_->check(symbols_->device_get_memory_info(handle, &memory), "nvmlDeviceGetMemoryInfo" + on_device);

  GpuDevice device;
  device.index = index;
  device.name = name;
  device.uuid = uuid;
  device.total = memory.total;
  device.free = memory.free;
  device.used = memory.used;
  return device;
}

std::vector<GpuDevice> Nvml::devices() const {
  std::vector<GpuDevice> all;
  const unsigned count = device_count();
  all.reserve(count);
  for (unsigned index = 0; index < count; ++index) all.push_back(device(index));
  return all;
}

std::vector<GpuProcess> Nvml::processes(unsigned index) const {
  nvmlDevice_t handle = nullptr;
  symbols_->check(symbols_->device_get_handle_by_index(index, &handle),
                  "nvmlDeviceGetHandleByIndex_v2(device " + std::to_string(index) + ")");
  return merge_gpu_processes(symbols_->list(symbols_->compute, handle, index, false),
                             symbols_->list(symbols_->graphics, handle, index, true));
}

std::vector<GpuProcess> merge_gpu_processes(const std::vector<GpuProcess>& compute,
                                            const std::vector<GpuProcess>& graphics) {
  std::vector<GpuProcess> merged;
  auto add = [&merged](GpuProcess process) {
    const auto same_pid = [&process](const GpuProcess& known) { return known.pid == process.pid; };
    const auto known = std::find_if(merged.begin(), merged.end(), same_pid);
    if (known == merged.end()) {
      merged.push_back(process);
    } else if (known->graphics == process.graphics) {
      known->used = (known->used && process.used) ? std::optional(*known->used + *process.used) : std::nullopt;
    }
  };
  for (GpuProcess process : compute) {
    process.graphics = false;
    add(process);
  }
  for (GpuProcess process : graphics) {
    process.graphics = true;
    add(process);
  }
  return merged;
}

}  // namespace isohost::probe
