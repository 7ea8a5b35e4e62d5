"""What this process holds (the `memory` report) and how it lets go of it (`release`).

Nothing here imports torch or initialises CUDA: a worker that never used the GPU must not
pay for a CUDA context because the host asked how much memory it holds.
"""

import functools
import gc
import os
import sys
import time
import traceback

_release_callbacks = []
_report_hook = None

# The report taken as the host began to hibernate this process, or None while awake. Once the
# host has locked the process in the driver, every CUDA call here blocks until it is restored,
# and the side-lane thread that answers `memory` must not block: it answers from this copy.
_frozen_report = None


def on_release(fn):
    """Register `fn()` to run when the host asks this worker to release memory, before
    `gc.collect()` and the CUDA cache is emptied: the place to drop a model cache. Returns
    `fn`, so it also works as a decorator."""
    if not callable(fn):
        raise TypeError("on_release needs a callable, not %s" % type(fn).__name__)
    _release_callbacks.append(fn)
    return fn


def on_memory_report(fn):
    """Register `fn()` to describe a GPU allocator other than torch's (CuPy, JAX, a custom
    one): it returns {"reserved": bytes, "allocated": bytes} and, optionally,
    "release_can_free": allocated bytes that this worker's `release` would drop (its model
    caches). The host counts reserved - allocated + release_can_free as reclaimable. Replaces
    any earlier hook; returns `fn`, so it also works as a decorator."""
    global _report_hook
    if not callable(fn):
        raise TypeError("on_memory_report needs a callable, not %s" % type(fn).__name__)
    _report_hook = fn
    return fn


@functools.lru_cache(maxsize=None)
def torch_version():
    """The installed torch distribution's version, read from its metadata, or None."""
    try:
        import importlib.metadata
        return importlib.metadata.version("torch")
    except Exception:
        return None


def hibernating(request=None):
    """The host is about to move this process's GPU state into its RAM: report what it holds
    now, then answer from that copy, touching no CUDA, until `woken`."""
    global _frozen_report
    current = report()
    _frozen_report = dict(current, hibernated=True)
    return current


def woken(request=None):
    """The host restored this process: reports read CUDA again."""
    global _frozen_report
    _frozen_report = None
    return {"pid": os.getpid()}


def report():
    frozen = _frozen_report
    if frozen is not None:
        return frozen
    cuda = _initialised_cuda()
    device = allocator = None
    if cuda is not None:
        device = cuda.current_device()
        allocator = {
            "reserved": cuda.memory_reserved(device),
            "allocated": cuda.memory_allocated(device),
            "peak_reserved": cuda.max_memory_reserved(device),
            "peak_allocated": cuda.max_memory_allocated(device),
        }
    release_can_free = 0
    if allocator is None and _report_hook is not None:
        allocator, release_can_free = _hooked_allocator()
    return {
        "pid": os.getpid(),
        "release_can_free": release_can_free,
        "torch": torch_version(),
        "torch_imported": sys.modules.get("torch") is not None,
        "cuda_initialized": cuda is not None,
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
        "device": device,
        "allocator": allocator,
        "asleep": _asleep(),
        "sleep_buffer": _sleep_buffer(),
    }


def _asleep():
    # Read through sys.modules: sleep.py imports this module, and a process that never loaded
    # it (a zygote) is not asleep.
    sleep = sys.modules.get("isohost_worker.sleep")
    return None if sleep is None else sleep.summary()


def _sleep_buffer():
    prepare = sys.modules.get("isohost_worker.sleep_prepare")
    return None if prepare is None else prepare.report()


def _hooked_allocator():
    try:
        figures = _report_hook()
        allocator = {"reserved": int(figures["reserved"]), "allocated": int(figures["allocated"])}
        return allocator, int(figures.get("release_can_free", 0))
    except Exception:
        sys.stderr.write("isohost_worker: memory report hook %r failed:\n%s"
                         % (_report_hook, traceback.format_exc()))
        return None, 0


def release():
    started = time.monotonic()
    sleep = sys.modules.get("isohost_worker.sleep")
    if sleep is not None:
        # The callbacks are user code, which may touch tensors. The host buffer kept for the
        # next sleep stays: its pages are the kernel's already (MADV_FREE; MemAvailable counts
        # them), and dropping it would only make that sleep fault them in again.
        sleep.wake_before("a release")
    rss_before = rss()
    reserved_before = _reserved()
    callbacks = list(_release_callbacks)
    for fn in callbacks:
        try:
            fn()
        except Exception:
            # One pack's broken cache must not keep the others' memory from coming back.
            sys.stderr.write("isohost_worker: release callback %r failed:\n%s"
                             % (fn, traceback.format_exc()))
    collected = gc.collect()
    values = sys.modules.get("isohost_worker.values")  # no spares unless values were pickled
    if values is not None:
        values.drop_spares()  # memfds kept for reuse hold pages no process maps
    cuda = _initialised_cuda()
    if cuda is not None:
        cuda.empty_cache()
        cuda.ipc_collect()
    return {
        "rss_before": rss_before,
        "rss_after": rss(),
        "reserved_before": reserved_before,
        "reserved_after": _reserved(),
        "gc_collected": collected,
        "callbacks": len(callbacks),
        "seconds": time.monotonic() - started,
    }


def rss():
    with open("/proc/self/statm", "rb") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _reserved():
    cuda = _initialised_cuda()
    return None if cuda is None else cuda.memory_reserved()


def _initialised_cuda():
    """torch.cuda when torch is imported and has initialised CUDA, else None."""
    # The side-lane thread may ask while the main thread is half-way through `import torch`,
    # so any attribute may still be missing.
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return cuda
    except Exception:
        pass
    return None
