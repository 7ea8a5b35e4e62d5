"""Asking the host for VRAM before a load (docs/memory.md, "Admission").

No process can free another's memory, so a worker about to load a model asks first: the host
decides on its loop, one request at a time, and makes room by asking idle workers to release
their caches or by ending idle workers, before it answers:

    import isohost_worker

    with isohost_worker.reserve_vram(4 << 30):      # raises VramRefused if it cannot fit
        model = load_model().to("cuda")

    grant = isohost_worker.reserve_vram(4 << 30)    # or: look, then decide
    if not grant:
        print(grant.explanation)

The grant holds the bytes back from other workers until the `with` block ends, `done()` is
called, the call that asked ends, or the host's grant lifetime runs out, whichever is first:
by then the allocation shows in the driver's own figures.
"""

from isohost_worker import runtime


class VramRefused(MemoryError):
    """The host cannot make room for the reservation; the message has its arithmetic."""

    def __init__(self, reservation):
        super().__init__(reservation.explanation)
        self.reservation = reservation


class Reservation:
    """The host's answer. True when granted. `outcome` says how the room was made: "grant",
    "release_then_grant", "hibernate_then_grant", "reap_then_grant"; or "refuse", or
    "unmanaged" outside an isohost worker (granted, with nothing booked)."""

    def __init__(self, nbytes, device, answer):
        self.bytes = nbytes
        self.device = device
        self.granted = bool(answer.get("granted"))
        self.outcome = answer.get("outcome", "refuse")
        self.grant = answer.get("grant")
        self.explanation = answer.get("explanation", "")
        self.figures = answer
        self._done = not self.granted or self.grant is None

    def __bool__(self):
        return self.granted

    def __repr__(self):
        return "Reservation(%d bytes on GPU %s: %s)" % (self.bytes, self.device, self.outcome)

    def done(self):
        """The bytes are allocated (or no longer wanted): stop holding them back. Idempotent."""
        if self._done:
            return
        self._done = True
        if runtime.current is not None:
            runtime.current.tell({"op": "reserve_done", "grant": self.grant})

    def __enter__(self):
        if not self.granted:
            raise VramRefused(self)
        return self

    def __exit__(self, *exc):
        self.done()
        return False


def reserve_vram(nbytes, device=None):
    """Ask the host for `nbytes` of VRAM on `device` (an index as the host numbers GPUs; None:
    the environment's own). Blocks while the host makes room or waits for busy workers, up to
    its admission_wait_seconds. Returns a Reservation; never raises on refusal (the context
    manager does)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError("reserve_vram needs a whole number of bytes, 0 or more, not %r" % (nbytes,))
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise ValueError("device must be a GPU index or None, not %r" % (device,))
    if runtime.current is None:
        answer = {"granted": True, "outcome": "unmanaged",
                  "explanation": "not running in an isohost worker: nothing is booked"}
        return Reservation(nbytes, device, answer)
    message = {"op": "reserve_vram", "bytes": nbytes}
    if device is not None:
        message["device"] = device
    answer = runtime.current.ask(message)
    return Reservation(nbytes, answer.get("device", device), answer)
