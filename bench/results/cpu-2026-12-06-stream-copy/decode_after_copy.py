"""A 12 MiB copy through parallel_copy, then a decode of a 12 MiB tensor value: the medians of
each (README.md). Run with ComfyUI's interpreter (torch) from the repository's root:
ISOHOST_COPY_LIBRARY=path/to/variant.so python bench/results/cpu-2026-12-06-stream-copy/decode_after_copy.py NAME"""
import mmap
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "build" / "python"))
import torch
from isohost_worker import values, parallel_copy
class Peer:
    open = True
peer = Peer()
t = torch.rand(1, 1024, 1024, 3)
src = torch.rand(1, 1024, 1024, 3)
view = memoryview(src.numpy()).cast("B")
dst = mmap.mmap(-1, view.nbytes)
encs = [values.encode(t, None) for _ in range(400)]
copy_ms, dec_us = [], []
for i, enc in enumerate(encs):
    s = time.perf_counter_ns(); parallel_copy.copy(dst, view); m = time.perf_counter_ns()
    v = values.decode(enc.description, list(enc.fds), peer); e = time.perf_counter_ns()
    del v
    if i >= 50:
        copy_ms.append((m - s) / 1e6); dec_us.append((e - m) / 1e3)
print("%-14s copy %.3f ms  decode after it %.1f us" % (sys.argv[1], statistics.median(copy_ms), statistics.median(dec_us)))
