"""Whether torch's threads in ComfyUI's own process spin long after each CPU operation: an
isolated node that follows one then shares the machine's cores with them. libgomp's default
spins for some 300,000 rounds; on the H100 machine an isolated Invert right after a Blur in
process took 6.4 ms against 1.4 alone, and 1.5 with GOMP_SPINCOUNT=10000, ComfyUI's own Invert
as fast either way (bench/results/h100-2026-12-06-after-node). libgomp reads the variables once,
as torch loads, long before custom nodes do: the adapter can only say so (docs/comfyui.md)."""

import os

ADVICE = ("isohost: torch's threads in ComfyUI's process spin for milliseconds after each CPU "
          "operation (libgomp's default) on the cores that an isolated node right after one "
          "needs (6.4 ms for a node that took 1.4 alone, on a 16-core machine): start ComfyUI "
          "with GOMP_SPINCOUNT=10000 to keep them from it (docs/comfyui.md)")


def spin_long(environ=None, maps_path="/proc/self/maps"):
    """True where libgomp is loaded here with its default spin: neither GOMP_SPINCOUNT nor
    OMP_WAIT_POLICY=PASSIVE set (ACTIVE spins longer still)."""
    environ = os.environ if environ is None else environ
    if "GOMP_SPINCOUNT" in environ or environ.get("OMP_WAIT_POLICY", "").strip().upper() == \
            "PASSIVE":
        return False
    try:
        with open(maps_path) as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return False
