"""A tiny host for the worker tests: a socketpair, a real worker process, and frames."""

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_PARENT = REPO / "python"
WORKER_SCRIPT = PACKAGE_PARENT / "isohost_worker" / "__main__.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures_mod"

sys.path.insert(0, str(PACKAGE_PARENT))
from isohost_worker import frames  # noqa: E402

TIMEOUT = 10.0


def host_tag():
    """This process as a host names itself to its workers (proc::host_tag: pid and start time),
    so that a real host's startup sweep, run by a test elsewhere on the machine, sees it alive
    and spares its workers."""
    with open("/proc/self/stat") as f:
        after_name = f.read().rsplit(")", 1)[1].split()
    return "%d:%s" % (os.getpid(), after_name[19])


# The ops the host sends on a worker's side socket (docs/protocol.md); the rest go on the main one.
SIDE_OPS = ("ping", "memory", "hibernating", "woken", "answer", "interrupt")


class Worker:
    """One worker process and the host's ends of its connection."""

    def __init__(self, python=sys.executable, env_name="test", paths=(str(FIXTURES),),
                 as_module=False, environ=None, expect_hello=True, fd=3, extra_args=()):
        """`fd` is the descriptor the worker gets for its main socket, 3 as the real host gives
        it (the side socket is 4); None keeps whatever numbers the sockets have here, passed
        with pass_fds."""
        self.sock, child = socket.socketpair()
        self.side, side_child = socket.socketpair()
        if as_module:
            entry = ["-m", "isohost_worker"]
        else:
            entry = [str(WORKER_SCRIPT)]
        child_fd, side_child_fd = child.fileno(), side_child.fileno()
        worker_fd = child_fd if fd is None else fd
        worker_side_fd = side_child_fd if fd is None else 4
        self.argv = [python, "-s", "-u"] + entry + [
            "--fd", str(worker_fd), "--side-fd", str(worker_side_fd), "--env", env_name,
            "--host", host_tag()]
        for path in paths:
            self.argv += ["--path", path]
        self.argv += list(extra_args)
        environment = dict(os.environ)
        environment.pop("PYTHONPATH", None)
        environment.pop("CUDA_MODULE_LOADING", None)
        if as_module:
            environment["PYTHONPATH"] = str(PACKAGE_PARENT)
        environment.update(environ or {})
        if worker_fd == child_fd:
            placement = dict(pass_fds=[child_fd, side_child_fd])
        else:
            # Python opens descriptors close-on-exec; dup2 makes inheritable copies at the
            # numbers the host would give, and the originals close on exec.
            def place():
                os.dup2(child_fd, fd)
                os.dup2(side_child_fd, 4)
            placement = dict(close_fds=False, preexec_fn=place)
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=environment, cwd="/", **placement)
        child.close()
        side_child.close()
        self.sock.settimeout(TIMEOUT)
        self.side.settimeout(TIMEOUT)
        self.reader = frames.Reader(self.sock)
        self.side_reader = frames.Reader(self.side)
        self.stdout_lines, self.stderr_lines = [], []
        self._drains = [self._drain(self.proc.stdout, self.stdout_lines),
                        self._drain(self.proc.stderr, self.stderr_lines)]
        self._next_id = 1
        try:
            self.hello = self.recv() if expect_hello else None
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _drain(pipe, lines):
        # The worker must never block on a full pipe because the test is not reading it.
        def run():
            for line in pipe:
                lines.append(line.decode("utf-8", "replace"))
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    @property
    def pid(self):
        return self.proc.pid

    def send(self, body, fds=(), side=None):
        """Send on the op's own socket (the side one for SIDE_OPS), or the one `side` says."""
        on_side = body.get("op") in SIDE_OPS if side is None else side
        frames.send(self.side if on_side else self.sock, frames.encode(body, len(fds)), fds)

    def send_raw(self, data, side=False):
        (self.side if side else self.sock).sendall(data)

    def recv(self, timeout=TIMEOUT, side=False):
        sock, reader = (self.side, self.side_reader) if side else (self.sock, self.reader)
        sock.settimeout(timeout)
        body, fds = reader.read()
        for fd in fds:
            os.close(fd)
        return body

    def new_id(self):
        self._next_id += 1
        return self._next_id

    def start(self, op, side=None, **fields):
        """Send a request and return its id without waiting for the reply."""
        request_id = self.new_id()
        self.send(dict(fields, op=op, id=request_id), side=side)
        return request_id

    def request(self, op, timeout=TIMEOUT, side=None, **fields):
        """Send a request on its op's socket, or the one `side` says, and read the reply there."""
        on_side = op in SIDE_OPS if side is None else side
        request_id = self.start(op, side=on_side, **fields)
        reply = self.recv(timeout, side=on_side)
        assert reply["op"] == "reply" and reply["id"] == request_id, reply
        return reply

    def call(self, target, *args, **kwargs):
        return self.request("call", target=target, args=list(args), kwargs=kwargs)

    def value(self, target, *args, **kwargs):
        reply = self.call(target, *args, **kwargs)
        assert reply["ok"], reply["error"]["traceback"]
        return reply["value"]

    def error(self, target, *args, **kwargs):
        reply = self.call(target, *args, **kwargs)
        assert reply["ok"] is False, reply
        assert set(reply["error"]) == {"type", "message", "where", "traceback"}
        return reply["error"]

    def wait(self, timeout=TIMEOUT):
        """The exit status, with the output drained, failing the test if it takes too long."""
        code = self.proc.wait(timeout)
        for thread in self._drains:
            thread.join(timeout)
        return code

    def stderr(self):
        return "".join(self.stderr_lines)

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.sock.close()
        self.side.close()
        self.reader.close_pending()
        self.side_reader.close_pending()
        for thread in self._drains:
            thread.join(TIMEOUT)
        self.proc.stdout.close()
        self.proc.stderr.close()


def started_workers(**defaults):
    """Yields start(**options) -> a started Worker that has said hello, with `defaults` under
    `options`; ends them all afterwards. The body of the `spawn` fixtures."""
    workers = []

    def start(**options):
        worker = Worker(**dict(defaults, **options))
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.close()


@pytest.fixture
def spawn():
    """spawn(**options) -> a started Worker that has said hello; all are ended afterwards."""
    yield from started_workers()


@pytest.fixture
def worker(spawn):
    return spawn()


def eventually(predicate, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in %.1f s" % timeout
        time.sleep(0.01)
