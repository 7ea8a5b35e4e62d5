"""The worker's two lanes over one connection to the host (docs/protocol.md).

A reader thread reads every frame. Side-lane ops are answered on that thread at once, so
the host can ping a worker, or ask what it holds, while a call runs. Main-lane ops go to
the main thread, one at a time, because user code expects to run there (signal handlers,
CUDA's current device, libraries that check the thread).

Exit codes: 0 after `shutdown` or when the host closes the connection, 3 when the host
breaks the protocol or the connection fails in a way the runtime cannot answer.
"""

import itertools
import os
import platform
import queue
import sys
import threading
import traceback

from isohost_worker import calls, errors, frames, memory, replies

MAIN = "main"
SIDE = "side"
CONTROL = "control"  # no id, no reply

_SHUTDOWN = object()

# The runtime serving this process, for the worker requests code running in a call makes of
# the host (vram.reserve_vram); None outside a worker.
current = None


class Runtime:
    def __init__(self, sock, env):
        self._sock = sock
        self._env = env
        self._send_lock = threading.Lock()
        self._main_lane = queue.Queue()
        # Each op names its lane and handler; `hello` advertises exactly these, in this order.
        self._ops = {
            "call": (MAIN, calls.call),
            "ping": (SIDE, self._ping),
            "memory": (SIDE, lambda request: memory.report()),
            "release": (MAIN, lambda request: memory.release()),
            "hibernating": (SIDE, memory.hibernating),
            "woken": (SIDE, memory.woken),
            "shutdown": (CONTROL, self._shutdown),
            "answer": (CONTROL, self._answered),
        }
        # Worker requests in flight: id -> [threading.Event, answer]. Their ids are the
        # worker's own, apart from the host's request ids.
        self._asked = {}
        self._asked_lock = threading.Lock()
        self._ask_ids = itertools.count(1)

    def ask(self, message):
        """Send a worker request to the host and wait for its answer (any thread)."""
        request_id = next(self._ask_ids)
        waiter = [threading.Event(), None]
        with self._asked_lock:
            self._asked[request_id] = waiter
        self._send(frames.encode(dict(message, id=request_id)))
        waiter[0].wait()
        answer = waiter[1]
        if not answer.get("ok"):
            error = answer.get("error") or {}
            raise RuntimeError("the host refused %r: %s" % (message.get("op"), error.get("message")))
        return answer.get("value")

    def tell(self, message):
        """Send a worker request that has no answer (any thread)."""
        self._send(frames.encode(message))

    def _answered(self, answer):
        with self._asked_lock:
            waiter = self._asked.pop(answer.get("id"), None)
        if waiter is None:
            raise frames.ProtocolError("answer to no worker request: %r" % (answer.get("id"),))
        waiter[1] = answer
        waiter[0].set()

    def serve(self):
        """Say hello, then run main-lane ops until told to stop. Never returns."""
        global current
        current = self
        # A fork of this process (multiprocessing's default on Linux, a plain os.fork) must
        # neither write on the host's connection nor keep it open after this worker dies.
        os.register_at_fork(after_in_child=self._sock.close)
        self._send(frames.encode(self._hello()))
        threading.Thread(target=self._read_loop, name="isohost-reader", daemon=True).start()
        while True:
            item = self._main_lane.get()
            if item is _SHUTDOWN:
                self._exit(0)
            self._answer(*item)

    def _hello(self):
        return hello_body(self._env, list(self._ops))

    def _ping(self, request):
        return {"pid": os.getpid()}

    def _shutdown(self, request):
        # Queued behind the op in flight, so that op finishes and is answered first.
        self._main_lane.put(_SHUTDOWN)

    def _read_loop(self):
        reader = frames.Reader(self._sock)
        try:
            while True:
                request, fds = reader.read()
                if fds:  # a pickled call's buffers; closed by whoever answers it
                    request[frames.DESCRIPTORS] = fds
                self._dispatch(request)
        except (EOFError, ConnectionError):
            # The host is gone; finishing the call in flight would only outlive it.
            os._exit(0)
        except frames.ProtocolError as e:
            self._fail("protocol error from the host: %s" % e)
        except BaseException:
            self._fail("reader failed:\n%s" % traceback.format_exc().rstrip())

    def _dispatch(self, request):
        op = request.get("op")
        lane, handler = self._ops.get(op, (None, None)) if isinstance(op, str) else (None, None)
        if lane == CONTROL:
            frames.close_all(frames.take_descriptors(request))
            handler(request)
            return
        request_id = request.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            frames.close_all(frames.take_descriptors(request))
            # Nothing to answer with, and the host would wait for the reply forever.
            raise frames.ProtocolError("%r request without an integer id" % (op,))
        if lane is None:
            self._answer(request_id, _unknown, request)
        elif lane == SIDE:
            self._answer(request_id, handler, request)
        else:
            self._main_lane.put((request_id, handler, request))

    def _answer(self, request_id, handler, request):
        try:
            reply = {"op": "reply", "id": request_id, "ok": True, "value": handler(request)}
        except errors.Failure as f:
            reply = _error_reply(request_id, errors.describe(f.where, f.error, f.tb))
        except BaseException as e:
            reply = _error_reply(request_id, errors.describe(errors.INTERNAL, e, e.__traceback__))
        finally:
            frames.close_all(frames.take_descriptors(request))
        data, fds = replies.encode(reply, request)
        try:
            self._send(data, fds)
        finally:
            frames.close_all(fds)

    def _send(self, data, fds=()):
        with self._send_lock:
            try:
                frames.send(self._sock, data, fds)
            except ConnectionError:
                os._exit(0)  # the host is gone
            except OSError as e:
                self._fail("cannot send to the host: %s" % e)

    def _fail(self, message):
        errors.say(message)
        os._exit(3)

    def _exit(self, code):
        # os._exit, not sys.exit: a thread the user's code left running, or a slow
        # interpreter teardown, must not keep a worker alive that the host has let go.
        # Let a side-lane reply being sent finish, so the host never reads half a frame; but
        # a host that stopped reading must not keep this process alive either.
        self._send_lock.acquire(timeout=1.0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def hello_body(env, capabilities):
    """The `hello` frame's body; a zygote adds its own fields (zygote.py)."""
    return {
        "op": "hello",
        "protocol": frames.VERSION,
        "pid": os.getpid(),
        "env": env,
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": memory.torch_version(),
        "capabilities": capabilities,
    }


def _unknown(request):
    raise errors.Failure(errors.ARGUMENTS, ValueError("unknown op %r" % request.get("op")))


_error_reply = replies.error_reply
