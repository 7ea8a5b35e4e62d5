"""The two hops of a call from a plain Python host, with stamps.patch applied: 400 calls of
stamp() below in a worker of /usr/bin/python3, with MODE between calls: none (back to back),
spin (0.5 ms of the caller's own work) or sleep (0.5 ms asleep). Prints the medians, in ms.
Usage, from the repository root: /usr/bin/python3 bench/results/cpu-2026-12-05-node-breakdown/hops.py MODE"""

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "build" / "python"))
import isohost  # noqa: E402


def stamp():
    """Runs in the worker: when its runtime read this call, and now."""
    from isohost_worker import runtime
    read = [t for name, t in runtime.STAMPS if name == "W0"][-1]
    runtime.STAMPS.clear()
    return [read, time.monotonic()]


def between(mode):
    if mode == "spin":
        start = time.perf_counter()
        while time.perf_counter() - start < 0.0005:
            pass
    elif mode == "sleep":
        time.sleep(0.0005)


def main(mode):
    config = {"env": {"t": {"python": "/usr/bin/python3", "path": [str(HERE)]}}}
    with isohost.Host(config) as host:
        host.call("t", "hops:stamp")
        to_worker, back = [], []
        for _ in range(400):
            between(mode)
            isohost.STAMPS.clear()
            read, replied = host.call("t", "hops:stamp")
            submitted = [t for name, t in isohost.STAMPS if name == "H1"][-1]
            returned = [t for name, t in isohost.STAMPS if name == "H2"][-1]
            to_worker.append((read - submitted) * 1e3)
            back.append((returned - replied) * 1e3)
    print("%s: submit->read %.3f  reply->caller %.3f ms"
          % (mode, statistics.median(to_worker), statistics.median(back)))


if __name__ == "__main__":
    main(sys.argv[1])
