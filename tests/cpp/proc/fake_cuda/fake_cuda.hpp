#pragma once

// A stand-in libcuda for tests on machines without a driver: it keeps each pid's checkpoint
// state as the driver documents it (RUNNING -> LOCKED -> CHECKPOINTED -> LOCKED -> RUNNING,
// any other order answers CUDA_ERROR_ILLEGAL_STATE), records every call, and fails a step on
// request. Built as a MODULE library; the host loads it through ISOHOST_CUDA_LIBRARY (the real
// binary) or PoolOptions::cuda_library (tests in process).
//
// Switches, a comma-separated spec read from ISOHOST_FAKE_CUDA when the library is loaded and
// replaced by fake_cuda_configure():
//   init=N         cuInit answers N (100: CUDA_ERROR_NO_DEVICE)
//   lock=N         cuCheckpointProcessLock answers N (600: CUDA_ERROR_NOT_READY, the timeout)
//   checkpoint=N   cuCheckpointProcessCheckpoint answers N
//   restore=N      cuCheckpointProcessRestore answers N
//   unlock=N       cuCheckpointProcessUnlock answers N
//   fail_state=checkpoint|restore   the step succeeds but the process is left FAILED
//   delay_ms=N     checkpoint and restore take N ms (as the driver's 0.4 to 5 s do)
// ISOHOST_FAKE_CUDA_LOG, when set, names a file each call is appended to as a line
// ("cuInit 0", "lock 1234 2000", "checkpoint 1234", ...), for tests of the real binary.
// The same source built with FAKE_CUDA_WITHOUT_CHECKPOINT is a driver too old for the API.

extern "C" {

void fake_cuda_configure(const char* spec);
// Every call so far, one line each; forgets them when `clear` is non-zero.
const char* fake_cuda_calls(int clear);
}
