"""GPU checks of sleep against nvidia-smi (issue 14), on a machine with an NVIDIA GPU, torch with
CUDA in python3, and a driver with the checkpoint API (CUDA 12.8+) for the hibernation checks.
Run by bench/gpu/sleep.sh with the isohost binary as the first argument. Standard library only.
One line per check, then "N passed, N failed"; exits 1 if any failed.

A real `isohost serve`, driven through `isohost sleep/wake/hibernate/call/ps --json`:
  (a) a worker holding a model (isohost_worker.stages:hold_model: parameters, buffers, a view,
      tensors in a dict and a list, one held only by a closure) put to sleep: its VRAM falls to
      about its context in nvidia-smi, ps shows it asleep with the bytes, a call wakes it, and
      every byte is the same (model_fingerprint), the view still a view of its parameter;
  (b) a CUDA allocation torch does not know of (cuMemAlloc through ctypes, filled with a
      pattern) keeps its bytes through a sleep and through a hibernation (the driver's path);
  (d) 50 sleep/wake cycles of a 1 GiB model, the fingerprint the same at the end;
  (e) a hibernation sleeps first: the answer shows the model's bytes slept and the driver moved
      only about the context; the wake restores it, the fingerprint the same;
  (f) a worker idle after its load prepares its first sleep (pinned staging, its host buffer
      faulted in): the sleep goes into that buffer with almost no page faults;
  (c) a worker killed -9 while asleep, and one killed mid-sleep, leave nothing on the card (no
      process in nvidia-smi, the card's memory back) nor in host memory, and the host serves on.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from gpu_checks import GIB, MIB, ServedHost, alive, apps, check, device_used, results, wait_until, within

ISOHOST = sys.argv[1]

# Called in the workers (written into the temporary directory, which is on their sys.path).
CHECKS_MODULE = '''
import ctypes
import hashlib
import random

_raw = {}


def _driver():
    if "lib" in _raw:
        return _raw["lib"]
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    _raw["lib"] = lib
    return lib


def _ok(result, what):
    if result != 0:
        raise RuntimeError("%s failed: CUresult %d" % (what, result))


def _context(lib):
    """torch's context (the device's primary one) made current on this thread."""
    import torch

    if "context" not in _raw:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        device = ctypes.c_int()
        _ok(lib.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()), "cuDeviceGet")
        context = ctypes.c_void_p()
        _ok(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        _raw["context"] = context
    _ok(lib.cuCtxSetCurrent(_raw["context"]), "cuCtxSetCurrent")


def raw_alloc(nbytes, seed):
    """cuMemAlloc `nbytes` behind torch's back and fill them with a pattern."""
    lib = _driver()
    _context(lib)
    nbytes = int(nbytes)
    pattern = random.Random(int(seed)).randbytes(nbytes)
    pointer = ctypes.c_uint64()
    _ok(lib.cuMemAlloc_v2(ctypes.byref(pointer), nbytes), "cuMemAlloc")
    source = ctypes.create_string_buffer(pattern, nbytes)
    _ok(lib.cuMemcpyHtoD_v2(pointer.value, source, nbytes), "cuMemcpyHtoD")
    _raw.update(pointer=pointer.value, nbytes=nbytes)
    return {"pointer": pointer.value, "bytes": nbytes, "sha256": hashlib.sha256(pattern).hexdigest()}


def raw_read():
    """The sha256 of what the raw allocation holds now, read back through the driver."""
    lib = _driver()
    _context(lib)
    back = ctypes.create_string_buffer(_raw["nbytes"])
    _ok(lib.cuMemcpyDtoH_v2(back, _raw["pointer"], _raw["nbytes"]), "cuMemcpyDtoH")
    return {"pointer": _raw["pointer"], "bytes": _raw["nbytes"],
            "sha256": hashlib.sha256(back.raw[:_raw["nbytes"]]).hexdigest()}


def sleep_buffer():
    """What the worker's preparer did while it idled (sleep_prepare.py), and whether the pinned
    staging area is made."""
    from isohost_worker import sleep, sleep_prepare

    return dict(sleep_prepare.report(), staging=sleep._staging is not None)


def aliasing():
    """Whether hold_model's view is still a view of its parameter, and every tensor on the card."""
    from isohost_worker import stages

    module, extras = stages._model
    view, parameter = extras["view"], module.p0
    return {
        "view_shares_storage": view.untyped_storage().data_ptr() == parameter.untyped_storage().data_ptr(),
        "view_offset": view.data_ptr() - parameter.data_ptr() == parameter.element_size(),
        "on_card": all(t.is_cuda for t in stages._model_tensors()),
    }
'''


def mib(value):
    return "-" if value is None else "%d MiB" % (value // MIB)


def status_field(pid, field):
    """A /proc/PID/status figure in bytes (VmRSS, RssAnon), 0 once the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class Host(ServedHost):
    ENVS = ("model", "raw", "cycle", "hib", "victim", "idle")

    def __init__(self, tmp):
        with open(os.path.join(tmp, "sleep_checks.py"), "w") as f:
            f.write(CHECKS_MODULE)
        config = "[host]\nidle_release_seconds = 0\nidle_reap_seconds = 0\n"
        for env in self.ENVS:
            config += '[env.%s]\npython = "python3"\npath = ["%s"]\n' % (env, tmp)
            if env == "idle":
                # The checks look at it through calls, each of which restarts its idle time:
                # its preparer starts as soon as a call ends, and each look pauses it.
                config += 'env = { ISOHOST_SLEEP_PREPARE_AFTER_S = "0" }\n'
        super().__init__(ISOHOST, tmp, config)

    def fingerprint(self, env):
        return self.call(env, "model_fingerprint")["sha256"]

    def reap(self, env):
        w = self.worker(env)
        self.op("reap", env)
        if w is not None:
            wait_until(lambda: not alive(w["pid"]) and w["pid"] not in apps(), 10, 0.1)


def check_sleep_of_a_model(host):
    """(a) VRAM to the context, ps asleep with the bytes, a call wakes it, every byte the same."""
    host.call("model", "open_cuda_context")
    pid = host.worker("model")["pid"]
    context = apps().get(pid)
    held = host.call("model", "hold_model", "[%d]" % (4 * GIB))
    expected = host.fingerprint("model")
    before = apps().get(pid)
    started = time.time()
    answer = host.op("sleep", "model")
    took = time.time() - started
    check("sleep answers asleep with the model's bytes",
          answer.get("asleep") is True and within(answer.get("bytes"), held["bytes"], 0.02),
          "model %s, answer %s (%.2f s as the CLI waited)" % (mib(held["bytes"]), json.dumps(answer), took))
    after = apps().get(pid, 0)
    check("an asleep worker's VRAM falls to about its context (nvidia-smi)",
          context is not None and before is not None and after <= context + 512 * MIB
          and before - after >= 0.95 * held["bytes"],
          "context %s, with the model %s, asleep %s" % (mib(context), mib(before), mib(after)))
    w = host.worker("model")
    sleep = w.get("sleep") or {}
    check("ps shows the worker asleep with the bytes it moved",
          w["state"] == "asleep" and within(sleep.get("bytes"), held["bytes"], 0.02),
          "state %s, sleep %s" % (w["state"], json.dumps(sleep)))
    got = host.fingerprint("model")
    shape = host.call("model", "aliasing", module="sleep_checks")
    w = host.worker("model")
    check("a call wakes it: same process; parameters, buffers, view, dict, list and closure tensors "
          "byte for byte the same; the view still a view of its parameter",
          got == expected and w["pid"] == pid and w["state"] == "ready" and all(shape.values()),
          "fingerprint %s vs %s, pid %s vs %s, state %s, %s" % (got[:16], expected[:16], w["pid"], pid,
                                                                w["state"], json.dumps(shape)))
    check("the woken worker's VRAM is back (nvidia-smi)", within(apps().get(pid), before, 0.03),
          "%s, before the sleep %s" % (mib(apps().get(pid)), mib(before)))


def check_prepared_first_sleep(host):
    """(f) a worker idle after its load pins its staging and faults its host buffer in; its
    first sleep goes into that memory, with almost no page faults, and wakes intact."""
    host.call("idle", "open_cuda_context")
    held = host.call("idle", "hold_model", "[%d]" % (2 * GIB))
    expected = host.fingerprint("idle")
    looks = [{}]

    def settled():  # each look is a call, which pauses the preparer
        looks.append(host.call("idle", "sleep_buffer", module="sleep_checks"))
        return looks[-1].get("state") in ("ready", "skipped", "off")

    wait_until(settled, 60)
    report = looks[-1]
    check("an idle worker prepares its first sleep: staging pinned, buffer faulted in",
          report.get("state") == "ready" and report.get("staging") is True
          and report.get("faulted", 0) >= report.get("need", 1) >= held["bytes"],
          json.dumps(report))
    answer = host.op("sleep", "idle")
    faults = answer.get("minor_faults", -1)
    check("its first sleep copies into the prepared buffer with almost no page faults",
          answer.get("asleep") is True and answer.get("host_buffer") == "prepared"
          and 0 <= faults < 1000,
          "host_buffer %s, %s minor faults, copy %.3f s for %s" % (
              answer.get("host_buffer"), faults, answer.get("copy_seconds", -1), mib(answer.get("bytes"))))
    check("and wakes with every byte the same", host.fingerprint("idle") == expected, "")
    host.reap("idle")


def check_raw_allocation(host):
    """(b) cuMemAlloc'd bytes torch does not know of, through a sleep and a hibernation."""
    host.call("raw", "hold_model", "[%d]" % GIB)
    written = host.call("raw", "raw_alloc", "[%d, 14]" % (64 * MIB), module="sleep_checks")
    slept = host.op("sleep", "raw")
    after_sleep = host.call("raw", "raw_read", module="sleep_checks")  # wakes it
    check("a CUDA allocation torch does not know of keeps its bytes through a sleep",
          slept.get("asleep") is True and after_sleep == written,
          "sleep %s; read back %s vs written %s" % (json.dumps(slept), after_sleep["sha256"][:16],
                                                   written["sha256"][:16]))
    hibernated = host.op("hibernate", "raw")
    after_hibernation = host.call("raw", "raw_read", module="sleep_checks")
    check("... and through a hibernation (the driver's path)",
          hibernated.get("hibernated") is True and after_hibernation == written,
          "hibernate %s; read back %s vs written %s" % (json.dumps(hibernated), after_hibernation["sha256"][:16],
                                                       written["sha256"][:16]))


def check_cycles(host, cycles=50):
    """(d) many sleeps and wakes of one model, nothing lost."""
    host.call("cycle", "hold_model", "[%d]" % GIB)
    expected = host.fingerprint("cycle")
    pid = host.worker("cycle")["pid"]
    failures, out_s, in_s = [], [], []
    for i in range(cycles):
        t0 = time.time()
        out = host.op("sleep", "cycle")
        t1 = time.time()
        back = host.op("wake", "cycle")
        t2 = time.time()
        out_s.append(t1 - t0)
        in_s.append(t2 - t1)
        if out.get("asleep") is not True or back.get("woken") is not True:
            failures.append((i, out, back))
    got = host.fingerprint("cycle")
    w = host.worker("cycle")
    check("%d sleep/wake cycles of a 1 GiB model, nothing lost" % cycles,
          not failures and got == expected and w["pid"] == pid and w["generation"] == 1,
          "failures %s, fingerprint %s vs %s, generation %s; sleep median %.3f s (max %.3f), "
          "wake median %.3f s (max %.3f), as the CLI waited" % (
              failures[:2], got[:16], expected[:16], w["generation"], statistics.median(out_s), max(out_s),
              statistics.median(in_s), max(in_s)))
    return expected


def check_hibernation_sleeps_first(host):
    """(e) the driver moves only what sleep left: about the context."""
    host.call("hib", "open_cuda_context")
    pid = host.worker("hib")["pid"]
    context = apps().get(pid)
    held = host.call("hib", "hold_model", "[%d]" % (4 * GIB))
    expected = host.fingerprint("hib")
    before = apps().get(pid)
    started = time.time()
    answer = host.op("hibernate", "hib")
    took = time.time() - started
    slept = answer.get("slept") or {}
    check("hibernate sleeps first: the answer shows the model's bytes slept",
          answer.get("hibernated") is True and within(slept.get("bytes"), held["bytes"], 0.02)
          and not answer.get("driver_only_because"),
          "model %s, %s (%.2f s as the CLI waited)" % (mib(held["bytes"]), json.dumps(answer), took))
    moved = answer.get("vram_moved")
    check("the driver moved only about the context",
          moved is not None and context is not None and moved <= context + 512 * MIB and pid not in apps(),
          "driver moved %s, the context alone was %s, with the model %s; listed in nvidia-smi: %s" % (
              mib(moved), mib(context), mib(before), pid in apps()))
    back = host.op("wake", "hib")
    got = host.fingerprint("hib")
    check("wake restores it: VRAM back, every byte the same",
          back.get("woken") is True and within(apps().get(pid), before, 0.03) and got == expected,
          "%s; VRAM %s vs %s; fingerprint %s vs %s" % (json.dumps(back), mib(apps().get(pid)), mib(before),
                                                      got[:16], expected[:16]))


def left_behind(host, pid, used_before, available_before, host_rss_before):
    """Waits for the killed worker to be gone; what it left: (ok, detail)."""
    gone = wait_until(lambda: not alive(pid) and (host.worker("victim") or {}).get("pid") != pid, 10)
    card_back = wait_until(lambda: device_used() <= used_before + 128 * MIB, 15, 0.2)
    listed = pid in apps()
    used = device_used()
    available = mem_available()
    host_rss = status_field(host.process.pid, "VmRSS")
    ok = gone and card_back and not listed and available >= available_before - 512 * MIB \
        and host_rss <= host_rss_before + 256 * MIB
    return ok, ("gone %s, in nvidia-smi %s, card used %s (before %s), MemAvailable %s (before %s), "
                "host RSS %s (before %s)" % (gone, listed, mib(used), mib(used_before), mib(available),
                                             mib(available_before), mib(host_rss), mib(host_rss_before)))


def check_kills(host, cycle_fingerprint):
    """(c) killed while asleep, and mid-sleep: nothing left; the host serves on."""
    for env in ("model", "raw", "hib"):
        host.reap(env)
    used, available, host_rss = device_used(), mem_available(), status_field(host.process.pid, "VmRSS")
    host.call("victim", "hold_model", "[%d]" % (2 * GIB))
    pid = host.worker("victim")["pid"]
    slept = host.op("sleep", "victim")
    in_ram = status_field(pid, "RssAnon")
    os.kill(pid, signal.SIGKILL)
    ok, detail = left_behind(host, pid, used, available, host_rss)
    check("a worker killed -9 while asleep leaves nothing on the card nor in host memory",
          slept.get("asleep") is True and ok,
          "asleep %s holding %s of anonymous RAM; %s" % (slept.get("asleep"), mib(in_ram), detail))

    used, available, host_rss = device_used(), mem_available(), status_field(host.process.pid, "VmRSS")
    host.call("victim", "hold_model", "[%d]" % (16 * GIB))
    pid = host.worker("victim")["pid"]
    rss_before = status_field(pid, "VmRSS")
    sleeping = subprocess.Popen([ISOHOST, "sleep", "victim", "--socket", host.socket],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The sleep copies into the worker's host RAM as it goes: a GiB there and not 16 is mid-sleep.
    caught, grown = False, 0
    deadline = time.time() + 60
    while time.time() < deadline and sleeping.poll() is None:
        grown = status_field(pid, "VmRSS") - rss_before
        if grown >= GIB:
            caught = True
            break
    os.kill(pid, signal.SIGKILL)
    out, _ = sleeping.communicate(timeout=60)
    ok, detail = left_behind(host, pid, used, available, host_rss)
    check("a worker killed -9 mid-sleep (16 GiB model) leaves nothing on the card nor in host memory",
          caught and ok,
          "killed with %s of the copy in its RAM%s, the CLI got %s; %s" % (
              mib(grown), "" if caught else " (NOT mid-sleep: the sleep had ended)", out.strip()[:160], detail))

    serving = host.process.poll() is None
    fingerprint = host.fingerprint("cycle")
    status = host.call("victim", "cuda_status")
    w = host.worker("victim")
    check("the host serves on: the other worker's model intact, a fresh worker for the killed one",
          serving and fingerprint == cycle_fingerprint and w is not None and w["generation"] == 3,
          "host alive %s, fingerprint %s vs %s, victim generation %s, %s" % (
              serving, fingerprint[:16], cycle_fingerprint[:16], w and w["generation"], json.dumps(status)))


def main_checks(tmp):
    host = Host(tmp)
    try:
        check_sleep_of_a_model(host)
        check_prepared_first_sleep(host)
        check_raw_allocation(host)
        fingerprint = check_cycles(host)
        check_hibernation_sleeps_first(host)
        check_kills(host, fingerprint)
    finally:
        if host.process.poll() is None:
            host.cli("shutdown")
            try:
                host.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                host.process.kill()
                host.process.wait()
        host.print_log("sleep", ("asleep", "woke", "sleep", "hibernated"), 4)


if __name__ == "__main__":
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            main_checks(tmp)
        except Exception as e:  # a broken step is a failed check, and the rest is reported
            check("checks ran to the end", False, "%s: %s" % (type(e).__name__, e))
    passed = sum(results)
    print("%d passed, %d failed (%.0f s)" % (passed, len(results) - passed, time.time() - started))
    sys.exit(0 if results and passed == len(results) else 1)
