"""Stopping the call in flight when the host asks (docs/protocol.md, "Interrupt").

The host's `interrupt` arrives on the side lane while the main thread runs a call. The side-lane
thread sets a flag that the call may poll (`isohost_worker.interrupted()`), and raises an
exception in the main thread, which Python delivers at its next bytecode: a loop in Python code
stops at once, code inside one long C call when it returns (the host kills the worker if that
takes longer than its grace period). Code that knows a better exception for its framework names
it with `on_interrupt` (ComfyUI's InterruptProcessingException, say).
"""

import threading


class Interrupted(Exception):
    """The host interrupted the call in flight (the default raised by an interrupt)."""


_lock = threading.Lock()
_exception = Interrupted
# The call that may be interrupted now: its request id, its thread, and what was done to it.
_call_id = None
_call_thread = None
_requested = False
_raised = False


def on_interrupt(exception_class):
    """Raise an instance of `exception_class` in the call's thread when the host interrupts it
    (None: the default, isohost_worker.Interrupted)."""
    global _exception
    if exception_class is None:
        exception_class = Interrupted
    if not (isinstance(exception_class, type) and issubclass(exception_class, BaseException)):
        raise TypeError("on_interrupt needs an exception class, not %r" % (exception_class,))
    _exception = exception_class


def interrupted():
    """True once the host has asked the call in flight to stop."""
    return _requested


class armed:
    """Marks the call `call_id` running on this thread for as long as the `with` block lasts.
    Whatever an interrupt raised is raised inside the block (the call's own error handling sees
    it) or nowhere: leaving clears one still pending."""

    def __init__(self, call_id):
        self._call_id = call_id

    def __enter__(self):
        global _call_id, _call_thread, _requested, _raised
        with _lock:
            _call_id, _call_thread = self._call_id, threading.get_ident()
            _requested = _raised = False
        return self

    def __exit__(self, *exc):
        global _call_id, _call_thread, _raised
        with _lock:
            if _raised:
                _set_async_exception(_call_thread, None)
            _call_id = _call_thread = None
            _raised = False
        return False


def on_call_thread():
    """Whether this thread runs the call in flight (not a thread of its own, or of a route)."""
    return _call_thread is not None and _call_thread == threading.get_ident()


def interrupt(request):
    """The side lane's `interrupt` op: stop call `request["call"]` if it is still the one running."""
    global _requested, _raised
    with _lock:
        if _call_id is None or request.get("call") != _call_id:
            return {"interrupted": False}
        _requested = True
        if not _raised:
            _set_async_exception(_call_thread, _exception)
            _raised = True
    return {"interrupted": True}


def _set_async_exception(thread_id, exception_class):
    import ctypes  # only a worker that is interrupted pays for it

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception_class) if exception_class else None)
