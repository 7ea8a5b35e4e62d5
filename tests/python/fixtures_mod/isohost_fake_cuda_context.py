"""A stand-in for torch with a CUDA context, for the hibernation tests on machines without a GPU.

`open_context()` installs a `torch` module whose `torch.cuda` says it is initialised, as the
worker's memory report reads it. Like the real driver, its CUDA calls block while the host's
stand-in libcuda holds this process locked (a file named after the pid in
$ISOHOST_FAKE_CUDA_LOCKS exists), so a report that touched CUDA while hibernated would hang.
"""

import os
import sys
import time
import types

_calls_while_locked = 0


def _wait_while_locked():
    global _calls_while_locked
    locks = os.environ.get("ISOHOST_FAKE_CUDA_LOCKS")
    if not locks:
        return
    path = os.path.join(locks, str(os.getpid()))
    if os.path.exists(path):
        _calls_while_locked += 1
    while os.path.exists(path):
        time.sleep(0.01)


def _cuda_call(value):
    def call(*args, **kwargs):
        _wait_while_locked()
        return value
    return call


def open_context(reserved=64 << 20):
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        current_device=_cuda_call(0),
        memory_reserved=_cuda_call(reserved),
        memory_allocated=_cuda_call(reserved // 2),
        max_memory_reserved=_cuda_call(reserved),
        max_memory_allocated=_cuda_call(reserved // 2),
        empty_cache=_cuda_call(None),
        ipc_collect=_cuda_call(None),
        synchronize=_cuda_call(None),
    )
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    sys.modules["torch"] = torch
    return {"pid": os.getpid()}


def compute(x):
    """A 'kernel': blocks while the process is locked, as a real one would."""
    sys.modules["torch"].cuda.synchronize()
    return x * 2


def calls_while_locked():
    return _calls_while_locked


def break_cuda():
    """Every later CUDA call raises, so a test sees at once whether one was made."""
    def locked(*args, **kwargs):
        raise RuntimeError("CUDA is locked")
    cuda = sys.modules["torch"].cuda
    for name in ("current_device", "memory_reserved", "memory_allocated", "max_memory_reserved",
                 "max_memory_allocated"):
        setattr(cuda, name, locked)
    return True
