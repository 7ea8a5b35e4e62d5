"""Asking the host something during a call (docs/protocol.md, "Asks").

A call may need its caller: to report progress, to show a message, to ask whether to go on.
The caller serves these with handlers it registered by name (the Python host API's
`Host.on_ask`), on the thread that waits for the call, so they run where the same code would
run without isolation:

    import isohost_worker

    isohost_worker.tell("progress", {"value": 3, "total": 10})   # no answer awaited
    size = isohost_worker.ask("tile_size", {"width": 1024})      # blocks for the answer
"""

from isohost_worker import runtime
from isohost_worker.errors import AskFailed


def ask(name, value=None):
    """Ask the caller of the call in flight `name` with `value` (JSON) and return its answer.
    Raises AskFailed when its handler raised or it has none, TypeError or ValueError for a value
    that is not JSON, RuntimeError outside an isohost worker."""
    return _runtime().ask({"op": "ask", "name": _name(name), "value": value})


def tell(name, value=None):
    """ask() without waiting for an answer; a handler's failure is logged on the host. From
    any thread: sent while no call is in flight, it goes to the host's own handler of that
    name (the Python host runs it on its thread "isohost-tells")."""
    _runtime().tell({"op": "tell", "name": _name(name), "value": value})


def _runtime():
    if runtime.current is None:
        raise RuntimeError("not running in an isohost worker: there is no host to ask")
    return runtime.current


def _name(name):
    if not isinstance(name, str) or not name:
        raise TypeError("an ask's name must be a non-empty string, not %r" % (name,))
    return name


__all__ = ["AskFailed", "ask", "tell"]
