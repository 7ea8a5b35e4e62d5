"""How fast a 12 MiB IMAGE can be copied into a memfd's kept mapping, the copy each isolated
node pays once each way (issue 12; bench/results/*-copy-probe). Prints one line per way:
the median and best of 200 copies, beside a warm torch clone (the limit bench comfyui counts).

The destinations rotate over four memfds, as the spares cycle between host and worker, so a
copy meets a destination another copy left out of the cache. The memmove rows on several
threads use isohost_worker.parallel_copy's Python threads (each slice at least its MIN_SLICE,
2 MiB: six at most for 12 MiB; the results of 2026-12-06 were taken with a copy of them, one
slice a thread); the "native" rows libisohost_copy.so's, which both sides copy on where it is
built (N slices taken by up to one thread per CPU, the last count the one parallel_copy passes;
before 2026-12-07 the library gave each of N threads one slice); the "after a node" rows each
copy a node's fresh output, as in a call.

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


def timed(copy, rounds=200, warmup=20, before=None):
    """The median and best of `rounds` calls of copy(i), in ms; `before(i)`, untimed, runs
    before each."""
    samples = []
    for i in range(rounds + warmup):
        if before is not None:
            before(i)
        start = time.perf_counter()
        copy(i)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), min(samples)


def native_copy():
    """libisohost_copy.so's functions (src/wire/copy_library.cpp), which the worker runtime
    and the Python host copy on: from $ISOHOST_BUILD_PYTHON (default build/python), None where
    not built. Its threads are as many as the first call asks for: the most that the rows ask."""
    directory = os.environ.get("ISOHOST_BUILD_PYTHON", str(REPO / "build" / "python"))
    library = parallel_copy._load(os.path.join(directory, parallel_copy.LIBRARY_NAME))
    if library is None:
        print("no native threads: %s not built" % directory)
    return library


def slice_counts(size, cpus):
    """The native rows' slice counts: one per thread for 2 to 16 threads, and as many as
    parallel_copy passes (one per NATIVE_SLICE), all on one thread per CPU."""
    return [n for n in (2, 4, 8, 16) if n <= cpus] + [size // parallel_copy.NATIVE_SLICE]


def native_rows(library, addresses, source, size, cpus):
    if library is None or cpus < 2:
        return []
    return [("native, %d slices" % n, timed(
        lambda i, n=n: library.copy(addresses[i % 4], source, size, n, cpus)))
            for n in slice_counts(size, cpus)]


def after_node_rows(image, addresses, tensors, size, cpus, library):
    """The copies again, each of a fresh node's output (1 - image on torch's threads, as
    ComfyUI's Invert) right after the node, as in an isolated node's call: torch's threads may
    still hold the cores then (OMP_WAIT_POLICY) and the source is new memory."""
    made = {}

    def node(i):
        made["out"] = 1.0 - image

    def address():
        return made["out"].data_ptr()

    rows = [("after a node: node itself", timed(node))]
    # The node again on a tensor over a memfd's mapping, as a worker's input arrives, rewritten
    # before each run as the host rewrites a spare (shmem pages, 4 KiB unless shmem THP is on).
    mapped = tensors[0].view(image.dtype).view(image.shape)
    rows.append(("node on a memfd's tensor", timed(
        lambda i: 1.0 - mapped, before=lambda i: mapped.copy_(image))))
    rows.append(("node on its own tensor, rewritten", timed(
        lambda i: 1.0 - image, before=lambda i: image.copy_(mapped))))
    rows.append(("after a node: memmove, one thread", timed(
        lambda i: ctypes.memmove(addresses[i % 4], address(), size), before=node)))
    for n in (4, 8):
        if n <= cpus:
            pool = parallel_copy._CopyThreads(n)
            rows.append(("after a node: memmove, %d threads" % n, timed(
                lambda i, pool=pool: pool.run(addresses[i % 4], address(), size), before=node)))
    for n in slice_counts(size, cpus)[1:]:
        if library is not None:
            rows.append(("after a node: native, %d slices" % n, timed(
                lambda i, n=n: library.copy(addresses[i % 4], address(), size, n, cpus),
                before=node)))
    rows.append(("after a node: torch copy_", timed(
        lambda i: tensors[i % 4].copy_(made["out"].view(torch.uint8).view(-1)), before=node)))
    return rows


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
    for knob in ("enabled", "shmem_enabled"):
        try:
            print("transparent huge pages, %s: %s" % (knob, Path(
                "/sys/kernel/mm/transparent_hugepage", knob).read_text().strip()))
        except OSError:
            pass
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
    library = native_copy()
    rows += native_rows(library, addresses, image.data_ptr(), size, cpus)
    threads = torch.get_num_threads()
    for n in (1, 2, 4, 8, 16):
        if n > cpus:
            break
        torch.set_num_threads(n)
        rows.append(("torch copy_, %d threads" % n, timed(
            lambda i: tensors[i % 4].copy_(source_bytes))))
    torch.set_num_threads(threads)
    rows += after_node_rows(image, addresses, tensors, size, cpus, library)
    base = rows[0][1][0]
    for name, (median, best) in rows:
        print("%-32s median %7.3f ms  best %7.3f  x%5.2f of the clone" % (name, median, best,
                                                                          median / base))


if __name__ == "__main__":
    main()
