"""Where a sleep's time goes, device to host, and what makes it shorter (issue 14, the out
figure): one process, torch, a model of 1, 4 and 16 GiB made by isohost_worker.stages, its
storages found and copied by isohost_worker.sleep's own code into a host buffer prepared in
several ways, each timed beside the pinned copy measured in the same run.

  python3 bench/gpu/sleep_out_probe.py [RUNTIME_DIR]   (RUNTIME_DIR: .gpu/python by default)

Ways of preparing the host buffer (a fresh anonymous mapping each time, huge pages advised):
  fresh        as sleep does today: the copy into it faults and zeroes each page
  small_pages  the same without MADV_HUGEPAGE (4 KiB faults, but no compaction for huge pages)
  populate_1   MADV_POPULATE_WRITE over the whole buffer by one thread, then the copy
  populate_N   the same by N threads, each a slice, all joined before the copy
  ahead_N      sleep's own: N threads populating chunk by chunk ahead of the copy, which waits
               for each (isohost_worker.populate)
  warm         a buffer already faulted in (what the copy alone costs)
"""

import gc
import mmap
import os
import sys
import time

RUNTIME = sys.argv[1] if len(sys.argv) > 1 else ".gpu/python"
sys.path.insert(0, RUNTIME)

import torch  # noqa: E402

from isohost_worker import populate, sleep, stages  # noqa: E402

GIB = 1 << 30
# "cpu" only to try the probe on a machine without a GPU (the CPU stand-in of sleep's tests).
DEVICE = os.environ.get("PROBE_DEVICE", "cuda")
SIZES = [int(g) for g in os.environ.get("PROBE_GIB", "1,4,16").split(",")]


def populate_first(address, nbytes, threads):
    """The whole range faulted in before the copy, by `threads` threads, a slice each (sleep's
    own Populator, with one chunk per thread)."""
    chunk = -(-nbytes // threads)
    chunk = -(-chunk // (2 << 20)) * (2 << 20)
    populator = populate.Populator(address, nbytes, chunk, threads)
    populator.ready(0, nbytes)
    populator.close()
    if populator.stopped_because is not None:
        raise OSError("MADV_POPULATE_WRITE: %s" % populator.stopped_because)


class Host:
    def __init__(self, nbytes, huge=True):
        self.map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if huge:
            self.map.madvise(mmap.MADV_HUGEPAGE)
        self.tensor = torch.frombuffer(self.map, dtype=torch.uint8)
        self.address = self.tensor.data_ptr()
        self.nbytes = nbytes

    def ready(self, start, length):
        pass  # what sleep's own buffer does when nothing faults ahead

    def close(self):
        self.tensor = None
        self.map.close()


def copy_out(groups, host, staging):
    for group in groups:
        sleep._copy_out(torch, group, host, staging)


VMSTAT = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall")


def vmstat():
    """The kernel's counters of huge-page faults and compaction stalls (/proc/vmstat)."""
    values = {}
    with open("/proc/vmstat") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name in VMSTAT:
                values[name] = int(value)
    return values


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def one_way(way, groups, nbytes, staging, warm):
    """Seconds to prepare and copy into a host buffer prepared `way`, and the parts."""
    parts = {}
    if way == "warm":
        host = warm
    elif way.startswith("ahead_"):
        parts["map"], host = timed(lambda: sleep._HostBuffer(torch, nbytes))
    else:
        parts["map"], host = timed(lambda: Host(nbytes, huge=way != "small_pages"))
    start = time.perf_counter()
    if way == "populate_1":
        parts["populate"], _ = timed(lambda: populate_first(host.address, nbytes, 1))
    elif way.startswith("populate_"):
        parts["populate"], _ = timed(
            lambda: populate_first(host.address, nbytes, int(way.split("_")[1])))
    elif way.startswith("ahead_"):
        host.populate_ahead(staging.chunk, int(way.split("_")[1]))
    parts["copy"], _ = timed(lambda: copy_out(groups, host, staging))
    if way.startswith("ahead_"):
        host.stop_populating()
    total = time.perf_counter() - start + parts.get("map", 0.0)
    if host is not warm:
        host.close()
    return total, parts


def main():
    print("# sleep out probe: torch", torch.__version__, "threads", torch.get_num_threads(),
          "cpus", os.cpu_count())
    for name in ("enabled", "defrag"):
        with open("/sys/kernel/mm/transparent_hugepage/" + name) as f:
            print("# thp", name, f.read().strip())
    if DEVICE == "cuda":
        torch.cuda.init()
        pinned = stages.pinned_copy_ms_per_gib(GIB)
    else:
        pinned = {"d2h": 1.0, "h2d": 1.0}
    print("# pinned copy ms/GiB: d2h %.2f h2d %.2f" % (pinned["d2h"], pinned["h2d"]))
    ways = ["fresh", "small_pages", "populate_1", "populate_8", "ahead_1", "ahead_2", "ahead_4",
            "ahead_8", "warm"]
    for gib in SIZES:
        nbytes_model = gib * GIB
        stages.hold_model(nbytes_model, device=DEVICE)
        gc.collect()
        t_find, found = timed(lambda: sleep._find(torch, DEVICE, set()))
        t_objects, objects = timed(gc.get_objects)
        print("\n## %d GiB: %d storages; sleep's walk over %d objects %.1f ms, of which "
              "gc.get_objects %.1f ms" % (gib, len(found.storages), len(objects), t_find * 1e3,
                                         t_objects * 1e3))
        del objects
        for chunk_mib in (64, 256):
            staging = sleep._staging_for(torch, DEVICE, chunk_mib << 20)
            groups = sleep._layout(found.storages)
            nbytes = groups[-1].end
            warm = Host(nbytes)
            populate_first(warm.address, nbytes, 1)
            one_way("fresh", groups, nbytes, staging, warm)  # a first copy, not counted
            for way in ways:
                before = vmstat()
                runs = [one_way(way, groups, nbytes, staging, warm) for _ in range(2)]
                after = vmstat()
                best = min(runs, key=lambda r: r[0])
                per_gib = best[0] * 1e3 / (nbytes / GIB)
                print("%-11s chunk %3d MiB  %7.1f ms/GiB  %5.2fx pinned   %s   (%s)" % (
                    way, chunk_mib, per_gib, per_gib / pinned["d2h"],
                    " ".join("%s %.1f ms" % (k, v * 1e3) for k, v in best[1].items()),
                    " ".join("%s +%d" % (k, after.get(k, 0) - before.get(k, 0)) for k in VMSTAT)))
                sys.stdout.flush()
            warm.close()
        t_sync, _ = timed(torch.cuda.synchronize if DEVICE == "cuda" else lambda: None)
        stages.drop_model()
        del found, groups
        gc.collect()
        t_empty, _ = timed(lambda: sleep._empty_cache(DEVICE))
        print("synchronize %.2f ms, empty_cache %.1f ms" % (t_sync * 1e3, t_empty * 1e3))


if __name__ == "__main__":
    main()
