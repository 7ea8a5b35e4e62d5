"""Functions for the Python host API's tests (tests/python_host) and `isohost bench transfer`,
called inside real workers. numpy and torch are imported only by the functions that use them."""

import hashlib
import os
import threading

from isohost_worker import values

_arrays = {}


class WorkerOnly:
    """A class the host cannot import (this module is only on the worker's path)."""

    def __init__(self, n):
        self.n = n


def echo(x):
    return x


def describe(x):
    """What arrived: type, and for buffers their size, digest, and whether writable."""
    out = {"type": type(x).__name__}
    if isinstance(x, (bytes, bytearray, memoryview)):
        view = memoryview(x)
        out.update(nbytes=view.nbytes, readonly=view.readonly,
                   sha256=hashlib.sha256(view.tobytes()).hexdigest())
    elif hasattr(x, "nbytes") and hasattr(x, "dtype"):
        out.update(nbytes=int(x.nbytes), dtype=str(x.dtype), shape=list(x.shape))
    return out


def layout(x):
    """A tensor's or an array's strides (a tensor's in elements, an array's in bytes) and
    whether it is contiguous, as the worker received it."""
    if hasattr(x, "is_contiguous"):
        return {"strides": list(x.stride()), "contiguous": x.is_contiguous()}
    return {"strides": list(x.strides), "contiguous": bool(x.flags.c_contiguous)}


def chw(a):
    """An (H, W, C) array as (C, H, W), a view."""
    return a.transpose(2, 0, 1)


def permuted(t):
    """`t` (N, C, H, W) as (N, H, W, C), a view, as ComfyUI's nodes hand images on."""
    return t.permute(0, 2, 3, 1)


def make_bytes(n, fill):
    return bytes([fill]) * n


def float32_array(n):
    """A cached float32 array of n elements (made once, so a benchmark measures transfer)."""
    import numpy

    if n not in _arrays:
        _arrays[n] = numpy.arange(n, dtype=numpy.float32)
    return _arrays[n]


def nbytes(x):
    return int(x.nbytes)


def scale(x, factor):
    """x * factor, of the same type (numpy array or torch tensor)."""
    return x * factor


def worker_only(n):
    return WorkerOnly(n)


def unpicklable_result():
    return threading.Lock()


def cuda_tensor_reduction(n):
    """What a CUDA tensor of n float32 zeros looks like on the wire from a worker with CUDA:
    the host must deliver it on the CPU with a DeviceFallbackWarning when it has no CUDA."""

    class FromCuda:
        def __reduce__(self):
            return (values._rebuild_tensor, (bytearray(4 * n), "float32", [n], False, "cuda:0"))

    return FromCuda()


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def mapping_count():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def checksum(x):
    """[length, sum of the bytes] of a bytes-like value: content checked from C++."""
    view = memoryview(x).cast("B")
    return [view.nbytes, sum(view)]


def copy_report(size):
    """What this worker copies a buffer of `size` bytes on (isohost_worker.parallel_copy):
    whether its library is loaded, how many OS threads the copy started, the Python copy
    threads, the threads it copies on in all, and whether every byte arrived."""
    from isohost_worker import parallel_copy

    source = bytearray(os.urandom(size))
    destination = bytearray(size)
    before = len(os.listdir("/proc/self/task"))
    parallel_copy.copy(destination, source)
    return {"library": parallel_copy._library() is not None,
            "started": len(os.listdir("/proc/self/task")) - before,
            "python_threads": [t.name for t in threading.enumerate()
                               if t.name.startswith("isohost-copy")],
            "count": parallel_copy._native_count(), "equal": destination == source}
