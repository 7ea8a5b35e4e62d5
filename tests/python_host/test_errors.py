"""Every way a call can fail reaches Python as the isohost.Error subclass named for it, with
nothing left open, and the host (and where it should, the worker) keeps serving."""

import json
import os
import threading

import numpy as np
import pytest

import isohost
from isohost_worker import values

from conftest import config, descriptor_count


class HostOnly:
    """Importable here (this test module), not in the worker."""

    def __init__(self, n):
        self.n = n


def worker_pid(host, env="w"):
    return host.call(env, "isohost_test_funcs:pid")


def raw_call(host, description, fds):
    """A pickled call with a hand-made description, through the core as the API sends one."""
    message = {"target": "isohost_value_funcs:echo", "args": [], "kwargs": {},
               "accept": values.PICKLE5, "pickle": description}
    return host._finish(host._core.submit("call", "w", json.dumps(message), fds), host._peer("w"))


def sealed_memfd(size):
    fd = os.memfd_create("test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def test_every_error_is_an_isohost_error():
    for name in ["SpawnFailed", "StartTimeout", "ProtocolError", "WorkerCrashed", "CallTimeout",
                 "WorkerException", "TargetNotFound", "BadRequest", "CrashLoop",
                 "UnknownEnvironment", "HostShuttingDown", "ConfigError", "EncodeError",
                 "DecodeError", "HibernateFailed", "WakeFailed", "Interrupted"]:
        cls = getattr(isohost, name)
        assert issubclass(cls, isohost.Error) and cls.kind == name


def test_worker_exception_carries_type_and_traceback(host):
    with pytest.raises(isohost.WorkerException) as caught:
        host.call("w", "isohost_test_funcs:raises_custom", "bad size")
    e = caught.value
    assert e.type_name == "isohost_test_funcs.FixtureError"
    assert "bad size" in str(e) and "raise FixtureError(message)" in e.traceback_text


def test_unpicklable_argument_is_an_encode_error_here(host):
    pid = worker_pid(host)
    before = descriptor_count()
    with pytest.raises(isohost.EncodeError, match="lock"):
        host.call("w", "isohost_value_funcs:echo", [np.ones(1 << 20), threading.Lock()])
    assert descriptor_count() == before
    assert worker_pid(host) == pid


def test_unpicklable_result_is_an_encode_error_from_the_worker(host):
    pid = worker_pid(host)
    with pytest.raises(isohost.EncodeError) as caught:
        host.call("w", "isohost_value_funcs:unpicklable_result")
    assert caught.value.type_name == "TypeError" and "lock" in str(caught.value)
    assert worker_pid(host) == pid


def test_argument_the_worker_cannot_unpickle_is_a_decode_error(host):
    pid = worker_pid(host)
    with pytest.raises(isohost.DecodeError) as caught:
        host.call("w", "isohost_value_funcs:echo", HostOnly(3), np.ones(1 << 20))
    assert caught.value.type_name == "ModuleNotFoundError"
    assert worker_pid(host) == pid


def test_result_the_host_cannot_unpickle_is_a_decode_error(host):
    before = descriptor_count()
    with pytest.raises(isohost.DecodeError, match="isohost_value_funcs"):
        host.call("w", "isohost_value_funcs:worker_only", 3)
    assert descriptor_count() == before
    assert host.call("w", "isohost_test_funcs:add", 1, 1) == 2


def test_buffer_announced_but_missing(host):
    description = {"stream": {"kind": "inline", "data": ""},
                   "buffers": [{"kind": "memfd", "size": 100, "readonly": True}]}
    with pytest.raises(isohost.DecodeError, match="announces 1 buffer.* but 0 descriptor"):
        raw_call(host, description, [])


def test_buffer_size_mismatch(host):
    description = {"stream": {"kind": "inline", "data": ""},
                   "buffers": [{"kind": "memfd", "size": 200, "readonly": True}]}
    with pytest.raises(isohost.DecodeError, match="holds 100 bytes but is described as 200"):
        raw_call(host, description, [sealed_memfd(100)])


def test_unknown_buffer_kind_and_unsealed_descriptor(host):
    description = {"stream": {"kind": "inline", "data": ""},
                   "buffers": [{"kind": "cuda_ipc", "size": 100}]}
    with pytest.raises(isohost.DecodeError, match="unknown kind 'cuda_ipc'"):
        raw_call(host, description, [sealed_memfd(100)])
    read_end, write_end = os.pipe()
    os.close(write_end)
    description["buffers"] = [{"kind": "memfd", "size": 0}]
    with pytest.raises(isohost.DecodeError, match="not a sealed memfd"):
        raw_call(host, description, [read_end])


def test_descriptors_the_host_receives_are_checked_and_closed():
    fd = sealed_memfd(10)
    probe = os.dup(fd)
    with pytest.raises(values.DecodeError, match="holds 10 bytes"):
        values.decode({"stream": {"kind": "inline", "data": ""},
                       "buffers": [{"kind": "memfd", "size": 20}]}, [fd])
    with pytest.raises(OSError):
        os.fstat(fd)
    os.close(probe)


def test_crash_timeout_missing_target_and_unknown_environment(fresh_host):
    with pytest.raises(isohost.WorkerCrashed, match="exited with code 9"):
        fresh_host.call("w", "isohost_test_funcs:crash_with_code", 9)
    with pytest.raises(isohost.CallTimeout):
        fresh_host.call("w", "isohost_test_funcs:sleep", 30)
    with pytest.raises(isohost.TargetNotFound):
        fresh_host.call("w", "no_such_module_here:f")
    with pytest.raises(isohost.UnknownEnvironment, match="nope"):
        fresh_host.call("nope", "isohost_test_funcs:pid")
    with pytest.raises(isohost.ProtocolError):
        fresh_host.call("w", "isohost_test_funcs:write_garbage")
    assert fresh_host.call("w", "isohost_test_funcs:add", 1, 2) == 3


def test_config_errors_and_closed_host(tmp_path):
    with pytest.raises(isohost.ConfigError):
        isohost.Host({"host": {"no_such_key": 1}})
    with pytest.raises(isohost.ConfigError):
        isohost.Host(str(tmp_path / "missing.toml"))
    path = tmp_path / "isohost.toml"
    path.write_text('[env.w]\npython = "/usr/bin/python3"\n')
    host = isohost.Host(path)
    assert host.call("w", "operator:add", 2, 2) == 4
    host.close()
    with pytest.raises(isohost.HostShuttingDown):
        host.call("w", "operator:add", 2, 2)
    host.close()


def test_a_target_or_environment_that_is_no_string_is_a_bad_request_here(host):
    for target in (5, None, ["os", "getpid"]):
        with pytest.raises(isohost.BadRequest, match="target is a string 'module:function'"):
            host.call("w", target)
    with pytest.raises(isohost.BadRequest, match="environment is named by a string, not 5"):
        host.call(5, "os:getpid")
    with pytest.raises(ValueError, match="GPU index from 0 to 255, not 1000000000000"):
        host.make_room(1, device=10 ** 12)
    assert host.call("w", "isohost_test_funcs:add", 1, 2) == 3


def test_a_dict_configuration_writes_any_unicode_and_names_what_it_cannot(tmp_path):
    """Names beyond the Basic Multilingual Plane (an emoji) and DEL reach the worker as given;
    what TOML cannot hold is named with its table and key."""
    odd = tmp_path / "d\u00e9j\u00e0 \U0001F600 \x7f"
    odd.mkdir()
    (odd / "isohost_odd_module.py").write_text("WHERE = __file__\n")
    env = {"python": config()["env"]["w"]["python"], "path": [str(odd)],
           "env": {"ISOHOST_ODD": "caf\u00e9 \U0001F600\ttab"}}
    with isohost.Host({"env": {"\u753b\u50cf\U0001F600": env}}) as h:
        name = "\u753b\u50cf\U0001F600"
        where = h.call(name, "isohost_odd_module:WHERE.__str__")
        assert where == str(odd / "isohost_odd_module.py")
        assert h.call(name, "os:getenv", "ISOHOST_ODD") == "caf\u00e9 \U0001F600\ttab"
    with pytest.raises(isohost.ConfigError, match=r"^\[env.w\] python: cannot write NoneType"):
        isohost.Host({"env": {"w": {"python": None}}})
    with pytest.raises(isohost.ConfigError, match=r"^\[env.w\] path: .* is not valid Unicode"):
        isohost.Host({"env": {"w": {"path": ["/tmp/\udcff"]}}})


def test_release_reap_and_ps(fresh_host):
    pid = worker_pid(fresh_host)
    workers = fresh_host.ps()["workers"]
    assert [w["pid"] for w in workers] == [pid] and workers[0]["pss"] > 0
    receipt = fresh_host.release("w")
    assert "rss_before" in receipt and "gc_collected" in receipt
    assert fresh_host.reap("w")["reaped"] is True
    assert fresh_host.release("other") == {"released": False,
                                          "reason": "no worker is running for environment 'other'"}
    assert worker_pid(fresh_host) != pid


def test_sleep_hibernate_and_wake_say_why_they_did_nothing(fresh_host):
    pid = worker_pid(fresh_host)  # a worker without torch: nothing on any card
    assert fresh_host.sleep("w") == {"asleep": False, "reason": "torch is not imported"}
    hibernated = fresh_host.hibernate("w")
    assert hibernated["hibernated"] is False and "no CUDA context" in hibernated["reason"]
    woken = fresh_host.wake("w")
    assert woken["woken"] is False and "is ready, neither hibernated nor asleep" in woken["reason"]
    assert fresh_host.sleep("other")["reason"] == "no worker is running for environment 'other'"
    assert worker_pid(fresh_host) == pid


def test_a_signal_interrupts_a_waiting_call_and_the_host_serves_on(fresh_host):
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()

    worker_pid(fresh_host)  # started and ready before the timer runs
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            fresh_host.call("w", "isohost_test_funcs:sleep", 1.5)
        # Interrupted while the call still ran, not after it ended.
        assert [w["state"] for w in fresh_host.ps()["workers"]] == ["busy"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fresh_host.call("w", "isohost_test_funcs:add", 2, 3) == 5  # after the sleep ends
