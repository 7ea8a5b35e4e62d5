"""Does waking torch's threads while a call decodes make its first operation run as back to back?

A worker's torch threads sleep between operations (OMP_WAIT_POLICY=PASSIVE), so a node's first
operation after the worker waited for its call wakes them (bench/results/
h100-2026-12-07-omp-pause). Here, after a 1 ms pause, a busy loop stands in for the call's
decoding (DECODE_US); libgomp's GOMP_parallel_start wakes the team before it and
GOMP_parallel_end joins it after, the threads running free(NULL) and sleeping on the team's
barrier (sleep-team), or spinning on a flag the loop sets at its end (spin-team; yield-team
yields the CPU between looks), then `1.0 - image` on a 1024x1024 IMAGE is timed. Each figure
beside the operation back to back; "op + wake's cost" adds what the wake added to the loop:

    OMP_WAIT_POLICY=PASSIVE python3 bench/gpu/prewake/probe.py [SAMPLES] [DECODE_US]

Needs a C compiler (spin.c, built into a temporary directory) and torch built with libgomp.
"""
import atexit
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("plain", "sleep-team", "spin-team", "yield-team")
ROUNDS = 3
PAUSE_SECONDS = 0.001


def build_spin():
    where = tempfile.mkdtemp(prefix="prewake-")
    atexit.register(shutil.rmtree, where, True)
    library = os.path.join(where, "spin.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", os.path.join(HERE, "spin.c"), "-o", library],
                   check=True)
    return library


def loaded_libgomp():
    """The libgomp that torch's operations use: the one loaded in this process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libgomp" in line:
                return ctypes.CDLL(line.split()[-1])
    sys.exit("torch here does not use libgomp")


class Team:
    """Wakes torch's thread team before a stretch of work and joins it after."""

    def __init__(self):
        self.gomp = loaded_libgomp()
        self.gomp.GOMP_parallel_start.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
        self.gomp.GOMP_parallel_start.restype = None
        self.gomp.GOMP_parallel_end.restype = None
        spin = ctypes.CDLL(build_spin())
        address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        self.flag = ctypes.c_int(0)
        # What each woken thread runs: free(NULL) returns at once; the others wait for the flag.
        self.runs = {"sleep-team": (address(ctypes.CDLL(None).free), None),
                     "spin-team": (address(spin.spin_until), ctypes.addressof(self.flag)),
                     "yield-team": (address(spin.spin_yield_until), ctypes.addressof(self.flag))}
        self.threads = torch.get_num_threads()

    def wake(self, mode):
        self.flag.value = 0
        function, argument = self.runs[mode]
        self.gomp.GOMP_parallel_start(function, argument, self.threads)

    def join(self):
        self.flag.value = 1
        self.gomp.GOMP_parallel_end()


def busy(microseconds):
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


def sample(team, image, mode, pause, decode_us):
    """(the operation, the operation and what waking added to the decoding), in ms."""
    if pause:
        time.sleep(pause)
    start = time.perf_counter()
    if mode != "plain":
        team.wake(mode)
    busy(decode_us)
    if mode != "plain":
        team.join()
    op_start = time.perf_counter()
    out = 1.0 - image
    end = time.perf_counter()
    del out
    return (end - op_start) * 1000, (end - start) * 1000 - decode_us / 1000


def main():
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    decode_us = float(sys.argv[2]) if len(sys.argv) > 2 else 140
    team = Team()
    image = torch.rand(1, 1024, 1024, 3)
    kept = slice(samples // 10, None)
    figures = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for mode in MODES:
            rows = [sample(team, image, mode, PAUSE_SECONDS, decode_us) for _ in range(samples)]
            figures[mode].append(tuple(statistics.median(row[i] for row in rows[kept])
                                       for i in (0, 1)))
    back_to_back = statistics.median(
        [sample(team, image, "plain", 0, decode_us)[0] for _ in range(samples)][kept])
    print("threads %d, policy %s, decode stand-in %.0f us; limit: the operation back to back "
          "%.3f ms" % (team.threads, os.environ.get("OMP_WAIT_POLICY", "default"), decode_us,
                       back_to_back))
    for mode in MODES:
        print("%-11s after 1 ms: op %s ms; op + wake's cost %s" % (
            mode, " ".join("%.3f" % f[0] for f in figures[mode]),
            " ".join("%.3f" % f[1] for f in figures[mode])))


if __name__ == "__main__":
    main()
