"""Host.keep: a kept environment's worker outlives what would reap it (another's room, its idle
spell) while a job of the caller's still needs what it holds (the ComfyUI adapter keeps the
workers holding a running prompt's outputs); released, it may be reaped again."""

import time

import pytest

import isohost
from conftest import config, simulated_gpu
from test_bad_requests import core_error

F = "isohost_test_funcs:"


def workers(host):
    return {w["env"]: w for w in host.ps()["workers"]}


def wait_until(predicate, what, timeout=30):
    """Polls a state the host's status shows: a reap tells nothing else."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not %s within %g s" % (what, timeout)
        time.sleep(0.02)


def test_a_kept_worker_is_not_reaped_for_the_hosts_room_until_let_go(tmp_path):
    gpu = simulated_gpu(tmp_path)
    with isohost.Host(config(simulated_gpu=str(gpu), vram_reserve_mib=0)) as h:
        pid = h.call("w", "isohost_sim_vram:hold", str(gpu), 600, 100)
        assert h.keep("w") == {"kept": True} and workers(h)["w"]["kept"] is True
        # 900 MiB: its cache's release is not room enough, and a reap is not open to it.
        answer = h.make_room(900 << 20)
        assert not answer["granted"] and answer["outcome"] == "refuse", answer
        assert "reaped 'w'" not in answer["steps"]
        assert h.call("w", F + "pid") == pid
        assert h.keep("w", False) == {"kept": False} and workers(h)["w"]["kept"] is False
        answer = h.make_room(900 << 20)
        assert answer["granted"] and answer["outcome"] == "reap_then_grant", answer
        assert h.call("w", F + "pid") != pid


def test_a_kept_worker_outlives_its_idle_reap_and_goes_once_let_go():
    with isohost.Host(config(idle_reap_seconds=0.3)) as h:
        h.keep("w")  # before its worker starts: kept from its first idle spell
        pid = h.call("w", F + "pid")
        h.call("other", F + "pid")  # idle after w: its reap comes due after w's
        wait_until(lambda: "other" not in workers(h), "the other worker's idle reap")
        assert workers(h)["w"]["pid"] == pid
        h.keep("w", False)  # its reap came due meanwhile: it goes now
        wait_until(lambda: "w" not in workers(h), "reaped once let go")


def test_a_kept_worker_is_not_reaped_for_ram_pressure():
    # Every worker is over a budget of 1 MB: the sweep (every 2 s) reaps the idle one that is
    # not kept, and leaves the kept one, until it is let go.
    with isohost.Host(config(ram_budget_mb=1)) as h:
        h.keep("w")
        pid = h.call("w", F + "pid")
        h.call("other", F + "pid")
        wait_until(lambda: "other" not in workers(h), "the other worker reaped for RAM")
        assert workers(h)["w"]["pid"] == pid
        h.keep("w", False)
        wait_until(lambda: "w" not in workers(h), "reaped for RAM once let go")


def test_keep_starts_no_worker_and_refuses_what_is_not_a_keep(host):
    assert host.keep("other") == {"kept": True}
    assert "other" not in workers(host)
    assert host.keep("other", False) == {"kept": False}
    with pytest.raises(isohost.UnknownEnvironment):
        host.keep("nowhere")
    with pytest.raises(ValueError, match="kept is True or False, not 1"):
        host.keep("w", 1)
    with pytest.raises(isohost.BadRequest):
        host.keep(5)
    error = core_error(host, "keep", {"kept": 5})
    assert isinstance(error, isohost.BadRequest)
    assert str(error) == "keep's kept must be true or false, not 5"
    assert core_error(host, "keep", {}) is not None
    assert host.call("w", F + "add", 1, 2) == 3  # serves on
