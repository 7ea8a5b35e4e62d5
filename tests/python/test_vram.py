"""reserve_vram: a worker request sent mid-call, answered by the host (here, the test)."""

import sys

import pytest

from isohost_worker import frames, vram

F = "isohost_sim_vram:"
MIB = 1 << 20


def test_reserve_vram_asks_the_host_mid_call_and_returns_its_answer(worker):
    call_id = worker.start("call", target=F + "reserve", args=[600], kwargs={})
    ask = worker.recv(side=True)
    assert ask == {"op": "reserve_vram", "id": 1, "bytes": 600 * MIB}
    worker.send({"op": "answer", "id": 1, "ok": True,
                 "value": {"granted": True, "outcome": "release_then_grant", "grant": 7,
                           "explanation": "need 600 MiB on GPU 0: ..."}})
    reply = worker.recv()
    assert reply["id"] == call_id and reply["ok"], reply
    assert reply["value"]["granted"] is True
    assert reply["value"]["outcome"] == "release_then_grant"


def test_a_refused_reservation_raises_in_its_with_block(worker):
    call_id = worker.start("call", target=F + "reserve_in_context", args=[600], kwargs={})
    assert worker.recv(side=True)["op"] == "reserve_vram"
    worker.send({"op": "answer", "id": 1, "ok": True,
                 "value": {"granted": False, "outcome": "refuse", "explanation": "need 600 MiB: refused"}})
    reply = worker.recv()
    assert reply["id"] == call_id and not reply["ok"]
    assert reply["error"]["type"] == "isohost_worker.vram.VramRefused"
    assert "need 600 MiB: refused" in reply["error"]["message"]


def test_a_granted_with_block_hands_the_grant_back(worker):
    call_id = worker.start("call", target=F + "reserve_in_context", args=[10], kwargs={})
    assert worker.recv(side=True)["op"] == "reserve_vram"
    worker.send({"op": "answer", "id": 1, "ok": True,
                 "value": {"granted": True, "outcome": "grant", "grant": 3}})
    assert worker.recv(side=True) == {"op": "reserve_done", "grant": 3}
    reply = worker.recv()
    assert reply == {"op": "reply", "id": call_id, "ok": True, "value": "grant"}


def test_an_answer_to_nothing_asked_is_a_protocol_error(worker):
    worker.send({"op": "answer", "id": 99, "ok": True, "value": {}})
    assert worker.proc.wait(timeout=10) == 3
    assert any("answer to no worker request" in line for line in worker.stderr_lines)


def test_outside_a_worker_reservations_are_granted_unmanaged():
    reservation = vram.reserve_vram(5 * MIB)
    assert reservation and reservation.outcome == "unmanaged"
    with reservation:
        pass


@pytest.mark.parametrize("nbytes, device", [(-1, None), (1.5, None), (True, None), (10, -2), (10, "0")])
def test_bad_arguments_are_refused_before_asking(nbytes, device):
    with pytest.raises(ValueError):
        vram.reserve_vram(nbytes, device)


def test_a_memory_report_hook_describes_another_allocator(worker, tmp_path):
    card = tmp_path / "gpu.json"
    card.write_text('{"devices": [{"index": 0, "total_mib": 1000}], "processes": []}')
    worker.value(F + "hold", str(card), 100, 300)
    report = worker.request("memory")["value"]
    assert report["allocator"] == {"reserved": 400 * MIB, "allocated": 100 * MIB}
    receipt = worker.request("release")["value"]
    assert receipt["callbacks"] == 1
    assert worker.request("memory")["value"]["allocator"]["reserved"] == 100 * MIB
