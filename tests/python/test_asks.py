"""Asks and tells from a call to its caller, and the caller's interrupt (docs/protocol.md,
"Asks" and "Interrupt"), against a real worker with this test as its host."""

import pytest

F = "isohost_test_funcs:"


def read_side(worker):
    body = worker.recv(side=True)
    assert body["op"] in ("ask", "tell"), body
    return body


def answer(worker, ask, **reply):
    worker.send(dict(reply, op="answer", id=ask["id"]))


def test_an_ask_is_answered_with_a_value(worker):
    call_id = worker.start("call", target=F + "ask_host", args=["size", {"w": 3}], kwargs={})
    ask = read_side(worker)
    assert ask == {"op": "ask", "id": ask["id"], "name": "size", "value": {"w": 3}}
    answer(worker, ask, ok=True, value=[1, 2])
    assert worker.recv() == {"op": "reply", "id": call_id, "ok": True, "value": [1, 2]}


def test_a_refused_ask_raises_ask_failed_with_the_type(worker):
    call_id = worker.start("call", target=F + "ask_failure", args=["stop"], kwargs={})
    ask = read_side(worker)
    answer(worker, ask, ok=False, error={"type": "comfy.Interrupt", "message": "stopped"})
    assert worker.recv()["value"] == ["comfy.Interrupt", "stopped"]
    assert call_id


def test_a_refusal_without_an_error_object_still_raises(worker):
    worker.start("call", target=F + "ask_failure", args=["x"], kwargs={})
    answer(worker, read_side(worker), ok=False, error="not an object")
    assert worker.recv()["value"] == ["Error", ""]


def test_asks_in_a_row_each_get_their_own_answer(worker):
    worker.start("call", target=F + "ask_many", args=["progress", 5], kwargs={})
    for i in range(5):
        ask = read_side(worker)
        assert ask["value"] == {"value": i, "total": 5}
        answer(worker, ask, ok=True, value=i * 10)
    assert worker.recv()["value"] == [0, 10, 20, 30, 40]


def test_a_tell_has_no_id_and_waits_for_nothing(worker):
    worker.start("call", target=F + "tell_host", args=["note", "hi"], kwargs={})
    assert read_side(worker) == {"op": "tell", "name": "note", "value": "hi"}
    assert worker.recv()["value"] == "told"


@pytest.mark.parametrize("name", [7, "", None])
def test_a_bad_name_raises_in_the_call(worker, name):
    error = worker.error(F + "ask_host", name)
    assert error["type"] == "TypeError" and "name must be a non-empty string" in error["message"]


def test_a_value_that_is_not_json_raises_in_the_call(worker):
    error = worker.error(F + "ask_not_json")
    assert error["type"] == "ValueError", error


def test_an_answer_to_no_ask_is_a_protocol_error(worker):
    worker.send({"op": "answer", "id": 99, "ok": True, "value": 1})
    assert worker.wait() == 3


def test_ask_outside_a_worker_says_so():
    import isohost_worker

    with pytest.raises(RuntimeError, match="not running in an isohost worker"):
        isohost_worker.ask("x")


def interrupt(worker, call_id):
    return worker.request("interrupt", call=call_id)["value"]


def test_an_interrupt_raises_in_a_python_loop(worker):
    call_id = worker.start("call", target=F + "spin_until_interrupted", args=[], kwargs={})
    assert read_side(worker)["name"] == "started"
    assert interrupt(worker, call_id) == {"interrupted": True}
    reply = worker.recv()
    assert reply["ok"] is False and reply["error"]["type"] == "isohost_worker.interrupts.Interrupted"
    assert reply["error"]["where"] == "call"
    # The worker lives on and the next call is not interrupted.
    assert worker.value(F + "add", 1, 2) == 3


def test_on_interrupt_names_the_exception(worker):
    call_id = worker.start("call", target=F + "spin_raising", args=["KeyboardInterrupt"], kwargs={})
    assert read_side(worker)["name"] == "started"
    interrupt(worker, call_id)
    assert worker.recv()["error"]["type"] == "KeyboardInterrupt"


def test_a_call_may_stop_by_the_flag(worker):
    call_id = worker.start("call", target=F + "poll_interrupted", args=[], kwargs={})
    assert read_side(worker)["name"] == "started"
    interrupt(worker, call_id)
    reply = worker.recv()
    # The call returned once it saw the flag; the interrupt's exception, raised once, may still
    # land on its way out (as Ctrl-C can), and then it is the reply.
    assert reply.get("value") == "stopped by the flag" or \
        reply["error"]["type"] == "isohost_worker.interrupts.Interrupted", reply
    assert worker.value(F + "saw_interrupted_flag") is True


def test_an_interrupt_for_another_call_changes_nothing(worker):
    call_id = worker.start("call", target=F + "ask_host", args=["hold"], kwargs={})
    ask = read_side(worker)
    assert interrupt(worker, call_id + 1000) == {"interrupted": False}
    answer(worker, ask, ok=True, value="went on")
    assert worker.recv()["value"] == "went on"


def test_an_interrupt_when_idle_changes_nothing(worker):
    assert interrupt(worker, 1) == {"interrupted": False}
    assert worker.value(F + "add", 2, 2) == 4


def test_an_interrupt_after_the_call_ended_never_reaches_the_next(worker):
    first = worker.start("call", target=F + "add", args=[1, 1], kwargs={})
    assert worker.recv()["value"] == 2
    assert interrupt(worker, first) == {"interrupted": False}
    assert worker.value(F + "busy_loop", 0.05) == 0.05
