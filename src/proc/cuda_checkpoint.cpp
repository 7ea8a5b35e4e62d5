#include "proc/cuda_checkpoint.hpp"

#include <dlfcn.h>

#include <cstdint>

namespace isohost::proc {
namespace {

// The few declarations used, written from the driver's public cuda.h (CUDA 12.8), since no
// CUDA header exists at build time. Layouts and values are part of the driver's stable ABI.
using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_TIMEOUT = 909;

struct CUcheckpointLockArgs {
  unsigned int timeoutMs;  // 0: no timeout
  unsigned int reserved0;
  std::uint64_t reserved1[7];
};
static_assert(sizeof(CUcheckpointLockArgs) == 64);

using InitFn = CUresult (*)(unsigned int);
using DriverGetVersionFn = CUresult (*)(int*);
using GetErrorNameFn = CUresult (*)(CUresult, const char**);
using LockFn = CUresult (*)(int, CUcheckpointLockArgs*);
// Checkpoint, restore and unlock take optional argument structs that hold only reserved
// fields (and restore's GPU remapping, unused here): null is what cuda.h documents for them.
using PidArgsFn = CUresult (*)(int, void*);
using GetStateFn = CUresult (*)(int, int*);

template <typename Function>
Function symbol(void* library, const char* name) {
  return reinterpret_cast<Function>(::dlsym(library, name));
}

}  // namespace

struct CudaCheckpoint::Symbols {
  GetErrorNameFn get_error_name = nullptr;
  LockFn lock = nullptr;
  PidArgsFn checkpoint = nullptr;
  PidArgsFn restore = nullptr;
  PidArgsFn unlock = nullptr;
  GetStateFn get_state = nullptr;
};

const char* cuda_process_state_name(CudaProcessState state) {
  switch (state) {
    case CudaProcessState::running:
      return "RUNNING";
    case CudaProcessState::locked:
      return "LOCKED";
    case CudaProcessState::checkpointed:
      return "CHECKPOINTED";
    case CudaProcessState::failed:
      return "FAILED";
    case CudaProcessState::checkpointing:
      return "CHECKPOINTING";
    case CudaProcessState::restoring:
      return "RESTORING";
  }
  return "UNKNOWN";
}

bool CudaResult::not_ready() const {
  return code == CUDA_ERROR_NOT_READY || code == CUDA_ERROR_TIMEOUT;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

CudaCheckpointOpen CudaCheckpoint::open(const std::string& library) {
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return {nullptr, library + " not found (no NVIDIA driver): " + (why ? why : "dlopen failed")};
  }
  const auto init = symbol<InitFn>(handle, "cuInit");
  const auto get_version = symbol<DriverGetVersionFn>(handle, "cuDriverGetVersion");
  auto symbols = std::make_shared<Symbols>();
  symbols->get_error_name = symbol<GetErrorNameFn>(handle, "cuGetErrorName");
  if (init == nullptr || get_version == nullptr || symbols->get_error_name == nullptr) {
    return {
        nullptr,
        library + " is not a CUDA driver (it lacks cuInit, cuDriverGetVersion or cuGetErrorName)"};
  }
  int version = 0;
  get_version(&version);
  symbols->lock = symbol<LockFn>(handle, "cuCheckpointProcessLock");
  symbols->checkpoint = symbol<PidArgsFn>(handle, "cuCheckpointProcessCheckpoint");
  symbols->restore = symbol<PidArgsFn>(handle, "cuCheckpointProcessRestore");
  symbols->unlock = symbol<PidArgsFn>(handle, "cuCheckpointProcessUnlock");
  symbols->get_state = symbol<GetStateFn>(handle, "cuCheckpointProcessGetState");
  for (const auto& [fn, name] :
       {std::pair<void*, const char*>{reinterpret_cast<void*>(symbols->lock),
                                      "cuCheckpointProcessLock"},
        {reinterpret_cast<void*>(symbols->checkpoint), "cuCheckpointProcessCheckpoint"},
        {reinterpret_cast<void*>(symbols->restore), "cuCheckpointProcessRestore"},
        {reinterpret_cast<void*>(symbols->unlock), "cuCheckpointProcessUnlock"},
        {reinterpret_cast<void*>(symbols->get_state), "cuCheckpointProcessGetState"}}) {
    if (fn == nullptr) {
      return {nullptr, "the CUDA driver (CUDA " + cuda_version_text(version) + ") lacks " + name +
                           ": hibernation needs a driver for CUDA 12.8 or later (R570+)"};
    }
  }
  // The only call this process makes for itself: it loads the driver's state and creates no
  // context (contexts are made by cuCtxCreate or the runtime's first device call, never here).
  std::shared_ptr<const Symbols> ready = std::move(symbols);
  CudaCheckpoint probe(ready, version);
  if (const auto r = probe.result(init(0)); !r.ok())
    return {nullptr, "cuInit(0) failed: " + r.name};
  return {std::unique_ptr<CudaCheckpoint>(new CudaCheckpoint(std::move(ready), version)), ""};
}

CudaCheckpoint::CudaCheckpoint(std::shared_ptr<const Symbols> symbols, int version)
    : symbols_(std::move(symbols)), version_(version) {}

CudaResult CudaCheckpoint::result(int code) const {
  const char* name = nullptr;
  if (symbols_->get_error_name(code, &name) != CUDA_SUCCESS || name == nullptr) {
    return {code, "CUresult " + std::to_string(code)};
  }
  return {code, name};
}

CudaResult CudaCheckpoint::lock(pid_t pid, std::chrono::milliseconds timeout) const {
  CUcheckpointLockArgs args{};
  args.timeoutMs = static_cast<unsigned int>(timeout.count());
  return result(symbols_->lock(static_cast<int>(pid), &args));
}

CudaResult CudaCheckpoint::checkpoint(pid_t pid) const {
  return result(symbols_->checkpoint(static_cast<int>(pid), nullptr));
}

CudaResult CudaCheckpoint::restore(pid_t pid) const {
  return result(symbols_->restore(static_cast<int>(pid), nullptr));
}

CudaResult CudaCheckpoint::unlock(pid_t pid) const {
  return result(symbols_->unlock(static_cast<int>(pid), nullptr));
}

CudaResult CudaCheckpoint::state(pid_t pid, CudaProcessState& out) const {
  int raw = 0;
  const auto r = result(symbols_->get_state(static_cast<int>(pid), &raw));
  if (r.ok()) out = static_cast<CudaProcessState>(raw);
  return r;
}

}  // namespace isohost::proc
