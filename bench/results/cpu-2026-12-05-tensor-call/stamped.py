"""Where a call with a small tensor spends its time, against the same call with a set (both
pickled): 500 calls of stamp() each, in a worker of ComfyUI's interpreter, with monotonic stamps
taken in the caller (after the message is encoded) and in the worker (around the unpickling of
the arguments, and in the function). Prints the medians, in ms.
Usage, from the repository root: .venv/comfyui/bin/python bench/results/cpu-2026-12-05-tensor-call/stamped.py
(WP=N sets [host] worker_poll_microseconds)"""

import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "build" / "python"))
import isohost  # noqa: E402
import torch  # noqa: E402

config = {"env": {"t": {"python": sys.executable, "path": [str(HERE)]}}}
if os.environ.get("WP"):
    config["host"] = {"worker_poll_microseconds": int(os.environ["WP"])}
encoded = {}
original = isohost.Host._call_message


def stamped_message(self, *args):
    message = original(self, *args)
    encoded["at"] = time.monotonic()
    return message


isohost.Host._call_message = stamped_message
small = torch.rand(1, 8, 8, 3)
with isohost.Host(config) as host:
    host.call("t", "stamps:stamp", 1)
    for _ in range(2):
        for name, arg in (("set", {5}), ("tensor-small", small)):
            rows = []
            for _ in range(500):
                t0 = time.monotonic()
                a, b, f = host.call("t", "stamps:stamp", arg)
                t1 = time.monotonic()
                rows.append((encoded["at"] - t0, a - encoded["at"], b - a, f - b, t1 - f))
            med = [statistics.median(c) * 1e3 for c in zip(*rows)]
            print("%-13s encode %.3f  ->worker %.3f  decode %.3f  ->fn %.3f  back %.3f ms"
                  % (name, *med))
