"""Samples for `isohost bench transfer` (bench/transfer.cpp prints the figures): a 64 MiB
float32 numpy array sent to a worker through the Python API, and one received from it.

    python3 -m isohost.bench_transfer ROUNDS   # prints {"send_64MiB": [ms...], "recv_64MiB": [...]}

send: host.call(env, "builtins:len", array) to its answer; the worker maps the array.
recv: host.call(env, "isohost.bench_transfer:cached_array", n) to the array in the host, mapped
and not yet read (reading it first faults its pages in, which any fresh memory costs).
The worker imports this module (and so the isohost package) to keep one array made once.
"""

import json
import sys
import time

ELEMENTS = 16 << 20  # float32: 64 MiB
_cached = {}


def cached_array(n):
    """Worker side: the same array every time, so only its transfer is measured."""
    import numpy

    if n not in _cached:
        _cached[n] = numpy.arange(n, dtype=numpy.float32)
    return _cached[n]


def _samples(function, rounds):
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main(argv):
    import numpy

    import isohost

    rounds = int(argv[1]) if len(argv) > 1 else 20
    array = numpy.arange(ELEMENTS, dtype=numpy.float32)
    with isohost.Host({"env": {"bench": {"python": sys.executable}}}) as host:
        def send():
            assert host.call("bench", "builtins:len", array) == ELEMENTS

        def recv():
            received = host.call("bench", "isohost.bench_transfer:cached_array", ELEMENTS)
            assert received.nbytes == 4 * ELEMENTS

        for _ in range(3):  # start the worker, import numpy, warm both paths
            send()
            recv()
        figures = {"send_64MiB": _samples(send, rounds), "recv_64MiB": _samples(recv, rounds)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv)
