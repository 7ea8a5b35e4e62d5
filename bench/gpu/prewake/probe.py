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
import atexit, ctypes, os, shutil, statistics, subprocess, sys, tempfile, time
import torch
HERE = os.path.dirname(os.path.abspath(__file__))


def build_spin():
    where = tempfile.mkdtemp(prefix="prewake-")
    atexit.register(shutil.rmtree, where, True)
    library = os.path.join(where, "spin.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", os.path.join(HERE, "spin.c"), "-o", library],
                   check=True)
    return library

def gomp():
    for line in open("/proc/self/maps"):
        if "libgomp" in line:
            return ctypes.CDLL(line.split()[-1])
g = gomp()
spin = ctypes.CDLL(build_spin())
libc = ctypes.CDLL(None)
fns = {"sleep-team": ctypes.cast(libc.free, ctypes.c_void_p).value,
       "spin-team": ctypes.cast(spin.spin_until, ctypes.c_void_p).value,
       "yield-team": ctypes.cast(spin.spin_yield_until, ctypes.c_void_p).value}
g.GOMP_parallel_start.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
g.GOMP_parallel_start.restype = None
g.GOMP_parallel_end.restype = None
image = torch.rand(1, 1024, 1024, 3)
n = torch.get_num_threads()
DECODE_US = float(sys.argv[2]) if len(sys.argv) > 2 else 140
def busy(us):
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end: pass
flag = ctypes.c_int(0)
def sample(mode, pause):
    if pause: time.sleep(pause)
    s0 = time.perf_counter()
    if mode != "plain":
        flag.value = 0
        g.GOMP_parallel_start(fns[mode], None if mode == "sleep-team" else ctypes.addressof(flag), n)
    busy(DECODE_US)
    if mode != "plain":
        flag.value = 1
        g.GOMP_parallel_end()
    s = time.perf_counter()
    out = 1.0 - image
    e = time.perf_counter()
    del out
    return (e - s) * 1000, (e - s0) * 1000 - DECODE_US / 1000
samples = int(sys.argv[1]) if len(sys.argv) > 1 else 300
res = {}
modes = ["plain", "sleep-team", "spin-team", "yield-team"]
for r in range(3):
    for mode in modes:
        rows = [sample(mode, 0.001) for _ in range(samples)]
        res.setdefault(mode, []).append((statistics.median(x[0] for x in rows[samples // 10:]), statistics.median(x[1] for x in rows[samples // 10:])))
b2b = statistics.median([sample("plain", 0)[0] for _ in range(samples)][samples // 10:])
print("threads %d, policy %s, decode stand-in %.0f us; limit: the operation back to back %.3f ms" % (n, os.environ.get("OMP_WAIT_POLICY", "default"), DECODE_US, b2b))
for mode in modes:
    print("%-11s after 1 ms: op %s ms; op + wake's cost %s" % (mode, " ".join("%.3f" % x[0] for x in res[mode]), " ".join("%.3f" % x[1] for x in res[mode])))
