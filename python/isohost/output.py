"""The workers' output for a Python host that asked for it (Host(on_output=...),
docs/python-api.md, "Worker output"): each line a worker writes to its stdout or stderr is
handed to the host's handler on the thread "isohost-output", in the order the host read it,
instead of going to isohost's own log."""

import collections
import logging
import threading
import weakref

from isohost.core_batches import core_batches

_log = logging.getLogger("isohost")

OutputLine = collections.namedtuple("OutputLine", "env pid stream text")
OutputLine.__doc__ = """A line a worker wrote: `env` its environment, `pid` its process, `stream`
"stdout" or "stderr", `text` the line without its newline, decoded as UTF-8 (a byte that is no
part of UTF-8 text shown as \\xNN); its control characters (ANSI colours, \\r) are the worker's,
for the handler to keep or escape. A line is cut at 16 KiB."""


class OutputRelay:
    """The thread "isohost-output", which takes the lines from the core and hands them to the
    handler, and how far it has got: a call's result waits until the lines its worker wrote
    before replying have been handled (wait_for)."""

    def __init__(self, core, handler):
        self._handler = handler
        self._handled = 0  # by the core's numbering: every line taken, handled or dropped
        self._ended = False
        self._failed = False
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._serve, args=(weakref.ref(core),),
                                        name="isohost-output", daemon=True)
        self._thread.start()

    def wait_for(self, read, timeout):
        """Waits at most `timeout` seconds until the lines numbered up to `read` (a call's
        output_read) have been handled. At once on the thread itself: a handler that calls the
        host must not wait for its own thread."""
        if self._handled >= read or threading.current_thread() is self._thread:
            return
        with self._progress:
            self._progress.wait_for(lambda: self._ended or self._handled >= read, timeout)

    def join(self, timeout):
        """Waits at most `timeout` seconds for the thread to hand on the last lines (the host
        has closed); a handler stuck in a write does not hold the caller longer."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _serve(self, core_ref):
        try:
            for lines, dropped, through in core_batches(core_ref, "take_output"):
                for env, pid, stream, raw in lines:
                    text = raw.decode("utf-8", "backslashreplace")
                    self._hand(OutputLine(env, pid, stream, text))
                if dropped:
                    _log.warning("isohost: %d lines of the workers' output were dropped: the "
                                 "output handler fell behind", dropped)
                with self._progress:
                    self._handled = through
                    self._progress.notify_all()
        finally:
            with self._progress:
                self._ended = True
                self._progress.notify_all()

    def _hand(self, line):
        try:
            self._handler(line)
        except Exception as e:
            # Once: a handler that fails on every line must not flood the log in its place.
            if not self._failed:
                self._failed = True
                _log.warning("isohost: the output handler failed (later failures are not "
                             "logged): %s: %s", type(e).__name__, e)
