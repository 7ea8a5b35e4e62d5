"""How fast a 12 MiB IMAGE can be copied into a memfd's kept mapping, the copy each isolated
node pays once each way (issue 12; bench/results/*-copy-probe). Prints one line per way:
the median and best of 200 copies, beside a warm torch clone (the limit bench comfyui counts).

The destinations rotate over four memfds, as the spares cycle between host and worker, so a
copy meets a destination another copy left out of the cache. The memmove rows on several
threads use isohost_worker.parallel_copy's (each slice at least its MIN_SLICE, 2 MiB: six at
most for 12 MiB; the results of 2026-12-06 were taken with a copy of them, one slice a thread);
the "core threads" rows the Python host's (core_rows).

    python3 bench/gpu/copy_probe.py [MiB]
"""

import ctypes
import mmap
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
from isohost_worker import parallel_copy  # noqa: E402


def timed(copy, rounds=200, warmup=20):
    samples = []
    for i in range(rounds + warmup):
        start = time.perf_counter()
        copy(i)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), min(samples)


def core_rows(addresses, source, size, cpus):
    """The isohost package's core threads (src/wire/parallel_copy.hpp), which the Python host
    copies on: from $ISOHOST_BUILD_PYTHON (default build/python), none where not built."""
    sys.path.insert(0, os.environ.get("ISOHOST_BUILD_PYTHON", str(REPO / "build" / "python")))
    try:
        from isohost import _isohost
    except ImportError as e:
        print("no core threads: %s" % e)
        return []
    counts = [n for n in (2, 4, 8, 16) if n <= cpus]
    if not counts:
        return []
    _isohost.copy_memory(addresses[0], source, size, counts[-1])  # its threads: the most asked
    return [("core threads, %d" % n, timed(
        lambda i, n=n: _isohost.copy_memory(addresses[i % 4], source, size, n))) for n in counts]


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    size = mib << 20
    image = torch.rand(size // 4)
    source = (ctypes.c_char * size).from_address(image.data_ptr())
    maps = []
    for _ in range(4):
        fd = os.memfd_create("probe")
        os.ftruncate(fd, size)
        maps.append(mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE))
        os.close(fd)
    addresses = [ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in maps]
    tensors = [torch.frombuffer(m, dtype=torch.uint8) for m in maps]
    source_bytes = image.view(torch.uint8)
    cpus = len(os.sched_getaffinity(0))
    print("%d MiB, %d cpus, torch %s with %d threads" % (mib, cpus, torch.__version__,
                                                       torch.get_num_threads()))
    rows = [("clone (warm, torch's threads)", timed(lambda i: image.clone()))]
    rows.append(("mmap slice (one thread)", timed(lambda i: maps[i % 4].__setitem__(
        slice(None), source))))
    rows.append(("memmove (one thread)", timed(lambda i: ctypes.memmove(addresses[i % 4],
                                                                         image.data_ptr(), size))))
    for n in (2, 4, 8, 16):
        if n > cpus:
            break
        pool = parallel_copy._CopyThreads(n)  # the threads values.py copies with, n of them
        rows.append(("memmove, %d threads" % n, timed(
            lambda i: pool.run(addresses[i % 4], image.data_ptr(), size))))
    rows += core_rows(addresses, image.data_ptr(), size, cpus)
    threads = torch.get_num_threads()
    for n in (1, 2, 4, 8, 16):
        if n > cpus:
            break
        torch.set_num_threads(n)
        rows.append(("torch copy_, %d threads" % n, timed(
            lambda i: tensors[i % 4].copy_(source_bytes))))
    torch.set_num_threads(threads)
    base = rows[0][1][0]
    for name, (median, best) in rows:
        print("%-32s median %7.3f ms  best %7.3f  x%5.2f of the clone" % (name, median, best,
                                                                          median / base))


if __name__ == "__main__":
    main()
