"""Zygote mode (docs/lifecycle.md#zygotes): import the preload list once, then fork workers.

The host starts a zygote like a worker, with `--zygote --preload torch,numpy`. It imports
the list (never touching CUDA), calls gc.freeze() so that the collector does not dirty the
imported objects' pages in every child, says hello, and then answers, one at a time on its
only thread:

    fork      four descriptors attached (the new worker's main and side socket ends, its
              stdout and its stderr pipe ends); replies {"pid": N} once the child exists
    ping      {"pid": N}
    shutdown  exit 0 (end-of-file does the same)

A child is made with clone(CLONE_PARENT), so its parent is the host itself, not the zygote:
the host reaps it and reads its exact exit status through a pidfd, the death signal it sets
fires when the host's thread dies (a host killed with kill -9 takes every forked worker at
once), and a zygote that dies takes no worker with it.

Exit codes: 0 after shutdown or end-of-file, 3 when the host breaks the protocol, 4 when a
preload module cannot be imported.
"""

import ctypes
import fcntl
import importlib
import os
import platform
import signal
import socket
import sys
import threading
import traceback

from isohost_worker import errors, freeze, frames, runtime, tree

# How its lines on stderr start, apart from a worker's.
_WHO = "isohost_worker zygote"

# One frame carries exactly these, in this order.
FORK_DESCRIPTORS = ("socket", "side", "stdout", "stderr")
WORKER_FD = 3
WORKER_SIDE_FD = 4

_CLONE_PARENT = 0x00008000
_CLONE_CHILD_SETTID = 0x01000000
_SYS_CLONE3 = 435  # the same number on every architecture
# Legacy clone(2): number, and whether the child tid comes before tls (x86_64) or after.
_SYS_CLONE = {"x86_64": (56, True), "aarch64": (220, False)}
_PR_SET_PDEATHSIG = 1


class Refused(Exception):
    """This zygote cannot fork safely; the host falls back to fresh spawns."""


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls")]


# PyDLL keeps the GIL across the call: the child must find the interpreter exactly as the
# parent left it, and no other thread may take the GIL between fork and the child's first
# Python instruction.
_libc = ctypes.PyDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.pthread_self.restype = ctypes.c_void_p
for _name in ("PyOS_BeforeFork", "PyOS_AfterFork_Parent", "PyOS_AfterFork_Child"):
    getattr(ctypes.pythonapi, _name).restype = None
    getattr(ctypes.pythonapi, _name).argtypes = []


def cuda_refusal():
    """Why forking would hand children a CUDA context they cannot use, or None. Never
    initialises CUDA: torch is consulted only if something already imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        initialized = bool(torch.cuda.is_initialized())
    except Exception as e:  # a torch without CUDA support, or a broken one
        return None if "cuda" not in str(e).lower() else "cannot tell whether CUDA is initialised: %s" % e
    if initialized:
        return ("CUDA is initialised in the zygote (torch.cuda.is_initialized() is true); a forked "
                "child cannot use the parent's CUDA context. Remove what touches CUDA at import "
                "from the preload list")
    return None


def thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def settle_threads():
    """Libraries that start threads at import (OpenBLAS) stop them in their before-fork
    handler, which only a real fork() runs: fork once and reap the child, so that this
    process is single-threaded before any clone. Returns the thread count after."""
    if thread_count() > 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return thread_count()


def _tid_address():
    """Where glibc keeps the calling thread's tid (struct pthread's tid field), from the
    descriptor glibc publishes for debuggers; None where unknown. A raw clone does not update
    it; CLONE_CHILD_SETTID makes the kernel write the child's tid there."""
    try:
        size_bits, count, offset = (ctypes.c_uint32 * 3).in_dll(_libc, "_thread_db_pthread_tid")
    except (ValueError, AttributeError):
        return None
    if size_bits != 32 or count != 1 or offset > 65536:
        return None
    address = _libc.pthread_self() + offset
    if ctypes.c_int32.from_address(address).value != threading.get_native_id():
        return None
    return address


def _raw_clone(flags, tid_address):
    args = _CloneArgs(flags=flags, child_tid=tid_address or 0)
    pid = _libc.syscall(_SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    if pid >= 0 or ctypes.get_errno() != 38:  # ENOSYS: before Linux 5.3, or a seccomp filter
        return pid
    number, tid_before_tls = _SYS_CLONE.get(platform.machine(), (None, True))
    if number is None:
        return pid
    tid = ctypes.c_void_p(tid_address or 0)
    if tid_before_tls:
        return _libc.syscall(number, ctypes.c_ulong(flags), None, None, tid, None)
    return _libc.syscall(number, ctypes.c_ulong(flags), None, None, None, tid)


def clone_sibling():
    """fork(), except that the child's parent is this process's parent (CLONE_PARENT).
    Returns 0 in the child and the child's pid here; raises OSError."""
    tid_address = _tid_address()
    flags = _CLONE_PARENT | (_CLONE_CHILD_SETTID if tid_address else 0)
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _raw_clone(flags, tid_address)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    error = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(error, "clone(CLONE_PARENT): %s" % os.strerror(error))
    return pid


def reseed():
    """Children of one zygote must not share random streams."""
    import random
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.seed()  # CUDA generators are seeded lazily, never initialised here
        except Exception:
            pass


class Zygote:
    def __init__(self, sock, side, env, preload):
        self._sock = sock
        # Held open, never read: the host asks a zygote nothing on the side lane.
        self._side = side
        self._env = env
        self._preload = preload
        self._refusal = None
        self._forks = 0

    def serve(self):
        """Preload, say hello, serve fork requests. Returns (sock, side, env) in a forked child,
        which then runs the normal worker runtime; exits the process otherwise."""
        for name in self._preload:
            try:
                importlib.import_module(name)
            except BaseException:
                errors.say("cannot preload %r:\n%s" % (name, traceback.format_exc().rstrip()), _WHO)
                os._exit(4)
        freeze.freeze_imported()
        threads = settle_threads()
        if threads > 1:
            self._refusal = ("the zygote still runs %d threads after preloading %s; a forked "
                             "child would find their state without them" % (threads, ",".join(self._preload)))
        frames.send(self._sock, frames.encode(self._hello()))
        reader = frames.Reader(self._sock)
        while True:
            try:
                request, fds = reader.read()
            except (EOFError, ConnectionError):
                self._exit(0)
            except frames.ProtocolError as e:
                errors.say("protocol error from the host: %s" % e, _WHO)
                self._exit(3)
            op = request.get("op")
            if op == "shutdown":
                self._exit(0)
            request_id = request.get("id")
            if not isinstance(request_id, int) or isinstance(request_id, bool):
                errors.say("%r request without an integer id" % (op,), _WHO)
                os._exit(3)
            if op == "fork":
                child = self._fork(request_id, request, fds)
                if child is not None:
                    return child
            else:
                frames.close_all(fds)
                if op == "ping":
                    self._reply(request_id, {"pid": os.getpid(), "forks": self._forks})
                else:
                    self._fail(request_id, errors.ARGUMENTS, ValueError("unknown op %r for a zygote" % (op,)))

    @staticmethod
    def _exit(code):
        # What the preloaded modules started ends with the zygote. Its forked workers are the
        # host's children, not its own, so this never touches them.
        tree.end_descendants()
        os._exit(code)

    def _hello(self):
        body = runtime.hello_body(self._env, ["fork", "ping", "shutdown"])
        body.update(zygote=True, preload=list(self._preload), refusal=self._refusal)
        return body

    def _fork(self, request_id, request, fds):
        if len(fds) != len(FORK_DESCRIPTORS):
            frames.close_all(fds)
            self._fail(request_id, errors.ARGUMENTS,
                       ValueError("fork needs %d descriptors (%s), got %d"
                                  % (len(FORK_DESCRIPTORS), ", ".join(FORK_DESCRIPTORS), len(fds))))
            return None
        refusal = self._refusal or cuda_refusal()
        if refusal:
            frames.close_all(fds)
            self._fail(request_id, errors.FORK, Refused(refusal))
            return None
        host = os.getppid()
        try:
            pid = clone_sibling()
        except OSError as e:
            frames.close_all(fds)
            self._fail(request_id, errors.FORK, e)
            return None
        if pid == 0:
            return self._become_worker(host, request, fds)
        frames.close_all(fds)
        self._forks += 1
        self._reply(request_id, {"pid": pid})
        return None

    def _become_worker(self, host, request, fds):
        """In the child: tie its life to the host, take the passed descriptors, and hand
        back what the worker runtime needs."""
        if _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            errors.say("prctl(PR_SET_PDEATHSIG) failed: %s" % os.strerror(ctypes.get_errno()), _WHO)
            os._exit(5)
        if os.getppid() != host:  # the host died before the death signal was armed
            os._exit(0)
        os.setsid()
        # Not inherited through clone: the worker holds its own tree (tree.py).
        error = tree.become_subreaper()
        if error:
            errors.say("prctl(PR_SET_CHILD_SUBREAPER) failed: %s" % os.strerror(error))
        # fds 3 and 4 are about to become the worker's own sockets
        self._sock.detach()
        self._side.detach()
        # Lift the received descriptors above 4 first, so that no dup2 below overwrites one
        # still to be placed (a zygote started without 0 to 2 receives them there).
        lifted = [fcntl.fcntl(fd, fcntl.F_DUPFD, WORKER_SIDE_FD + 1) for fd in fds]
        frames.close_all(fds)
        fds = lifted
        sock_fd, side_fd, out_fd, err_fd = fds
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(sock_fd, WORKER_FD)
        os.dup2(side_fd, WORKER_SIDE_FD)
        frames.close_all(fds)
        reseed()
        sockets = []
        for fd in (WORKER_FD, WORKER_SIDE_FD):
            sock = socket.socket(fileno=fd)
            sock.set_inheritable(False)
            sockets.append(sock)
        return sockets[0], sockets[1], request.get("env") or self._env

    def _reply(self, request_id, value):
        frames.send(self._sock, frames.encode({"op": "reply", "id": request_id, "ok": True, "value": value}))

    def _fail(self, request_id, where, error):
        frames.send(self._sock, frames.encode({"op": "reply", "id": request_id, "ok": False,
                                               "error": errors.describe(where, error)}))
