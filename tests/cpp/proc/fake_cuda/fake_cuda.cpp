#include "fake_cuda.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

constexpr int success = 0;
constexpr int invalid_value = 1;
constexpr int not_initialized = 3;
constexpr int illegal_state = 401;

enum State { running = 0, locked = 1, checkpointed = 2, failed = 3 };

struct Switches {
  int init = success;
  int lock = success;
  int checkpoint = success;
  int restore = success;
  int unlock = success;
  std::string fail_state;
  int delay_ms = 0;
  // Where a file named after each locked pid exists from lock to unlock: the fixture module's
  // stand-in torch.cuda blocks while it does, as the real driver blocks a locked process.
  std::string locks_dir;
};

std::mutex mutex;
Switches switches;
bool initialised = false;
std::map<int, int> states;
std::string calls;
std::string calls_copy;

Switches parse(const char* spec) {
  Switches s;
  std::stringstream in(spec == nullptr ? "" : spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "fail_state" || key == "locks_dir") {
      (key == "fail_state" ? s.fail_state : s.locks_dir) = value;
      continue;
    }
    const int n = std::atoi(value.c_str());
    if (key == "init") s.init = n;
    if (key == "lock") s.lock = n;
    if (key == "checkpoint") s.checkpoint = n;
    if (key == "restore") s.restore = n;
    if (key == "unlock") s.unlock = n;
    if (key == "delay_ms") s.delay_ms = n;
  }
  return s;
}

struct LoadSwitches {
  LoadSwitches() { switches = parse(std::getenv("ISOHOST_FAKE_CUDA")); }
} load_switches;

void record(const std::string& line) {
  calls += line + "\n";
  if (const char* path = std::getenv("ISOHOST_FAKE_CUDA_LOG")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  }
}

int& state_of(int pid) { return states.try_emplace(pid, running).first->second; }

std::string lock_file(int pid) { return switches.locks_dir + "/" + std::to_string(pid); }

void set_locked(int pid, bool locked) {
  if (switches.locks_dir.empty()) return;
  if (!locked) {
    std::remove(lock_file(pid).c_str());
  } else if (FILE* f = std::fopen(lock_file(pid).c_str(), "w")) {
    std::fclose(f);
  }
}

// One step of the documented state machine: `from` -> `to` unless the switch names an error.
[[maybe_unused]] int step(const char* name, int pid, int from, int to, int Switches::*answer_field,
                          bool slow) {
  int delay = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    record(std::string(name) + " " + std::to_string(pid));
    if (!initialised) return not_initialized;
    if (state_of(pid) != from) return illegal_state;
    delay = slow ? switches.delay_ms : 0;
  }
  if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  std::lock_guard<std::mutex> lock(mutex);
  if (const int answer = switches.*answer_field; answer != success) return answer;
  state_of(pid) = switches.fail_state == name ? failed : to;
  if (to == running) set_locked(pid, false);
  return success;
}

}  // namespace

extern "C" {

void fake_cuda_configure(const char* spec) {
  std::lock_guard<std::mutex> lock(mutex);
  switches = parse(spec);
  states.clear();
}

const char* fake_cuda_calls(int clear) {
  std::lock_guard<std::mutex> lock(mutex);
  calls_copy = calls;
  if (clear != 0) calls.clear();
  return calls_copy.c_str();
}

int cuInit(unsigned int flags) {
  std::lock_guard<std::mutex> lock(mutex);
  record("cuInit " + std::to_string(flags));
  if (switches.init != success) return switches.init;
  initialised = true;
  return success;
}

int cuDriverGetVersion(int* version) {
  if (version == nullptr) return invalid_value;
#ifdef FAKE_CUDA_WITHOUT_CHECKPOINT
  *version = 12040;
#else
  *version = 12080;
#endif
  return success;
}

int cuGetErrorName(int error, const char** name) {
  switch (error) {
    case success:
      *name = "CUDA_SUCCESS";
      return success;
    case invalid_value:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return success;
    case not_initialized:
      *name = "CUDA_ERROR_NOT_INITIALIZED";
      return success;
    case 100:
      *name = "CUDA_ERROR_NO_DEVICE";
      return success;
    case illegal_state:
      *name = "CUDA_ERROR_ILLEGAL_STATE";
      return success;
    case 600:
      *name = "CUDA_ERROR_NOT_READY";
      return success;
    case 801:
      *name = "CUDA_ERROR_NOT_SUPPORTED";
      return success;
    case 999:
      *name = "CUDA_ERROR_UNKNOWN";
      return success;
    default:
      *name = nullptr;
      return invalid_value;
  }
}

#ifndef FAKE_CUDA_WITHOUT_CHECKPOINT
struct LockArgs {
  unsigned int timeoutMs;
  unsigned int reserved0;
  unsigned long long reserved1[7];
};

int cuCheckpointProcessLock(int pid, LockArgs* args) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    record("lock " + std::to_string(pid) + " " + std::to_string(args ? args->timeoutMs : 0));
    if (!initialised) return not_initialized;
    if (state_of(pid) != running) return illegal_state;
    if (switches.lock != success) return switches.lock;
    state_of(pid) = locked;
    set_locked(pid, true);
  }
  return success;
}
int cuCheckpointProcessCheckpoint(int pid, void*) {
  return step("checkpoint", pid, locked, checkpointed, &Switches::checkpoint, true);
}
int cuCheckpointProcessRestore(int pid, void*) {
  return step("restore", pid, checkpointed, locked, &Switches::restore, true);
}
int cuCheckpointProcessUnlock(int pid, void*) {
  return step("unlock", pid, locked, running, &Switches::unlock, false);
}
int cuCheckpointProcessGetState(int pid, int* state) {
  std::lock_guard<std::mutex> lock(mutex);
  record("state " + std::to_string(pid));
  if (!initialised) return not_initialized;
  *state = state_of(pid);
  return success;
}
#endif
}
