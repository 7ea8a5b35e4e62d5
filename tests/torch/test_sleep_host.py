"""The host's side of sleep through a real `isohost serve`: a worker with torch (this
interpreter) whose `sleep` moves its CPU storages, standing in for CUDA ones on a machine
without a GPU (ISOHOST_SLEEP_CPU_STAND_IN), driven over the control socket and the CLI."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import live

HERE = Path(__file__).resolve().parent
MIB = 1 << 20

# Env "m": this interpreter (it has torch), the stand-in on, its host buffer made by its first
# sleep (never faulted in ahead while it idles). Env "p": the same, faulting it in as soon as a
# call ends. Env "a" (the served host's own): /usr/bin/python3 without torch.
MODEL_ENV = """
[env.m]
python = "%s"
path = ["%s"]
env = { ISOHOST_SLEEP_CPU_STAND_IN = "1", ISOHOST_SLEEP_PREPARE_AFTER_S = "off" }

[env.p]
python = "%s"
path = ["%s"]
env = { ISOHOST_SLEEP_CPU_STAND_IN = "1", ISOHOST_SLEEP_PREPARE_AFTER_S = "0" }
""" % (sys.executable, HERE / "fixtures", sys.executable, HERE / "fixtures")


@pytest.fixture
def host(tmp_path):
    served = live.ServedHost(tmp_path, extra_config=MODEL_ENV)
    yield served
    served.close()


def model(host, nbytes=48 * MIB, env="m"):
    host.call("isohost_worker.stages:hold_model", nbytes, 12, "cpu", env=env)
    return host.call("isohost_worker.stages:model_fingerprint", env=env)["sha256"]


def worker(host, env="m"):
    return next(w for w in host.ask("ps")["workers"] if w["env"] == env)


def counters(host, env="m"):
    return host.ask("metrics")["envs"][env]


def test_a_sleeping_worker_is_asleep_in_ps_and_the_next_call_wakes_it_with_its_model_intact(host):
    fingerprint = model(host)
    pid = worker(host)["pid"]
    slept = host.ask("sleep", env="m")
    assert slept["asleep"] is True, slept
    assert slept["bytes"] >= 46 * MIB and slept["storages"] >= 12  # "about" 48 MiB
    shown = worker(host)
    assert shown["state"] == "asleep"
    assert shown["sleep"]["bytes"] == slept["bytes"]
    assert counters(host)["sleeps"] == 1
    host.wait_log(r"worker 'm' \(pid %d, generation 1\) is asleep: \d+ MiB in \d+ storages moved "
                  r"into its host RAM in [\d.]+ s \(found in [\d.]+, copied in [\d.]+ into new "
                  r"memory, freed in [\d.]+; \d+ MiB left on the card\)" % pid)
    # Asleep again: said so, nothing moves; a release would wake it, so it is not sent.
    assert host.ask("sleep", env="m")["already"] is True
    released = host.ask("release", env="m")
    assert released["released"] is False and "asleep" in released["reason"]
    assert worker(host)["state"] == "asleep"
    # The call wakes it first: same process, every byte back.
    assert host.call("isohost_worker.stages:model_fingerprint", env="m")["sha256"] == fingerprint
    awake = worker(host)
    assert awake["state"] == "ready" and awake["pid"] == pid and "sleep" not in awake
    assert counters(host)["wakes"] == 1
    host.wait_log(r"worker 'm' \(pid %d, generation 1\) woke: \d+ MiB back on the card" % pid)


def test_wake_without_a_call_and_sleep_again_many_times(host):
    fingerprint = model(host, 16 * MIB)
    for _ in range(20):
        assert host.ask("sleep", env="m")["asleep"] is True
        woken = host.ask("wake", env="m")
        assert woken["woken"] is True and woken["from"] == "sleep", woken
    assert host.call("isohost_worker.stages:model_fingerprint", env="m")["sha256"] == fingerprint
    metrics = counters(host)
    assert metrics["sleeps"] == 20 and metrics["wakes"] == 20
    assert metrics["histograms"]["sleep_seconds"]["count"] == 20


def lazy_free(pid):
    """The worker's LazyFree (its smaps_rollup): pages it gave back with MADV_FREE."""
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("LazyFree:"):
                return int(line.split()[1]) * 1024
    pytest.skip("this kernel's smaps_rollup has no LazyFree line")


def test_a_woken_worker_keeps_its_host_buffer_lazily_freed_through_a_release(host):
    model(host)
    pid = worker(host)["pid"]
    before = lazy_free(pid)
    assert host.ask("sleep", env="m")["asleep"] is True
    woken = host.ask("wake", env="m")
    assert woken["woken"] is True, woken
    assert 0 <= woken["grow_seconds"] + woken["copy_seconds"] <= woken["seconds"], woken
    # The buffer stays for the next sleep, its pages the kernel's to take back.
    assert lazy_free(pid) - before >= 24 * MIB
    live.wait_for(lambda: worker(host).get("lazy_free", 0) - before >= 24 * MIB,
                  what="ps to show the kept buffer as lazy_free")
    # A release leaves it: the kernel counts those pages as available already.
    released = host.ask("release", env="m")
    assert released.get("released", True) is True and "rss_after" in released, released
    assert lazy_free(pid) - before >= 24 * MIB


def test_a_worker_idle_after_a_call_sleeps_into_the_buffer_it_prepared(host):
    fingerprint = model(host, env="p")
    pid = worker(host, "p")["pid"]
    # Until the worker's thread has faulted the buffer in; each look, a call, pauses it.
    live.wait_for(
        lambda: host.call("isohost_sleep_funcs:sleep_buffer", env="p")["state"] == "ready", 60,
        "worker 'p' to say its host buffer is ready")
    slept = host.ask("sleep", env="p")
    assert slept["asleep"] is True and slept["host_buffer"] == "prepared", slept
    host.wait_log(r"worker 'p' \(pid %d, generation 1\) is asleep: .* copied in [\d.]+ into "
                  r"prepared memory, freed in " % pid)
    assert host.call("isohost_worker.stages:model_fingerprint", env="p")["sha256"] == fingerprint


def test_a_hibernation_that_cannot_happen_leaves_an_asleep_worker_asleep(host):
    fingerprint = model(host)
    assert host.ask("sleep", env="m")["asleep"] is True
    # No CUDA context here (the stand-in moved CPU storages): the driver is not asked.
    answer = host.ask("hibernate", env="m")
    assert answer["hibernated"] is False, answer
    assert worker(host)["state"] == "asleep"
    assert host.call("isohost_worker.stages:model_fingerprint", env="m")["sha256"] == fingerprint


def test_an_asleep_worker_is_reaped_without_waking_and_one_killed_asleep_is_replaced(host):
    model(host, 16 * MIB)
    assert host.ask("sleep", env="m")["asleep"] is True
    pid = worker(host)["pid"]
    assert host.ask("reap", env="m")["reaped"] is True
    live.wait_for(lambda: not os.path.exists("/proc/%d" % pid) or live._is_zombie(pid),
                  what="the reaped worker to end")
    assert counters(host)["wakes"] == 0, "a reap does not wake it first"

    model(host, 16 * MIB)
    assert host.ask("sleep", env="m")["asleep"] is True
    pid = worker(host)["pid"]
    os.kill(pid, signal.SIGKILL)
    host.wait_log(r"worker 'm' \(pid %d, generation 2\) killed by SIGKILL while asleep" % pid)
    # The next call gets a fresh worker; the host kept serving.
    assert host.call("isohost_test_funcs:pid") > 0
    fresh = host.call("isohost_worker.stages:hold_model", MIB, 5, "cpu", env="m")
    assert fresh["bytes"] > 0 and worker(host)["generation"] == 3


def test_a_failed_sleep_that_left_the_worker_asleep_is_seen_and_its_wake_is_admitted(host):
    fingerprint = model(host)
    host.call("isohost_sleep_funcs:break_the_next_free", env="m")
    failed = live.request(host.socket, {"op": "sleep", "env": "m"})
    assert failed["ok"] is False and "putting back failed (injected)" in failed["error"]["message"]
    shown = worker(host)
    assert shown["state"] == "asleep" and shown["sleep"]["bytes"] > 0, shown
    assert host.call("isohost_worker.stages:model_fingerprint", env="m")["sha256"] == fingerprint
    assert worker(host)["state"] == "ready"


def test_a_worker_that_cannot_sleep_says_why_and_the_cli_fails_with_it(host):
    host.call("isohost_test_funcs:pid")  # env "a": no torch
    answer = host.ask("sleep", env="a")
    assert answer == {"asleep": False, "reason": "torch is not imported"}
    assert worker(host, "a")["state"] == "ready"
    cli = subprocess.run([str(live.BINARY), "sleep", "--socket", host.socket, "a"],
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode == 1
    assert "sleep a: torch is not imported" in cli.stderr
    nobody = host.ask("sleep", env="m")  # configured, not started: a sleep never starts one
    assert nobody["asleep"] is False and "no worker is running" in nobody["reason"]


def test_an_idle_worker_sleeps_on_its_timer_once_per_idle_spell(tmp_path):
    host = live.ServedHost(tmp_path, extra_config="idle_sleep_seconds = 0.3\n" + MODEL_ENV)
    try:
        fingerprint = model(host, 16 * MIB)
        live.wait_for(lambda: worker(host)["state"] == "asleep", what="the idle sleep")
        assert host.call("isohost_worker.stages:model_fingerprint", env="m")["sha256"] == fingerprint
        # A call starts a new idle spell, and the timer sleeps it again.
        live.wait_for(lambda: counters(host)["sleeps"] == 2, what="the second idle sleep")
        assert worker(host)["state"] == "asleep"
        host.call("isohost_test_funcs:pid")  # env "a" has no torch: its idle sleep says why
        host.wait_log(r"idle sleep of 'a' skipped: torch is not imported")
    finally:
        host.close()
