#pragma once

// The CUDA driver's checkpoint API, loaded at run time (`dlopen("libcuda.so.1")`, symbols by
// name), so that the host builds and runs without CUDA and never links against it.
//
//   CudaCheckpointOpen opened = CudaCheckpoint::open();   // dlopen + cuInit(0), nothing more
//   if (!opened.driver) log("cannot hibernate: {}", opened.failure);
//   CudaResult r = opened.driver->lock(pid, 2000ms);       // 0.5 ms on an idle process
//   r = opened.driver->checkpoint(pid);                     // 0.4 to 5 s: never on the loop
//
// The calls act on another process (the worker); this process only runs cuInit(0), which
// creates no context and holds no VRAM (measured: the host never appears in NVML's list).
//
// Thread safety: the driver serialises the calls itself; the pool makes them all from one
// thread (pool/hibernator.hpp) so that one process is never locked and restored at once.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace isohost::proc {

// CUprocessState, from the driver's public cuda.h.
enum class CudaProcessState : int {
  running = 0,
  locked = 1,
  checkpointed = 2,
  failed = 3,
  checkpointing = 4,
  restoring = 5,
};
const char* cuda_process_state_name(CudaProcessState state);

// One driver call's CUresult with the driver's name for it ("CUDA_ERROR_NOT_READY").
struct CudaResult {
  int code = 0;
  std::string name;
  [[nodiscard]] bool ok() const { return code == 0; }
  // The lock's timeout passed with CUDA work still running in the process.
  [[nodiscard]] bool not_ready() const;
};

class CudaCheckpoint;

struct CudaCheckpointOpen {
  std::unique_ptr<CudaCheckpoint> driver;  // null when hibernation cannot work here
  // Why driver is null, for a person: "libcuda.so.1 not found: ...", "the CUDA driver 12.4
  // lacks cuCheckpointProcessLock (hibernation needs 12.8 or later)", "cuInit(0) failed: ...".
  std::string failure;
};

class CudaCheckpoint {
 public:
  static constexpr const char* default_library = "libcuda.so.1";

  // Loads `library` and calls cuInit(0). Never throws: a machine without the driver, or with
  // one too old, is a normal case, and the failure says which.
  static CudaCheckpointOpen open(const std::string& library = default_library);

  // The library stays loaded for the life of the process: unloading an initialised driver is
  // not supported by NVIDIA, and a second open finds the same copy.
  ~CudaCheckpoint() = default;
  CudaCheckpoint(const CudaCheckpoint&) = delete;
  CudaCheckpoint& operator=(const CudaCheckpoint&) = delete;

  // cuDriverGetVersion: 12080 for CUDA 12.8.
  [[nodiscard]] int driver_version() const { return version_; }

  // RUNNING -> LOCKED: waits up to `timeout` for the process's CUDA work to pause; past it,
  // CUDA_ERROR_NOT_READY and the process runs on unharmed.
  CudaResult lock(pid_t pid, std::chrono::milliseconds timeout) const;
  // LOCKED -> CHECKPOINTED: every device allocation and the context move to its host RAM.
  CudaResult checkpoint(pid_t pid) const;
  // CHECKPOINTED -> LOCKED: the GPU state comes back.
  CudaResult restore(pid_t pid) const;
  // LOCKED -> RUNNING.
  CudaResult unlock(pid_t pid) const;
  CudaResult state(pid_t pid, CudaProcessState& out) const;

 private:
  struct Symbols;
  CudaCheckpoint(std::shared_ptr<const Symbols> symbols, int version);
  [[nodiscard]] CudaResult result(int code) const;

  std::shared_ptr<const Symbols> symbols_;
  int version_ = 0;
};

// "12.8" from 12080.
std::string cuda_version_text(int version);

}  // namespace isohost::proc
