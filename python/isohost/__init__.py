"""isohost for Python hosts: run functions in isolated per-environment workers and pass real
Python objects both ways (docs/python-api.md).

    import isohost, numpy as np

    with isohost.Host({"env": {"np": {"python": "/usr/bin/python3"}}}) as host:
        total = host.call("np", "numpy:sum", np.ones((1024, 1024), np.float32))

Plain JSON values travel as JSON; anything else as a pickle (protocol 5) whose large buffers
(numpy arrays, torch tensors, bytes, bytearray, memoryview) travel as memfds: one copy on the
sending side, none on the receiving side for arrays and tensors.
"""

import asyncio
import json
import logging
import os
import threading
import time
import weakref

import isohost_worker
from isohost_worker import values
from isohost_worker.values import DeviceFallbackWarning

try:
    from isohost import _isohost
except ImportError as _error:
    from isohost.extension import import_error

    raise import_error(_error) from _error
from isohost import config as _config
from isohost.core_batches import core_batches
from isohost.output import OutputLine, OutputRelay
from isohost.errors import (BadRequest, CallTimeout, ConfigError, ControlError, CrashLoop,
                            DecodeError, EncodeError, Error, HibernateFailed, HostShuttingDown,
                            Interrupted, ProtocolError, SpawnFailed, StartTimeout, TargetNotFound,
                            UnknownEnvironment, WakeFailed, WorkerCrashed, WorkerException,
                            from_core)

__all__ = [
    "Host", "Call", "Error", "SpawnFailed", "StartTimeout", "ProtocolError", "WorkerCrashed",
    "CallTimeout", "WorkerException", "TargetNotFound", "BadRequest", "CrashLoop",
    "UnknownEnvironment", "HostShuttingDown", "ConfigError", "ControlError", "EncodeError",
    "DecodeError", "HibernateFailed", "WakeFailed", "Interrupted", "DeviceFallbackWarning",
    "OutputLine",
]

_log = logging.getLogger("isohost")

# A JSON body past this goes pickled instead (a frame's body is at most 64 MiB).
_JSON_LIMIT = 60 << 20

# How long a call's result waits for the output handler to have handled the lines the worker
# wrote before replying: a handler stuck in a write delays no call longer.
_OUTPUT_WAIT_SECONDS = 1.0

# How long close() waits for the output handler to hand on the workers' last lines.
_OUTPUT_JOIN_SECONDS = 5.0

# Where the workers' runtime lives: beside this package (build/python).
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(isohost_worker.__file__)))


class Host:
    """One pool of workers, one per configured environment, started lazily on first call.

    `config` is a path to a TOML file (README, "Usage") or the same as a dict. Every method
    may be called from any thread; the blocking ones release the GIL while they wait.

    `on_output`: each line the workers write to their stdout and stderr goes to
    `on_output(line)` (an isohost.OutputLine) on this host's thread "isohost-output", in the
    order the host read it, instead of isohost's log; a call's result waits until the lines its
    worker wrote before replying have been handed over (docs/python-api.md, "Worker output").
    """

    def __init__(self, config=None, on_output=None):
        self._peers = {}
        self._ask_handlers = {}
        self._tells = None
        self._output = None
        relay = on_output is not None
        try:
            if config is None:
                self._core = _isohost.Core.from_toml("", "(defaults)", os.getcwd(), _RUNTIME_DIR,
                                                     relay)
            elif isinstance(config, dict):
                self._core = _isohost.Core.from_toml(_config.to_toml(config), "(dict)",
                                                     os.getcwd(), _RUNTIME_DIR, relay)
            else:
                self._core = _isohost.Core(os.fspath(config), _RUNTIME_DIR, relay)
        except _isohost.CoreError as e:
            raise from_core(str(e)) from None
        except TypeError as e:
            raise ConfigError(str(e)) from None
        if relay:
            self._output = OutputRelay(self._core, on_output)

    def call(self, env, target, *args, **kwargs):
        """Run `target` ("module:function") in environment `env`'s worker and return its
        result. Raises an isohost.Error subclass named for what went wrong."""
        return self.start(env, target, *args, **kwargs).result()

    def start(self, env, target, *args, **kwargs):
        """call() without waiting: the Call in flight, to wait for (result), or to stop
        (interrupt). The arguments are pickled here, before this returns."""
        return Call(self, self._submit("call", env, target, args, kwargs), env, target)

    async def call_async(self, env, target, *args, **kwargs):
        """call() for asyncio: the event loop waits on a descriptor, no thread is held. The
        arguments are pickled (one copy of each large buffer) before the first await. The
        call's asks are served on the loop's thread."""
        return await self.start(env, target, *args, **kwargs).result_async()

    def on_ask(self, name, handler):
        """Serve the worker's `isohost_worker.ask(name, value)` (and `tell`) with
        `handler(value)`, whose return value (JSON) is the answer; an exception it raises
        becomes isohost_worker.AskFailed in the worker, with its type and message. The handler
        runs on the thread that waits for the call that asked (Host.call's caller, Call.result's,
        the event loop's for call_async); for an ask or a tell a worker sends while none of its
        calls is in flight (from a thread or a task of its own), on this host's thread
        "isohost-tells", one at a time. None removes the handler."""
        if handler is None:
            self._ask_handlers.pop(name, None)
            return
        self._ask_handlers[name] = handler
        if self._tells is None:
            # A weak reference to the core, and not the Host: a Host dropped without close()
            # still ends its workers when it is collected, as it did without this thread.
            self._tells = threading.Thread(target=_serve_tells,
                                           args=(weakref.ref(self._core), self._ask_handlers),
                                           name="isohost-tells", daemon=True)
            self._tells.start()
            self._core.serve_between_calls()

    def ps(self):
        """Every worker's state and memory, the host's own, and the device's (as `isohost ps
        --json` prints them)."""
        return json.loads(self._core_call(self._core.status))

    def release(self, env):
        """Ask `env`'s worker to drop its caches; returns its receipt ({"released": False, ...}
        when none runs). Memfds this process keeps to send back to that worker are closed."""
        values.drop_spares(self._peer(env))
        return self._finish_now(self._submit("release", env), self._peer(env))

    def reap(self, env):
        """End `env`'s worker once it is idle; the next call starts a fresh one."""
        values.drop_spares(self._peer(env))
        return self._finish_now(self._submit("reap", env), self._peer(env))

    def sleep(self, env):
        """Have `env`'s idle worker move its models into its own host RAM at the bus's speed
        (docs/sleep.md); the next call wakes it first. Returns its receipt: {"asleep": True,
        "bytes", "storages", "seconds", ...}, or {"asleep": False, "reason"} when it could not
        (no worker, no torch, no CUDA context, a CUDA graph alive)."""
        return self._finish_now(self._submit("sleep", env), self._peer(env))

    def hibernate(self, env):
        """Move `env`'s idle worker's whole GPU state into its host RAM: it sleeps first, then
        the driver moves its context (docs/hibernation.md). Returns {"hibernated": True, ...}
        or {"hibernated": False, "reason"}; raises HibernateFailed if the driver failed."""
        return self._finish_now(self._submit("hibernate", env), self._peer(env))

    def wake(self, env):
        """Put an asleep or hibernated worker's GPU state back without a call. Raises
        WakeFailed when there is no room on the card for it (it stays as it was)."""
        return self._finish_now(self._submit("wake", env), self._peer(env))

    def keep(self, env, kept=True):
        """Keep `env`'s workers alive while a job of the caller's still needs what they hold
        (kept=False lets them go): none is reaped for another's room, for RAM pressure or for
        idleness meanwhile; a release, sleep or hibernation keeps the process and what it holds,
        so they still make room. Starts no worker; `reap` still ends one. Returns {"kept"}."""
        if not isinstance(kept, bool):
            raise ValueError("kept is True or False, not %r" % (kept,))
        return self._finish_now(self._submit("keep", env, message={"kept": kept}), None)

    def make_room(self, nbytes, device=0):
        """This process itself needs `nbytes` of VRAM on GPU `device`: make room with idle
        workers as for a worker's reserve_vram (release, hibernate, reap; docs/memory.md),
        waiting for busy ones up to admission_wait_seconds. Returns the admission's answer
        ({"granted", "outcome", "steps", "explanation", ...}); books nothing."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError("make_room needs a whole number of bytes, not %r" % (nbytes,))
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device <= 255:
            raise ValueError("make_room needs a GPU index from 0 to 255, not %r" % (device,))
        return self._finish_now(
            self._submit("make_room", "", message={"bytes": nbytes, "device": device}), None)

    def close(self):
        """Shut every worker down (shutdown frame, grace period, kill). Idempotent."""
        self._core.close()
        if self._tells is not None and self._tells is not threading.current_thread():
            self._tells.join()  # take_tells returns None at once now; a handler ends first
        if self._output is not None:
            self._output.join(_OUTPUT_JOIN_SECONDS)
        for peer in self._peers.values():
            peer.open = False
            values.drop_spares(peer)
        values.drop_spares()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _submit(self, kind, env, target=None, args=(), kwargs=None, message=None):
        """Hands a request to the core: a call (`target`, `args`, `kwargs`), or a request of
        another kind with its `message` (a dict; none: {})."""
        if not isinstance(env, str):
            raise BadRequest("an environment is named by a string, not %r" % (env,))
        if kind == "call" and not isinstance(target, str):
            raise BadRequest("a call's target is a string 'module:function', not %r" % (target,))
        text, encoded = json.dumps(message or {}), None
        if kind == "call":
            text, encoded = self._call_message(env, target, list(args), kwargs or {})
        try:
            # The core owns the descriptors from here on, whatever happens.
            return self._core_call(self._core.submit, kind, env, text,
                                   [] if encoded is None else encoded.fds)
        finally:
            if encoded is not None:
                encoded.wait_copied()  # the worker decodes the call meanwhile

    def _call_message(self, env, target, args, kwargs):
        """A call's message (JSON text) and its pickled arguments (values.Encoded) or None:
        JSON arguments where they are plain, fit a frame and no spare memfd waits to ride back
        to the worker; else pickled."""
        peer = self._peer(env)
        message = {"target": target, "accept": values.PICKLE5, "args": args, "kwargs": kwargs}
        if (values.is_plain_json(args) and values.is_plain_json(kwargs)
                and not values.has_returns(peer)):
            text = json.dumps(message)
            if len(text) <= _JSON_LIMIT:
                return text, None
        encoded = _encode((tuple(args), kwargs), peer)
        message.update(args=[], kwargs={}, pickle=encoded.description)
        try:
            return json.dumps(message), encoded
        except BaseException:
            encoded.close()
            raise

    def _peer(self, env):
        peer = self._peers.get(env)
        if peer is None:
            peer = self._peers.setdefault(env, _Peer())
        return peer

    @staticmethod
    def _core_call(method, *args):
        try:
            return method(*args)
        except _isohost.CoreError as e:
            raise from_core(str(e)) from None

    def _serve_asks(self, pending):
        """Answers the asks (and runs the tells) that `pending`'s call made since the last time."""
        for token, text in pending.take_asks():
            reply_text, raised = _run_ask_handler(self._ask_handlers, json.loads(text))
            pending.answer(token, reply_text)
            if raised is not None:
                raise raised

    def _wait(self, pending, timeout=None):
        """Serves the call's asks until its outcome is in; False if `timeout` passed first."""
        deadline = None if timeout is None else _now() + max(0.0, timeout)
        while True:
            left = None if deadline is None else max(0.0, deadline - _now())
            event = pending.wait_event(left)
            if event == "asks":
                self._serve_asks(pending)
            elif event == "done":
                return True
            elif deadline is not None and _now() >= deadline:
                return False

    def _finish_now(self, pending, peer):
        self._wait(pending)
        return self._finish(pending, peer)

    def _finish(self, pending, peer):
        if self._output is not None:
            # As in one process: what the call printed is out before its result is.
            self._output.wait_for(pending.output_read, _OUTPUT_WAIT_SECONDS)
        kind, text, fds = pending.outcome()
        if kind == "value":
            return json.loads(text)
        if kind == "pickle":
            try:
                return values.decode(json.loads(text), fds, peer)
            except Exception as e:
                raise DecodeError("the result could not be unpickled here: %s: %s"
                                  % (type(e).__name__, e)) from e
        raise from_core(text)


class Call:
    """A call in flight (Host.start). Its asks are served while someone waits in result()."""

    def __init__(self, host, pending, env, target):
        self._host = host
        self._pending = pending
        self._peer = host._peer(env)
        self.env = env
        self.target = target
        self._finished = False
        self._value = None
        self._error = None

    def result(self, timeout=None):
        """The call's value, or its named isohost error raised. With `timeout` (seconds), raises
        TimeoutError if the call has not ended by then; it runs on and may be waited for again."""
        if not self._finished:
            if not self._host._wait(self._pending, timeout):
                raise TimeoutError("%s in %r is still running after %g s"
                                   % (self.target, self.env, timeout))
            try:
                self._value = self._host._finish(self._pending, self._peer)
            except Error as e:
                self._error = e
            self._finished = True
        if self._error is not None:
            raise self._error
        return self._value

    async def result_async(self):
        """result() for asyncio: the event loop waits on a descriptor and serves the call's
        asks on its thread. Cancelling the await (asyncio.wait_for's timeout) leaves the call
        running; interrupt() stops it."""
        if not self._finished:
            await _completion(self._pending, self._host._serve_asks)
        return self.result()

    def interrupt(self, grace_seconds=5.0):
        """Stop the call: one still queued fails with Interrupted at once; a running one is
        asked to stop (the worker raises in the call's thread, isohost_worker.on_interrupt),
        and if it has not ended `grace_seconds` later its worker is killed and the call fails
        with Interrupted. A call that has ended is left as it is."""
        self._host._core_call(self._host._core.interrupt, self._pending, float(grace_seconds))

    def done(self):
        """Whether the outcome is in (result() would not wait, but for asks still unserved)."""
        return self._pending.done()


class _Unsupported(Exception):
    """No handler for an ask's name; the worker sees the type "Unsupported"."""


def _run_ask_handler(handlers, body):
    """(the answer as JSON text, None) for an ask or tell `body`, or with the BaseException
    that is no Exception (KeyboardInterrupt, SystemExit) its handler raised, to raise once
    answered. A tell's failure is logged: nobody waits for its answer."""
    name = body.get("name")
    handler = handlers.get(name)
    try:
        if handler is None:
            raise _Unsupported("this host has no handler for %r" % (name,))
        return json.dumps({"ok": True, "value": handler(body.get("value"))}, allow_nan=False), None
    except BaseException as e:
        if body.get("op") == "tell":
            _log.warning("a tell %r from the worker failed: %s: %s",
                         name, _type_name(type(e)), _safe_str(e))
        reply_text = json.dumps({"ok": False, "error": {
            "type": _type_name(type(e)), "message": _safe_str(e)}})
        return reply_text, (None if isinstance(e, Exception) else e)


def _serve_tells(core_ref, handlers):
    """The thread "isohost-tells": runs the handlers of the tells and asks workers send between
    calls, and answers the asks, until the host closes or is collected."""
    for tells in core_batches(core_ref, "take_tells"):
        for _env, text, token in tells:
            reply_text, _ = _run_ask_handler(handlers, json.loads(text))
            core = core_ref() if token else None
            if core is not None:
                core.answer_between_calls(token, reply_text)
            del core


def _type_name(cls):
    """As the worker runtime names exception types (errors.type_name): qualified but for
    builtins."""
    module = getattr(cls, "__module__", None)
    if cls is _Unsupported:
        return "Unsupported"
    if module in (None, "builtins"):
        return cls.__qualname__
    return "%s.%s" % (module, cls.__qualname__)


def _safe_str(e):
    try:
        return str(e)
    except Exception:
        return "<str() failed>"


def _now():
    return time.monotonic()


class _Peer:
    """One environment's worker as values.py sees it: spare memfds received from it go back to
    it with the next call, while the host is open."""

    __slots__ = ("open", "__weakref__")

    def __init__(self):
        self.open = True


def _encode(value, peer):
    try:
        return values.encode(value, peer, pipelined=True)
    except Exception as e:
        raise EncodeError("the arguments could not be pickled: %s: %s"
                          % (type(e).__name__, e)) from e


async def _completion(pending, serve_asks):
    """Waits on the call's eventfd, serving its asks, until its outcome is in."""
    loop = asyncio.get_running_loop()
    fd = pending.fileno()
    while True:
        serve_asks(pending)
        if pending.done():
            return
        woke = loop.create_future()
        loop.add_reader(fd, lambda: woke.done() or woke.set_result(None))
        try:
            await woke
        finally:
            loop.remove_reader(fd)
        try:
            os.read(fd, 8)  # drained: the next ask or the outcome makes it readable again
        except BlockingIOError:
            pass
