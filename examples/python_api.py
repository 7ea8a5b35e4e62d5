"""The Python host API in a few lines (docs/python-api.md). After `make run`:

    PYTHONPATH=build/python python3 examples/python_api.py

Runs numpy in a worker of its own: a 64 MiB array goes there and back as a memfd, and each
failure arrives as the isohost exception named for it. tests/python_host/test_example.py runs it.
"""

import asyncio
import sys

import numpy as np

import isohost

config = {
    "host": {"call_timeout_seconds": 60},
    "env": {"numpy": {"python": sys.executable}},
}

with isohost.Host(config) as host:
    frames = np.random.default_rng(0).random((16, 1024, 1024), dtype=np.float32)  # 64 MiB
    doubled = host.call("numpy", "numpy:multiply", frames, 2)
    print("doubled:", doubled.shape, doubled.dtype, bool((doubled == frames * 2).all()))

    print("sum:", host.call("numpy", "math:fsum", [0.1] * 10))  # plain JSON both ways

    try:
        host.call("numpy", "math:sqrt", -1)
    except isohost.WorkerException as e:
        print("raised:", e.type_name, "-", e.message)

    async def two_at_once():
        return await asyncio.gather(host.call_async("numpy", "numpy:mean", frames),
                                    host.call_async("numpy", "os:getpid"))

    mean, pid = asyncio.run(two_at_once())
    print("mean: %.3f" % mean, "worker pid:", pid)
    worker = host.ps()["workers"][0]
    print("worker:", worker["env"], worker["state"], "%d MB PSS" % (worker["pss"] // 1_000_000))
