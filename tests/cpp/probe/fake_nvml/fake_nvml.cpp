#include "fake_nvml.hpp"

#include <cstring>

namespace {

constexpr int success = 0;
constexpr int invalid_argument = 2;
constexpr int insufficient_size = 7;
constexpr int function_not_found = 13;

FakeNvmlConfig config{};
int open_sessions = 0;
int short_calls = 0;

struct Device {
  int unused;
};
Device the_device{};

struct ProcessV1 {
  unsigned int pid;
  unsigned long long used;
};

struct ProcessV2 {
  unsigned int pid;
  unsigned long long used;
  unsigned int gpu_instance;
  unsigned int compute_instance;
};

void write_entry(ProcessV1* out, const FakeNvmlProcess& in) { *out = {in.pid, in.used}; }
void write_entry(ProcessV2* out, const FakeNvmlProcess& in) { *out = {in.pid, in.used, 0xFFFFFFFFu, 0xFFFFFFFFu}; }

void grow_compute_list() {
  for (unsigned int i = 0; i < config.compute_growth_per_short_call; ++i) {
    if (config.compute_count >= fake_nvml_max_processes) return;
    config.compute[config.compute_count] = {90000u + config.compute_count, 1u << 20};
    ++config.compute_count;
  }
}

template <typename Entry>
int list(int version, bool graphics, void* device, unsigned int* count, Entry* entries) {
  if (version > config.newest_list_version) return function_not_found;
  if (device != &the_device || count == nullptr) return invalid_argument;
  if (graphics && config.graphics_result != success) return config.graphics_result;
  const unsigned int have = graphics ? config.graphics_count : config.compute_count;
  const FakeNvmlProcess* source = graphics ? config.graphics : config.compute;
  if (*count < have) {
    *count = have;
    ++short_calls;
    if (!graphics) grow_compute_list();
    return insufficient_size;
  }
  *count = have;
  for (unsigned int i = 0; i < have; ++i) write_entry(&entries[i], source[i]);
  return success;
}

void copy_text(char* out, unsigned int size, const char* text) {
  std::strncpy(out, text, size);
  out[size - 1] = '\0';
}

}  // namespace

extern "C" {

void fake_nvml_configure(const FakeNvmlConfig* new_config) {
  config = *new_config;
  short_calls = 0;
}
int fake_nvml_open_sessions(void) { return open_sessions; }
int fake_nvml_short_calls(void) { return short_calls; }

int nvmlInit_v2(void) {
  if (config.init_result != success) return config.init_result;
  ++open_sessions;
  return success;
}
int nvmlShutdown(void) {
  --open_sessions;
  return success;
}
const char* nvmlErrorString(int result) {
  switch (result) {
    case success: return "Success";
    case invalid_argument: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case insufficient_size: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case function_not_found: return "Function Not Found";
    default: return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* version, unsigned int size) {
  copy_text(version, size, "999.99.99-fake");
  return success;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 1;
  return success;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return invalid_argument;
  *device = &the_device;
  return success;
}
int nvmlDeviceGetName(void* device, char* name, unsigned int size) {
  if (device != &the_device) return invalid_argument;
  copy_text(name, size, "Fake GPU 80GB");
  return success;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int size) {
  if (device != &the_device) return invalid_argument;
  copy_text(uuid, size, "GPU-00000000-1111-2222-3333-444444444444");
  return success;
}
struct Memory {
  unsigned long long total, free, used;
};
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  if (device != &the_device) return invalid_argument;
  *memory = {80ull << 30, 70ull << 30, 10ull << 30};
  return success;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned int* n, ProcessV2* p) { return list(3, false, d, n, p); }
int nvmlDeviceGetComputeRunningProcesses_v2(void* d, unsigned int* n, ProcessV2* p) { return list(2, false, d, n, p); }
int nvmlDeviceGetComputeRunningProcesses(void* d, unsigned int* n, ProcessV1* p) { return list(1, false, d, n, p); }
int nvmlDeviceGetGraphicsRunningProcesses_v3(void* d, unsigned int* n, ProcessV2* p) { return list(3, true, d, n, p); }
int nvmlDeviceGetGraphicsRunningProcesses_v2(void* d, unsigned int* n, ProcessV2* p) { return list(2, true, d, n, p); }
int nvmlDeviceGetGraphicsRunningProcesses(void* d, unsigned int* n, ProcessV1* p) { return list(1, true, d, n, p); }
}
