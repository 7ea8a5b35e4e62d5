#pragma once

// A stand-in libnvidia-ml for tests on machines without a driver. Built as its own shared
// library; the test dlopens it, configures it through fake_nvml_configure, then points
// Nvml::open at the same path (dlopen returns the same loaded copy).

extern "C" {

struct FakeNvmlProcess {
  unsigned int pid;
  unsigned long long used;  // 0xFFFFFFFFFFFFFFFF: NVML_VALUE_NOT_AVAILABLE
};

enum { fake_nvml_max_processes = 2048 };

struct FakeNvmlConfig {
  int init_result;  // what nvmlInit_v2 returns; 0 = success
  // 3, 2 or 1: the list functions newer than this answer NVML_ERROR_FUNCTION_NOT_FOUND, as a
  // library newer than its driver does.
  int newest_list_version;
  unsigned int compute_count;
  FakeNvmlProcess compute[fake_nvml_max_processes];
  unsigned int graphics_count;
  FakeNvmlProcess graphics[fake_nvml_max_processes];
  int graphics_result;  // non-zero: what the graphics list answers instead of listing
  // Processes that appear between NVML's count and the caller's next call: each answer of
  // NVML_ERROR_INSUFFICIENT_SIZE adds this many compute processes (pids counting up from 90000).
  unsigned int compute_growth_per_short_call;
};

void fake_nvml_configure(const FakeNvmlConfig* config);
// nvmlInit calls minus nvmlShutdown calls: shows whether a session was closed.
int fake_nvml_open_sessions(void);
// How many times a list function was called with too small an array.
int fake_nvml_short_calls(void);
}
