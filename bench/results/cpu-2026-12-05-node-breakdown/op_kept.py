"""1 - image (1x1024x1024x3 float32) in a worker of ComfyUI's interpreter: in a loop inside one
call and one call each, with its output freed at once or kept (the last four alive, as held
outputs are). Prints the op's median time and its page faults.
Usage, from the repository root (no patch needed):
  .venv/comfyui/bin/python bench/results/cpu-2026-12-05-node-breakdown/op_kept.py"""

import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
_held = {}


def setup():
    import torch
    _held["x"] = torch.rand(1, 1024, 1024, 3)


def op_once(keep):
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    y = 1.0 - _held["x"]
    took = (time.perf_counter() - start) * 1e3
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    if keep:
        kept = _held.setdefault("kept", [])
        kept.append(y)
        del kept[:-4]
    return [took, faults]


def op_loop(n, keep):
    return [op_once(keep) for _ in range(n)]


def main():
    sys.path.insert(0, str(REPO / "build" / "python"))
    import isohost
    config = {"env": {"t": {"python": str(REPO / ".venv" / "comfyui" / "bin" / "python"),
                            "path": [str(HERE)]}}}
    with isohost.Host(config) as host:
        host.call("t", "op_kept:setup")
        for keep in (False, True):
            runs = {"in a loop": host.call("t", "op_kept:op_loop", 300, keep),
                    "a call each": [host.call("t", "op_kept:op_once", keep) for _ in range(300)]}
            for how, samples in runs.items():
                print("output %s, %-11s: op %.3f ms, %d faults"
                      % ("kept" if keep else "freed", how, statistics.median(s[0] for s in samples),
                         statistics.median(s[1] for s in samples)))


if __name__ == "__main__":
    main()
