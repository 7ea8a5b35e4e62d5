"""Zygote mode: preload, fork on request, children that are the host's own (docs/lifecycle.md)."""

import os
import signal
import socket

import pytest

from conftest import TIMEOUT, Worker, eventually
from isohost_worker import frames


def _zygote(spawn, preload="isohost_test_funcs", **options):
    return spawn(extra_args=["--zygote", "--preload", preload], **options)


class Child:
    """The host's side of one forked worker: its sockets, its output pipes, its pid."""

    def __init__(self, zygote, fds_override=None):
        self.sock, child_end = socket.socketpair()
        self.side, side_end = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        passed = ([child_end.fileno(), side_end.fileno(), out_write, err_write]
                  if fds_override is None else fds_override)
        self.reply = zygote.request_with_fds("fork", passed, env="child", generation=7)
        child_end.close()
        side_end.close()
        os.close(out_write)
        os.close(err_write)
        self.out = os.fdopen(out_read, "rb")
        self.err = os.fdopen(err_read, "rb")
        self.sock.settimeout(TIMEOUT)
        self.reader = frames.Reader(self.sock)
        self.pid = self.reply["value"]["pid"] if self.reply["ok"] else None
        self._next = 0

    def recv(self):
        body, fds = self.reader.read()
        for fd in fds:
            os.close(fd)
        return body

    def call(self, target, *args):
        self._next += 1
        frames.send(self.sock, frames.encode({"op": "call", "id": self._next, "target": target,
                                              "args": list(args), "kwargs": {}}))
        reply = self.recv()
        assert reply["ok"], reply
        return reply["value"]

    def end(self):
        """Close the connection and reap the child, as its parent (this test) must."""
        self.sock.close()
        self.side.close()
        self.out.close()
        self.err.close()
        if self.pid is None:
            return None
        _, status = os.waitpid(self.pid, 0)
        return status


def _request_with_fds(self, op, fds, **fields):
    request_id = self.new_id()
    self.send(dict(fields, op=op, id=request_id), fds)
    reply = self.recv()
    assert reply["op"] == "reply" and reply["id"] == request_id, reply
    return reply


Worker.request_with_fds = _request_with_fds


def test_hello_says_zygote_and_what_it_preloaded(spawn):
    zygote = _zygote(spawn)
    assert zygote.hello["zygote"] is True
    assert zygote.hello["preload"] == ["isohost_test_funcs"]
    assert zygote.hello["refusal"] is None
    assert zygote.hello["capabilities"] == ["fork", "ping", "shutdown"]


def test_forked_child_is_a_worker_whose_parent_is_the_host(spawn):
    zygote = _zygote(spawn)
    child = Child(zygote)
    assert child.reply["ok"], child.reply
    hello = child.recv()
    assert hello["op"] == "hello" and hello["pid"] == child.pid and hello["env"] == "child"
    assert child.call("isohost_test_funcs:add", 2, 3) == 5
    assert child.call("isohost_test_funcs:parent_pid") == os.getpid(), "clone(CLONE_PARENT)"
    assert child.call("isohost_test_funcs:session_id") == child.pid, "its own session and group"
    assert child.call("isohost_test_funcs:glibc_tid_is_own") is True, "CLONE_CHILD_SETTID"
    assert child.call("isohost_test_funcs:death_signal") == signal.SIGKILL, "tied to the host"
    # The passed descriptors sit at 1 to 4 and nothing else came with them. (This harness
    # lets the zygote inherit the test's own descriptors; the host passes only 0 to 4.)
    inherited = {int(fd) for fd in os.listdir("/proc/%d/fd" % zygote.pid)} - {0, 1, 2, 3, 4}
    assert set(child.call("isohost_test_funcs:open_descriptors")) == {0, 1, 2, 3, 4} | inherited
    child.call("isohost_test_funcs:print_lines", 1)
    assert child.err.readline() == b"ISOH stderr line 0\n", "stderr is the pipe the host passed"
    assert child.out.readline() == b"ISOH stdout line 0\n"
    status = child.end()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "EOF ends it with code 0"
    assert zygote.request("ping", side=False)["value"] == {"pid": zygote.pid, "forks": 1}


def test_exact_exit_status_reaches_the_host(spawn):
    zygote = _zygote(spawn)
    child = Child(zygote)
    child.recv()
    frames.send(child.sock, frames.encode({"op": "call", "id": 1, "target": "isohost_test_funcs:crash_with_code",
                                           "args": [17], "kwargs": {}}))
    _, status = os.waitpid(child.pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 17
    child.pid = None
    child.end()


def test_children_do_not_share_random_state(spawn):
    zygote = _zygote(spawn)
    children = [Child(zygote) for _ in range(2)]
    values = []
    for child in children:
        child.recv()
        values.append(child.call("isohost_test_funcs:random_value"))
    assert values[0] != values[1]
    for child in children:
        child.end()


def test_killing_the_zygote_leaves_its_children_running(spawn):
    zygote = _zygote(spawn)
    child = Child(zygote)
    child.recv()
    os.kill(zygote.pid, signal.SIGKILL)
    assert zygote.wait() == -signal.SIGKILL
    assert child.call("isohost_test_funcs:add", 1, 1) == 2
    assert child.call("isohost_test_funcs:parent_pid") == os.getpid()
    child.end()


def test_wrong_descriptor_count_is_refused_and_the_zygote_serves_on(spawn):
    zygote = _zygote(spawn)
    read_end, write_end = os.pipe()
    bad = Child(zygote, fds_override=[write_end])
    os.close(read_end)
    os.close(write_end)
    assert bad.reply["ok"] is False
    assert bad.reply["error"]["where"] == "arguments"
    assert "fork needs 4 descriptors" in bad.reply["error"]["message"]
    bad.end()
    good = Child(zygote)
    assert good.reply["ok"]
    good.recv()
    good.end()


def test_zygote_with_cuda_initialised_refuses_to_fork(spawn):
    pytest.importorskip("torch")
    zygote = _zygote(spawn, preload="isohost_test_pretend_cuda")
    child = Child(zygote)
    assert child.reply["ok"] is False
    assert child.reply["error"]["where"] == "fork"
    assert child.reply["error"]["type"] == "isohost_worker.zygote.Refused"
    assert "CUDA is initialised in the zygote" in child.reply["error"]["message"]
    child.end()
    assert zygote.request("ping", side=False)["ok"], "it refuses, and lives on"


def test_preload_that_fails_to_import_exits_with_code_4(spawn):
    zygote = _zygote(spawn, preload="no_such_module_for_the_zygote", expect_hello=False)
    assert zygote.wait() == 4
    assert "cannot preload 'no_such_module_for_the_zygote'" in zygote.stderr()


def test_shutdown_ends_the_zygote_with_code_0(spawn):
    zygote = _zygote(spawn)
    zygote.send({"op": "shutdown"})
    assert zygote.wait() == 0


_LEGACY_CLONE = r"""
import os, sys
sys.path.insert(0, sys.argv[2])
from isohost_worker import zygote
zygote._SYS_CLONE3 = 10 ** 6  # no such system call: ENOSYS, as under a seccomp filter
pid = zygote.clone_sibling()
if pid == 0:
    own_tid = zygote._tid_address() is not None
    os._exit(7 if own_tid and os.getppid() == int(sys.argv[1]) else 8)
print(pid)
"""


def test_legacy_clone_where_clone3_is_missing():
    """Where clone3 answers ENOSYS, the zygote falls back to clone(2), with the same effect:
    the child's parent is the zygote's parent (here this test) and its tid record is its own."""
    import subprocess
    import sys
    from conftest import PACKAGE_PARENT
    out = subprocess.run([sys.executable, "-c", _LEGACY_CLONE, str(os.getpid()), str(PACKAGE_PARENT)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    _, status = os.waitpid(int(out.stdout), 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7
