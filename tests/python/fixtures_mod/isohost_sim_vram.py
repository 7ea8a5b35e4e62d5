"""Workers that stand in for GPU users on a simulated card (src/probe/simulated_gpu.hpp).

Each worker writes what it "holds" into the card's JSON file under a lock, and reports its
allocator figures to the host through isohost_worker.on_memory_report, as a worker using
CuPy or JAX would: `allocated` is in use, `cache` is what a release gives back.
"""

import fcntl
import json
import os
import time

import isohost_worker

MIB = 1 << 20
_held = {"path": None, "allocated": 0, "cache": 0}


def _write():
    # Readers (the host's probe, the tests) read without the lock, so the card is replaced
    # whole by a rename: a reader sees the old file or the new one, never a truncated one.
    path = _held["path"]
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            card = json.load(f)
        processes = [p for p in card.get("processes", []) if p.get("pid") != os.getpid()]
        processes.append({"pid": os.getpid(), "device": 0,
                          "used_mib": _held["allocated"] + _held["cache"]})
        card["processes"] = processes
        staged = "%s.%d" % (path, os.getpid())
        with open(staged, "w") as f:
            json.dump(card, f)
        os.replace(staged, path)


def _report():
    return {"reserved": (_held["allocated"] + _held["cache"]) * MIB,
            "allocated": _held["allocated"] * MIB}


def _release():
    _held["cache"] = 0
    _write()


def hold(path, allocated_mib, cache_mib=0):
    """Hold `allocated_mib` in use and `cache_mib` cached on the simulated card."""
    _held.update(path=path, allocated=allocated_mib, cache=cache_mib)
    isohost_worker.on_memory_report(_report)
    if _release not in isohost_worker.memory._release_callbacks:
        isohost_worker.on_release(_release)
    _write()
    return os.getpid()


def hold_busy(path, allocated_mib, seconds):
    """Hold `allocated_mib`, then stay busy for `seconds`."""
    hold(path, allocated_mib)
    time.sleep(seconds)
    return os.getpid()


def reserve(mib, keep_seconds=0.0, wait_first=0.0):
    """Ask the host for `mib` MiB, keep the call open `keep_seconds`, and return the answer."""
    time.sleep(wait_first)
    reservation = isohost_worker.reserve_vram(mib * MIB)
    time.sleep(keep_seconds)
    return dict(reservation.figures, granted=reservation.granted, outcome=reservation.outcome)


def reserve_after_mark(mark, mib):
    """Create the file `mark`, then ask for `mib` MiB: a test waits for the file to know the ask
    is on its way."""
    open(mark, "w").close()
    return reserve(mib)


def reserve_raw(message):
    """Send `message` to the host as a reserve_vram request as it is, past reserve_vram's own
    checks (a worker that is not this runtime), and return the host's answer."""
    from isohost_worker import runtime

    return runtime.current.ask(dict(message, op="reserve_vram"))


def reserve_in_context(mib):
    """reserve_vram as a context manager: the refusal raises VramRefused."""
    with isohost_worker.reserve_vram(mib * MIB) as reservation:
        return reservation.outcome
