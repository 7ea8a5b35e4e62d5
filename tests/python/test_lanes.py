"""The two lanes and the worker's lifetime: side lane during calls, shutdown, end-of-file,
protocol errors, descriptors, and the ways a worker can die."""

import os
import select
import signal
import struct
import time

import pytest

from conftest import eventually, frames

F = "isohost_test_funcs:"


def test_ping(worker):
    assert worker.request("ping")["value"] == {"pid": worker.pid}


def test_side_lane_answers_while_a_call_runs(worker, tmp_path):
    marker = str(tmp_path / "running")
    call_id = worker.start("call", target=F + "busy_loop_marked", args=[marker, 30.0], kwargs={})
    eventually(lambda: os.path.exists(marker))
    for op in ("ping", "memory", "ping"):
        reply = worker.request(op)
        assert reply["ok"] and reply["value"]["pid"] == worker.pid
    # Answered while the call still runs: no reply to it has come on the main lane.
    assert select.select([worker.sock], [], [], 0)[0] == [], "the 30 s call should still run"


def test_shutdown_finishes_the_call_in_flight(worker):
    call_id = worker.start("call", target=F + "sleep", args=[0.5], kwargs={})
    worker.send({"op": "shutdown"})
    assert worker.recv() == {"op": "reply", "id": call_id, "ok": True, "value": 0.5}
    assert worker.wait() == 0


def test_shutdown_when_idle(worker):
    worker.send({"op": "shutdown"})
    assert worker.wait(2) == 0
    with pytest.raises(EOFError):
        worker.recv()


def test_end_of_file_exits_at_once_when_idle(worker):
    worker.sock.close()
    assert worker.wait(2) == 0


@pytest.mark.parametrize("closed", ["side", "both"])
def test_end_of_file_exits_at_once_during_a_call(worker, closed, tmp_path):
    """The side lane's thread reads while the main thread runs the call; a host that dies
    closes both sockets."""
    marker = str(tmp_path / "running")
    worker.start("call", target=F + "busy_loop_marked", args=[marker, 30.0], kwargs={})
    eventually(lambda: os.path.exists(marker))
    worker.side.close()
    if closed == "both":
        worker.sock.close()
    assert worker.wait(2) == 0


@pytest.mark.parametrize("op, lane", [("call", "side"), ("release", "side"), ("ping", "main"),
                                      ("memory", "main"), ("answer", "main"), ("shutdown", "side")])
def test_an_op_on_the_wrong_socket_is_a_protocol_error(worker, op, lane):
    worker.send({"op": op, "id": 1, "target": F + "add", "args": [1, 2], "kwargs": {}},
                side=lane == "side")
    assert worker.wait() == 3
    assert "%r arrived on the %s socket" % (op, lane) in worker.stderr(), worker.stderr()


def test_end_of_file_inside_a_frame_exits_zero(worker):
    worker.send_raw(frames.encode({"op": "ping", "id": 1})[:10])
    worker.sock.close()
    assert worker.wait(2) == 0


def _frame(body, magic=b"ISOH", version=frames.VERSION, flags=0, buffer_count=0):
    return struct.pack("<4sHHII", magic, version, flags, len(body), buffer_count) + body


@pytest.mark.parametrize("raw, says", [
    (_frame(b'{"op":"ping","id":1}', magic=b"JUNK"), "bad magic"),
    (_frame(b'{"op":"ping","id":1}', version=7), "version 7"),
    (_frame(b'{"op":"ping","id":1}', flags=4), "flags"),
    (_frame(b'{"op":"ping","id":1}', buffer_count=99), "buffer_count"),
    (_frame(b'{"op":"ping","id":1}', buffer_count=1), "descriptors"),
    (_frame(b'["op","ping"]'), "not an object"),
    (_frame(b'{"op":"call"}'), "without an integer id"),
    (_frame(b'{"op":"call","id":"1"}'), "without an integer id"),
    (_frame(b'{"op":"call","id":true}'), "without an integer id"),
    (struct.pack("<4sHHII", b"ISOH", frames.VERSION, 0, 0, 0), "json_length"),
])
def test_protocol_errors_exit_3(worker, raw, says):
    worker.send_raw(raw)
    assert worker.wait() == 3
    stderr = worker.stderr()
    assert "isohost_worker: protocol error" in stderr and says in stderr, stderr


def test_received_descriptors_are_closed(worker):
    before = worker.fd_count()
    pipes = [os.pipe() for _ in range(3)]
    try:
        worker.send({"op": "ping", "id": 5}, fds=[r for r, _ in pipes])
        assert worker.recv(side=True) == {"op": "reply", "id": 5, "ok": True, "value": {"pid": worker.pid}}
        eventually(lambda: worker.fd_count() == before)
        for r, w in pipes:
            os.close(r)
            with pytest.raises(BrokenPipeError):  # no read end is left open anywhere
                os.write(w, b"x")
    finally:
        for r, w in pipes:
            for fd in (r, w):
                try:
                    os.close(fd)
                except OSError:
                    pass


def test_descriptors_on_a_main_lane_frame_are_closed_too(worker):
    before = worker.fd_count()
    r, w = os.pipe()
    try:
        reply_id = worker.new_id()
        worker.send({"op": "call", "id": reply_id, "target": F + "add", "args": [1, 2],
                     "kwargs": {}}, fds=[r])
        assert worker.recv()["value"] == 3
        eventually(lambda: worker.fd_count() == before)
    finally:
        os.close(r)
        os.close(w)


def test_protocol_socket_stays_out_of_children(worker):
    assert worker.value("os:get_inheritable", 3) is False
    assert worker.value(F + "fork_keeps_protocol_fd") is False
    assert worker.value(F + "echo", "fine") == "fine"


def test_exit_code_of_a_crash(worker):
    worker.start("call", target=F + "crash_with_code", args=[7], kwargs={})
    with pytest.raises(EOFError):
        worker.recv()
    assert worker.wait() == 7


@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGTERM])
def test_death_by_signal(worker, signal_number):
    worker.start("call", target=F + "self_kill", args=[int(signal_number)], kwargs={})
    with pytest.raises(EOFError):
        worker.recv()
    assert worker.wait() == -signal_number


def test_garbage_on_the_protocol_descriptor_is_seen_by_the_host(worker):
    worker.start("call", target=F + "write_garbage", args=[], kwargs={})
    with pytest.raises(frames.ProtocolError):
        worker.recv()


def _blocked_in(pid):
    """The system call the process's main thread sleeps in, or None while it runs (or polls)."""
    with open("/proc/%d/syscall" % pid) as f:
        first = f.read().split()[0]
    return None if first == "running" else int(first)


RECVMSG = 47  # x86_64; the main lane's blocking read


def test_a_polling_worker_polls_after_each_op_then_sleeps(spawn):
    """--poll-microseconds: calls that come within the window and after it are both answered;
    through the window the worker polls (never asleep in recvmsg), and after it, it sleeps there.
    Watched in /proc/PID/syscall, not timed by its CPU use."""
    if os.uname().machine != "x86_64":
        pytest.skip("the recvmsg syscall number is x86_64's")
    worker = spawn(extra_args=["--poll-microseconds", "400000"])
    add = dict(target="operator:add", args=[1, 2], kwargs={})
    assert worker.request("call", **add)["value"] == 3
    assert worker.request("call", **add)["value"] == 3  # at once: within the window
    eventually(lambda: _blocked_in(worker.pid) == RECVMSG)  # the window has passed
    assert worker.request("call", **add)["value"] == 3  # after it, from its sleep
    answered = time.monotonic()
    samples = 0
    while time.monotonic() - answered < 0.1:  # well inside the 400 ms window
        assert _blocked_in(worker.pid) != RECVMSG, "the worker slept within its polling window"
        samples += 1
    assert samples > 0
    eventually(lambda: _blocked_in(worker.pid) == RECVMSG)  # the window has passed
    assert worker.request("ping")["ok"]
