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
import os

import isohost_worker
from isohost_worker import values
from isohost_worker.values import DeviceFallbackWarning

from isohost import _isohost, config as _config
from isohost.errors import (BadRequest, CallTimeout, ConfigError, ControlError, CrashLoop,
                            DecodeError, EncodeError, Error, HostShuttingDown, ProtocolError,
                            SpawnFailed, StartTimeout, TargetNotFound, UnknownEnvironment,
                            WorkerCrashed, WorkerException, from_core)

__all__ = [
    "Host", "Error", "SpawnFailed", "StartTimeout", "ProtocolError", "WorkerCrashed",
    "CallTimeout", "WorkerException", "TargetNotFound", "BadRequest", "CrashLoop",
    "UnknownEnvironment", "HostShuttingDown", "ConfigError", "ControlError", "EncodeError",
    "DecodeError", "DeviceFallbackWarning",
]

# A JSON body past this goes pickled instead (a frame's body is at most 64 MiB).
_JSON_LIMIT = 60 << 20

# Where the workers' runtime lives: beside this package (build/python).
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(isohost_worker.__file__)))


class Host:
    """One pool of workers, one per configured environment, started lazily on first call.

    `config` is a path to a TOML file (README, "Usage") or the same as a dict. Every method
    may be called from any thread; the blocking ones release the GIL while they wait.
    """

    def __init__(self, config=None):
        self._peers = {}
        try:
            if config is None:
                self._core = _isohost.Core.from_toml("", "(defaults)", os.getcwd(), _RUNTIME_DIR)
            elif isinstance(config, dict):
                self._core = _isohost.Core.from_toml(_config.to_toml(config), "(dict)",
                                                     os.getcwd(), _RUNTIME_DIR)
            else:
                self._core = _isohost.Core(os.fspath(config), _RUNTIME_DIR)
        except _isohost.CoreError as e:
            raise from_core(str(e)) from None
        except TypeError as e:
            raise ConfigError(str(e)) from None

    def call(self, env, target, *args, **kwargs):
        """Run `target` ("module:function") in environment `env`'s worker and return its
        result. Raises an isohost.Error subclass named for what went wrong."""
        return self._finish(self._submit("call", env, target, args, kwargs), self._peer(env))

    async def call_async(self, env, target, *args, **kwargs):
        """call() for asyncio: the event loop waits on a descriptor, no thread is held. The
        arguments are pickled (one copy of each large buffer) before the first await."""
        pending = self._submit("call", env, target, args, kwargs)
        await _completion(pending)
        return self._finish(pending, self._peer(env))

    def ps(self):
        """Every worker's state and memory, the host's own, and the device's (as `isohost ps
        --json` prints them)."""
        return json.loads(self._core_call(self._core.status))

    def release(self, env):
        """Ask `env`'s worker to drop its caches; returns its receipt ({"released": False, ...}
        when none runs). Memfds this process keeps to send back to that worker are closed."""
        values.drop_spares(self._peer(env))
        return self._finish(self._submit("release", env), self._peer(env))

    def reap(self, env):
        """End `env`'s worker once it is idle; the next call starts a fresh one."""
        values.drop_spares(self._peer(env))
        return self._finish(self._submit("reap", env), self._peer(env))

    def close(self):
        """Shut every worker down (shutdown frame, grace period, kill). Idempotent."""
        self._core.close()
        for peer in self._peers.values():
            peer.open = False
            values.drop_spares(peer)
        values.drop_spares()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _submit(self, kind, env, target=None, args=(), kwargs=None):
        text, fds = "{}", []
        if kind == "call":
            text, fds = self._call_message(env, target, list(args), kwargs or {})
        # The core owns `fds` from here on, whatever happens.
        return self._core_call(self._core.submit, kind, env, text, fds)

    def _call_message(self, env, target, args, kwargs):
        """A call's message (JSON text) and its descriptors: JSON arguments where they are
        plain, fit a frame and no spare memfd waits to ride back to the worker; else pickled."""
        peer = self._peer(env)
        message = {"target": target, "accept": values.PICKLE5, "args": args, "kwargs": kwargs}
        if (values.is_plain_json(args) and values.is_plain_json(kwargs)
                and not values.has_returns(peer)):
            text = json.dumps(message)
            if len(text) <= _JSON_LIMIT:
                return text, []
        encoded = _encode((tuple(args), kwargs), peer)
        message.update(args=[], kwargs={}, pickle=encoded.description)
        return json.dumps(message), encoded.fds

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

    @staticmethod
    def _finish(pending, peer):
        kind, text, fds = pending.wait()
        if kind == "value":
            return json.loads(text)
        if kind == "pickle":
            try:
                return values.decode(json.loads(text), fds, peer)
            except Exception as e:
                raise DecodeError("the result could not be unpickled here: %s: %s"
                                  % (type(e).__name__, e)) from e
        raise from_core(text)


class _Peer:
    """One environment's worker as values.py sees it: spare memfds received from it go back to
    it with the next call, while the host is open."""

    __slots__ = ("open", "__weakref__")

    def __init__(self):
        self.open = True


def _encode(value, peer):
    try:
        return values.encode(value, peer)
    except Exception as e:
        raise EncodeError("the arguments could not be pickled: %s: %s"
                          % (type(e).__name__, e)) from e


async def _completion(pending):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    fd = pending.fileno()

    def on_readable():
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
