"""The worker's two lanes, each on its own socket to the host (docs/protocol.md).

The main thread reads the main socket and runs its ops (call, release) one at a time, because
user code expects to run there (signal handlers, CUDA's current device, libraries that check the
thread); reading it itself, it wakes straight into a call, with no hand-off between threads. A
reader thread reads the side socket and answers its ops at once, so the host can ping a worker,
or ask what it holds, while a call runs; answers to the worker's own requests arrive there too.

Exit codes: 0 after `shutdown` or when the host closes the connection, 3 when the host
breaks the protocol or the connection fails in a way the runtime cannot answer.
"""

import itertools
import os
import platform
import sys
import threading
import traceback

from isohost_worker import (calls, errors, frames, interrupts, memory, replies, sleep,
                            sleep_prepare, tree)

MAIN = "main"
SIDE = "side"

# The runtime serving this process, for the worker requests code running in a call makes of
# the host (vram.reserve_vram); None outside a worker.
current = None


class Runtime:
    def __init__(self, sock, side, env, poll_window=0.0):
        self._sock = sock
        self._side = side
        self._env = env
        # How long the main lane polls for the next op before it sleeps (frames.Reader).
        self._poll_window = poll_window
        # Main-lane replies come from the main thread only; side-lane replies and worker
        # requests from any thread.
        self._side_lock = threading.Lock()
        # Each op names its lane (the socket it arrives on) and handler; `hello` advertises
        # exactly these, in this order.
        self._ops = {
            "call": (MAIN, calls.call),
            "ping": (SIDE, self._ping),
            "memory": (SIDE, lambda request: memory.report()),
            "release": (MAIN, lambda request: memory.release()),
            "hibernating": (SIDE, memory.hibernating),
            "woken": (SIDE, memory.woken),
            "shutdown": (MAIN, None),
            "answer": (SIDE, self._answered),
            "interrupt": (SIDE, interrupts.interrupt),
            # Main lane: they move the storages a call would use, so never while one runs.
            "sleep": (MAIN, sleep.sleep_op),
            "wake": (MAIN, sleep.wake_op),
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
        self._send_side(frames.encode(dict(message, id=request_id)))
        waiter[0].wait()
        answer = waiter[1]
        if not answer.get("ok"):
            error = answer.get("error")
            error = error if isinstance(error, dict) else {}
            raise errors.AskFailed(message.get("name") or message.get("op"),
                                   str(error.get("type", "Error")), str(error.get("message", "")))
        return answer.get("value")

    def tell(self, message):
        """Send a worker request that has no answer (any thread)."""
        self._send_side(frames.encode(message))

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
        os.register_at_fork(after_in_child=self._close_sockets)
        self._send_main(frames.encode(self._hello()))
        threading.Thread(target=self._serve, args=(frames.Reader(self._side), SIDE, self._send_side),
                         name="isohost-side-lane", daemon=True).start()
        self._serve(frames.Reader(self._sock, self._poll_window), MAIN, self._send_main)

    def _close_sockets(self):
        self._sock.close()
        self._side.close()

    def _hello(self):
        return hello_body(self._env, list(self._ops))

    def _ping(self, request):
        return {"pid": os.getpid()}

    def _serve(self, reader, lane, send):
        """Read `reader` and answer every op of `lane` in turn, on the calling thread."""
        try:
            while True:
                request, fds = reader.read()
                if fds:  # a pickled call's buffers; closed by whoever answers it
                    request[frames.DESCRIPTORS] = fds
                if lane == MAIN:
                    sleep_prepare.stop()  # the preparer must not fault in beside an op
                self._dispatch(request, lane, send)
                if lane == MAIN and request.get("op") == "call":
                    sleep_prepare.after_call()
        except (EOFError, ConnectionError):
            # The host is gone; finishing the call in flight would only outlive it, and so
            # would what the call started.
            tree.end_descendants()
            os._exit(0)
        except frames.ProtocolError as e:
            self._fail("protocol error from the host: %s" % e)
        except BaseException:
            self._fail("the %s lane failed:\n%s" % (lane, traceback.format_exc().rstrip()))

    def _dispatch(self, request, lane, send):
        op = request.get("op")
        op_lane, handler = self._ops.get(op, (None, None)) if isinstance(op, str) else (None, None)
        if op_lane not in (None, lane):
            frames.close_all(frames.take_descriptors(request))
            raise frames.ProtocolError("%r arrived on the %s socket; it belongs on the %s one"
                                       % (op, lane, op_lane))
        if op == "shutdown":  # no id, no reply
            frames.close_all(frames.take_descriptors(request))
            self._exit(0)  # the main thread reads it only once the op before it was answered
        if op == "answer":  # no id of the host's, no reply
            frames.close_all(frames.take_descriptors(request))
            handler(request)
            return
        request_id = request.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            frames.close_all(frames.take_descriptors(request))
            # Nothing to answer with, and the host would wait for the reply forever.
            raise frames.ProtocolError("%r request without an integer id" % (op,))
        self._answer(request_id, handler or _unknown, request, send)

    def _answer(self, request_id, handler, request, send):
        try:
            reply = {"op": "reply", "id": request_id, "ok": True, "value": handler(request)}
        except errors.Failure as f:
            reply = _error_reply(request_id, errors.describe(f.where, f.error, f.tb))
        except BaseException as e:
            reply = _error_reply(request_id, errors.describe(errors.INTERNAL, e, e.__traceback__))
        finally:
            frames.close_all(frames.take_descriptors(request))
        data, fds, copying = replies.encode(reply, request)
        try:
            send(data, fds)
        finally:
            if copying is not None:
                copying.wait_copied()  # before the value may go: the host decodes meanwhile
            frames.close_all(fds)

    def _send_main(self, data, fds=()):
        self._send(self._sock, data, fds)

    def _send_side(self, data, fds=()):
        with self._side_lock:
            self._send(self._side, data, fds)

    def _send(self, sock, data, fds):
        try:
            frames.send(sock, data, fds)
        except ConnectionError:
            tree.end_descendants()
            os._exit(0)  # the host is gone
        except OSError as e:
            self._fail("cannot send to the host: %s" % e)

    def _fail(self, message):
        errors.say(message)
        tree.end_descendants()
        os._exit(3)

    def _exit(self, code):
        # os._exit, not sys.exit: a thread the user's code left running, or a slow
        # interpreter teardown, must not keep a worker alive that the host has let go.
        # Let a side-lane reply being sent finish, so the host never reads half a frame; but
        # a host that stopped reading must not keep this process alive either.
        self._side_lock.acquire(timeout=1.0)
        # Whatever the user's code started ends with the worker, setsid() or not.
        tree.end_descendants()
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
