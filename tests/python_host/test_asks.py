"""A call's asks served by the caller's handlers on the caller's thread, and interrupting a call
(docs/python-api.md, "Asks and interrupts"), through the real core and real workers."""

import asyncio
import json
import os
import threading
import time

import pytest

import isohost

from conftest import config, descriptor_count, simulated_gpu

F = "isohost_test_funcs:"


@pytest.fixture
def host():
    with isohost.Host(config(call_timeout_seconds=60)) as h:
        yield h


def test_an_ask_runs_on_the_callers_thread_and_its_value_comes_back(host):
    seen = []
    host.on_ask("size", lambda value: seen.append((value, threading.get_ident())) or value["w"] * 2)
    assert host.call("w", F + "ask_host", "size", {"w": 21}) == 42
    assert seen == [({"w": 21}, threading.get_ident())]


class Stop(Exception):
    pass


def test_a_handler_that_raises_is_ask_failed_in_the_worker_with_its_type(host):
    def refuse(value):
        raise Stop("no more")

    host.on_ask("go_on", refuse)
    type_name, message = host.call("w", F + "ask_failure", "go_on")
    assert (type_name, message) == ("test_asks.Stop", "no more")
    assert host.call("w", F + "add", 1, 1) == 2  # the worker serves on


def test_an_ask_without_a_handler_is_unsupported(host):
    assert host.call("w", F + "ask_failure", "nobody") == [
        "Unsupported", "this host has no handler for 'nobody'"]
    host.on_ask("later", lambda v: 1)
    host.on_ask("later", None)
    assert host.call("w", F + "ask_failure", "later")[0] == "Unsupported"


def test_an_answer_that_is_not_json_is_a_type_error_there(host):
    host.on_ask("obj", lambda v: object())
    assert host.call("w", F + "ask_failure", "obj")[0] == "TypeError"


def test_tells_reach_the_handler_in_order(host):
    told = []
    host.on_ask("note", told.append)
    host.on_ask("progress", lambda v: v["value"])
    assert host.call("w", F + "tell_host", "note", "a") == "told"
    assert host.call("w", F + "ask_many", "progress", 50) == list(range(50))
    assert told == ["a"]


def test_tells_sent_between_calls_run_their_handler_on_the_hosts_tell_thread(tmp_path):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    told, all_in = [], threading.Event()

    def note(value):
        told.append((value, threading.current_thread().name))
        if len(told) == 3:
            all_in.set()

    with isohost.Host(config(call_timeout_seconds=60)) as host:
        host.on_ask("note", note)
        assert host.call("w", F + "tell_after_call", str(fifo), "note", [1, 2, 3]) == "later"
        with open(fifo, "w") as f:  # the call has returned: nothing is in flight now
            f.write("go\n")
        assert all_in.wait(60)
        assert told == [(1, "isohost-tells"), (2, "isohost-tells"), (3, "isohost-tells")]
    assert "isohost-tells" not in [t.name for t in threading.enumerate()]


def test_asks_sent_between_calls_are_answered_on_the_hosts_tell_thread(tmp_path):
    """An ask from a thread of the worker's with no call in flight: answered by the host's
    handler on "isohost-tells"; one that raises, or that no handler serves, fails in the worker
    with the type and message, as during a call."""
    outcomes = {}
    for name in ("double", "fails", "nobody"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        asked = threading.Event()

        def record(value, name=name, asked=asked):
            outcomes[name] = value
            asked.set()

        with isohost.Host(config(call_timeout_seconds=60)) as host:
            host.on_ask("double", lambda v: (v * 2, threading.current_thread().name))
            host.on_ask("fails", lambda v: {}["missing"])
            host.on_ask("asked", record)
            assert host.call("w", F + "ask_after_call", str(fifo), name, 21) == "later"
            with open(fifo, "w") as f:  # the call has returned: nothing is in flight now
                f.write("go\n")
            assert asked.wait(60)
    assert outcomes == {"double": {"answer": [42, "isohost-tells"]},
                        "fails": {"error": ["KeyError", "'missing'"]},
                        "nobody": {"error": ["Unsupported",
                                             "this host has no handler for 'nobody'"]}}


def test_a_host_with_handlers_dropped_without_close_still_ends_its_workers():
    import gc

    host = isohost.Host(config(call_timeout_seconds=60))
    host.on_ask("note", lambda value: None)
    pid = host.call("w", F + "pid")
    tells = next(t for t in threading.enumerate() if t.name == "isohost-tells")
    del host
    gc.collect()  # the tell thread holds no strong reference: the core shuts down here
    tells.join(60)
    assert not tells.is_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# Tells a worker floods the host with: more than the host ever holds (its tell thread takes at
# most the 4096 queued at once, and 4096 more may queue behind the one it is stuck on), so that
# some are always dropped, whenever the thread takes them.
FLOOD = 2 * 4096 + 800


def test_tells_that_pile_up_behind_a_stuck_handler_are_dropped_and_the_host_serves_on(
        tmp_path, capfd):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    ack = tmp_path / "ack"
    received, release, done = [], threading.Event(), threading.Event()

    def flood(value):
        release.wait(60)
        received.append(value)

    def flood_done(value):
        ack.touch()
        done.set()

    with isohost.Host(config(call_timeout_seconds=60)) as host:
        host.on_ask("flood", flood)
        host.on_ask("flood_done", flood_done)
        assert host.call("w", F + "tell_flood_after_call", str(fifo), "flood", FLOOD,
                         str(ack)) == "later"
        with open(fifo, "w") as f:
            start_the_flood(f, capfd)
            release.set()
            f.write("done\n")
        assert done.wait(60)  # the queue drained; the thread serves on
        assert 4096 < len(received) < FLOOD and received == sorted(received)


def start_the_flood(fifo, capfd):
    """Lets the worker's flood go through the open `fifo`, and waits until the host has logged
    that its queue is full (4096 waiting)."""
    fifo.write("go\n")
    fifo.flush()
    deadline, log = time.monotonic() + 60, ""
    while "tells dropped: 4096 wait for the host's handlers" not in log:
        assert time.monotonic() < deadline, log
        log += capfd.readouterr().err
        time.sleep(0.01)


def test_an_ask_between_calls_behind_a_full_queue_is_refused_as_busy_and_the_host_serves_on(
        tmp_path, capfd):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    outcome = tmp_path / "outcome"
    os.mkfifo(outcome)
    release, served = threading.Event(), []

    def stuck(value):
        release.wait(60)

    with isohost.Host(config(call_timeout_seconds=60)) as host:
        host.on_ask("flood", stuck)
        host.on_ask("probe", lambda value: "answered")
        assert host.call("w", F + "ask_when_flooded", str(fifo), "flood", FLOOD, "probe",
                         str(outcome)) == "later"
        with open(fifo, "w") as f:
            start_the_flood(f, capfd)
            f.write("ask\n")
        with open(outcome) as f:  # until the worker has written what its ask got
            answered = json.load(f)
        release.set()
        assert answered == {"error": [
            "Busy", "4096 tells and asks wait for the host's handlers already"]}
        # The queue drains, and the next ask between calls is answered.
        again = tmp_path / "again"
        os.mkfifo(again)
        asked = threading.Event()
        host.on_ask("echo", lambda value: value)
        host.on_ask("asked", lambda outcome: served.append(outcome) or asked.set())
        assert host.call("w", F + "ask_after_call", str(again), "echo", 7) == "later"
        with open(again, "w") as f:
            f.write("go\n")
        assert asked.wait(60)
        assert served == [{"answer": 7}]


def test_asks_are_served_for_call_async_on_the_loop_thread(host):
    threads = []
    host.on_ask("progress", lambda v: threads.append(threading.get_ident()) or v["value"])

    async def main():
        return await asyncio.gather(host.call_async("w", F + "ask_many", "progress", 20),
                                    host.call_async("other", F + "ask_many", "progress", 20))

    assert asyncio.run(main()) == [list(range(20))] * 2
    assert set(threads) == {threading.get_ident()} and len(threads) == 40


def test_result_with_a_timeout_leaves_the_call_running(host):
    # An ask waits until someone waits in result(): a handler registered after start() serves it.
    held = host.start("w", F + "ask_host", "hold")
    host.on_ask("hold", lambda v: "held")
    started = threading.Event()
    host.on_ask("started", lambda v: started.set())
    slow = host.start("other", F + "spin_until_interrupted", 60)
    wait_started(slow, started)
    assert not slow.done()
    slow.interrupt(grace_seconds=10)
    with pytest.raises(isohost.WorkerException) as caught:
        slow.result()
    assert caught.value.type_name == "isohost_worker.interrupts.Interrupted"
    assert held.result() == "held" and held.result() == "held"


def wait_started(call, started):
    """Serves the call's asks until its "started" tell has come."""
    while not started.is_set():
        with pytest.raises(TimeoutError, match="still running"):
            call.result(timeout=0.01)


def test_an_interrupt_stops_a_python_loop_and_the_worker_serves_on(host):
    started = threading.Event()
    host.on_ask("started", lambda v: started.set())
    pid = host.call("w", F + "pid")
    call = host.start("w", F + "spin_until_interrupted", 60)
    wait_started(call, started)
    call.interrupt(grace_seconds=30)
    with pytest.raises(isohost.WorkerException) as caught:
        call.result()
    assert caught.value.type_name == "isohost_worker.interrupts.Interrupted"
    assert host.call("w", F + "pid") == pid
    call.interrupt()  # ended: nothing happens
    assert host.call("w", F + "add", 2, 3) == 5


def test_a_call_stuck_in_c_is_killed_after_the_grace_and_replaced(host):
    started = threading.Event()
    host.on_ask("started", lambda v: started.set())
    pid = host.call("w", F + "pid")
    fds = descriptor_count()
    call = host.start("w", F + "stuck_in_c", 60)
    wait_started(call, started)
    call.interrupt(grace_seconds=0.3)
    with pytest.raises(isohost.Interrupted, match="did not stop within 0.3 s of its interrupt"):
        call.result()
    assert host.call("w", F + "pid") != pid
    assert descriptor_count() == fds
    # An interrupt is the caller's choice, not a crash: no back-off follows.
    for _ in range(3):
        call = host.start("w", F + "stuck_in_c", 60)
        call.interrupt(grace_seconds=0)
        with pytest.raises(isohost.Interrupted):
            call.result()
    assert host.call("w", F + "add", 1, 2) == 3


def test_a_queued_call_interrupted_fails_at_once_and_never_runs(host):
    started = threading.Event()
    host.on_ask("started", lambda v: started.set())
    running = host.start("w", F + "spin_until_interrupted", 60)
    wait_started(running, started)
    queued = host.start("w", F + "tell_host", "never", None)
    never = []
    host.on_ask("never", never.append)
    queued.interrupt()
    with pytest.raises(isohost.Interrupted, match="before worker 'w' ran it"):
        queued.result()
    running.interrupt(grace_seconds=30)
    with pytest.raises(isohost.WorkerException):
        running.result()
    assert host.call("w", F + "add", 1, 1) == 2 and never == []


def test_interrupt_after_close_is_host_shutting_down():
    with isohost.Host(config()) as h:
        call = h.start("w", F + "add", 1, 2)
        assert call.result() == 3
    with pytest.raises(isohost.HostShuttingDown):
        call.interrupt()


def test_make_room_releases_an_idle_worker_for_the_host_itself(tmp_path):
    gpu = simulated_gpu(tmp_path)
    with isohost.Host(config(simulated_gpu=str(gpu), vram_reserve_mib=0)) as h:
        pid = h.call("w", "isohost_sim_vram:hold", str(gpu), 100, 600)
        answer = h.make_room(500 << 20)
        assert answer["granted"] and answer["outcome"] == "release_then_grant", answer
        assert answer["steps"] == ["released 'w'"] and answer["grant"] is None
        assert h.call("w", F + "pid") == pid
        assert h.make_room(0, device=0)["outcome"] == "grant"
        with pytest.raises(ValueError):
            h.make_room(-1)


def test_result_async_serves_asks_on_the_loop_and_a_timeout_leaves_the_call_to_interrupt(host):
    """Call.result_async: the call's asks are served on the event loop's thread; a cancelled
    await (asyncio.wait_for's timeout) leaves the call running until interrupt() stops it."""
    started = threading.Event()
    seen = []
    host.on_ask("started", lambda v: seen.append(threading.get_ident()) or started.set())

    async def main():
        call = host.start("w", F + "spin_until_interrupted", 60)
        while not started.is_set():  # each timeout leaves it running; the tell comes meanwhile
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(call.result_async(), 0.05)
        assert not call.done()
        call.interrupt(grace_seconds=30)
        with pytest.raises(isohost.WorkerException) as caught:
            await call.result_async()
        return caught.value.type_name, await host.start("w", F + "add", 2, 5).result_async()

    assert asyncio.run(main()) == ("isohost_worker.interrupts.Interrupted", 7)
    assert seen == [threading.get_ident()]
