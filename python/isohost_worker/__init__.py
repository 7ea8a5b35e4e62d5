"""isohost worker runtime: runs the host's calls inside this environment's interpreter.

Code running in a worker may use:

    import isohost_worker
    isohost_worker.on_release(my_cache.clear)   # run when the host asks for memory back
    with isohost_worker.reserve_vram(4 << 30):   # ask the host for room before a load
        model.to("cuda")
    isohost_worker.ask("progress", {"done": 3})  # the caller's handler answers (Host.on_ask)
    if isohost_worker.interrupted(): ...         # the caller asked this call to stop
"""

from isohost_worker.asks import AskFailed, ask, tell
from isohost_worker.frames import VERSION as PROTOCOL_VERSION
from isohost_worker.interrupts import Interrupted, interrupted, on_interrupt
from isohost_worker.memory import on_memory_report, on_release
from isohost_worker.vram import Reservation, VramRefused, reserve_vram

__all__ = ["PROTOCOL_VERSION", "AskFailed", "Interrupted", "Reservation", "VramRefused", "ask",
           "interrupted", "on_interrupt", "on_memory_report", "on_release", "reserve_vram", "tell"]
