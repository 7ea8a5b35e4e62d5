"""How long one torch operation takes after a pause, under libgomp's wait policies (issue 12).

An isolated node runs slower in its worker than in process. ComfyUI's workers get
OMP_WAIT_POLICY=PASSIVE (docs/comfyui.md): torch's threads sleep as soon as an operation is
done, so a node's first operation wakes them; in process they still spin from the one before.
This times `1.0 - image` on a 1024x1024 IMAGE (12 MiB), back to back and after pauses like
those between two nodes, in a fresh interpreter per policy; each figure beside the limit, the
default policy's back to back (what `bench comfyui`'s in-process figure measures), and the ratio.
More policies may follow, each NAME=VAR=VALUE[,VAR=VALUE] (GOMP_SPINCOUNT: how many rounds the
threads spin before they sleep):

    python3 bench/comfyui/omp_wait_probe.py [SAMPLES [NAME=VAR=VALUE,...]...]
"""

import os
import statistics
import subprocess
import sys
import time

POLICIES = {"default (spin, then sleep)": {}, "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
            "one thread": {"OMP_NUM_THREADS": "1"}}
PAUSES_MS = (0.0, 0.1, 1.0)


def measure(samples):
    import torch

    image = torch.rand(1, 1024, 1024, 3)
    for pause in PAUSES_MS:
        times = []
        for _ in range(samples):
            if pause:
                time.sleep(pause / 1000)
            start = time.perf_counter()
            out = 1.0 - image
            times.append((time.perf_counter() - start) * 1000)
            del out
        print("%.3f" % statistics.median(times[samples // 10:]), end=" ")
    print(torch.get_num_threads())


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        measure(int(sys.argv[2]))
        return
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    policies = dict(POLICIES)
    for setting in sys.argv[2:]:
        name, _, variables = setting.partition("=")
        policies[name] = dict(v.split("=", 1) for v in variables.split(",") if v)
    rows = []
    for name, variables in policies.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
        env.update(variables)
        out = subprocess.run([sys.executable, __file__, "--one", str(samples)], env=env,
                             check=True, capture_output=True, text=True).stdout.split()
        rows.append((name, [float(v) for v in out[:-1]], out[-1]))
    limit = rows[0][1][0]
    print("%-28s %s  threads  (limit: %s back to back, %.3f ms)" % (
        "policy", "  ".join("%-20s" % ("pause %g ms (ratio)" % p) for p in PAUSES_MS),
        rows[0][0], limit))
    for name, figures, threads in rows:
        print("%-28s %s  %s" % (name, "  ".join(
            "%-20s" % ("%.3f ms (%.2f)" % (f, f / limit)) for f in figures), threads))


if __name__ == "__main__":
    main()
