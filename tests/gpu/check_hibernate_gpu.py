"""GPU checks of hibernation against nvidia-smi, on a machine with an NVIDIA GPU whose driver has
the checkpoint API (CUDA 12.8+). Run by bench/gpu/hibernate.sh with the isohost binary as the
first argument. Standard library only. One line per check, then "N passed, N failed".

A real `isohost serve` with one worker holding a 4 GiB tensor: hibernated (its VRAM 0 in
nvidia-smi, device used drops by its amount, ps answers meanwhile), called again (same process,
data intact), 20 hibernate/wake cycles in a row with nothing lost, a worker without a context
refused with the reason, a hibernated worker reaped, killed and shut down with nothing left on
the card; the host never in nvidia-smi's process list.
"""

import json
import os
import signal
import sys
import tempfile
import time

from gpu_checks import GIB, MIB, ServedHost, alive, apps, check, device_used, results, wait_until, within

ISOHOST = sys.argv[1]


BUSY_MODULE = """
import threading, time, torch
_state = {"stop": False, "rounds": 0}

def start(seconds):
    a = torch.randn(8192, 8192, device="cuda")
    def loop():
        end = time.time() + seconds
        while time.time() < end and not _state["stop"]:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
            _state["rounds"] += 1
    threading.Thread(target=loop, daemon=True).start()
    return True

def rounds():
    return _state["rounds"]

def stop():
    _state["stop"] = True
    return _state["rounds"]
"""


class Host(ServedHost):
    def __init__(self, tmp):
        # A worker whose own thread keeps the GPU busy between calls: the driver's lock must
        # time out (CUDA_ERROR_NOT_READY) and leave it running.
        with open(os.path.join(tmp, "gpu_busy.py"), "w") as f:
            f.write(BUSY_MODULE)
        super().__init__(ISOHOST, tmp,
                         '[host]\nidle_release_seconds = 0\n'
                         '[env.gpu]\npython = "python3"\n[env.bare]\npython = "python3"\n'
                         '[env.busy]\npython = "python3"\npath = ["%s"]\n' % tmp)


def host_absent(host, when):
    listed = apps()
    check("host absent from nvidia-smi " + when, host.process.pid not in listed,
          "host pid %d, listed %s" % (host.process.pid, sorted(listed)))


def main_checks(tmp):
    host = Host(tmp)
    try:
        baseline = device_used()
        host.call("gpu", "import_module", '["torch"]')
        host.call("gpu", "open_cuda_context")
        host.call("gpu", "hold_tensor", "[%d]" % (4 * GIB))
        expected = host.call("gpu", "fill_held", "[7]")
        pid = host.worker("gpu")["pid"]
        before = apps().get(pid)
        used_before = device_used()
        check("worker holds 4 GiB and its context", before is not None and before > 4 * GIB,
              "%s MiB in nvidia-smi" % (before and before // MIB))
        host_absent(host, "before any hibernation")

        started = time.time()
        answer = host.op("hibernate", "gpu")
        took = time.time() - started
        check("hibernate answers hibernated", answer.get("hibernated") is True, json.dumps(answer))
        listed = apps()
        check("hibernated worker holds no VRAM (absent from nvidia-smi)", pid not in listed,
              "listed %s" % {p: v // MIB for p, v in listed.items()})
        used_after = device_used()
        dropped = used_before - used_after
        check("device used drops by the worker's VRAM within 3%", within(dropped, before or 0, 0.03),
              "dropped %d MiB, worker had %s MiB (%.2f s)" % (dropped // MIB, before and before // MIB, took))
        host_absent(host, "after cuInit and a checkpoint")
        started = time.time()
        worker = host.worker("gpu")
        ps_took = time.time() - started
        check("ps answers while hibernated, within 2 s", worker is not None and ps_took < 2,
              "%.3f s, state %s" % (ps_took, worker and worker["state"]))
        check("ps shows state hibernated and VRAM 0", worker["state"] == "hibernated" and worker["vram"] == 0,
              "state %s, vram %s (%s)" % (worker["state"], worker["vram"], worker["vram_method"]))
        grown = (worker.get("hibernation") or {}).get("ram_grown")
        check("ps shows the RAM it holds: grown by its VRAM within 5%", within(grown, before or 0, 0.05),
              "RAM grown %s MB, VRAM was %s MiB" % (grown and grown // 10**6, before and before // MIB))
        # The worker slept first: the driver moved only what was left (vram_moved), the sleep the
        # rest; vram_before is both.
        check("answer's vram_before is the worker's VRAM", within(answer.get("vram_before"), before or 0, 0.02),
              "%s (driver %s, slept %s)" % (answer.get("vram_before"), answer.get("vram_moved"),
                                            (answer.get("slept") or {}).get("bytes")))

        got = host.call("gpu", "held_checksum")
        w = host.worker("gpu")
        check("the next call wakes it: same process, data intact",
              got == expected and w["pid"] == pid and w["state"] == "ready",
              "checksum %s vs %s, pid %s vs %s, state %s" % (got["checksum"], expected["checksum"], w["pid"], pid,
                                                             w["state"]))
        check("woken worker's VRAM is back", within(apps().get(pid), before or 0, 0.02),
              "%s MiB" % (apps().get(pid, 0) // MIB))

        failures = []
        times = []
        for i in range(20):
            t0 = time.time()
            out = host.op("hibernate", "gpu")
            t1 = time.time()
            back = host.op("wake", "gpu")
            t2 = time.time()
            times.append((t1 - t0, t2 - t1))
            if out.get("hibernated") is not True or back.get("woken") is not True:
                failures.append((i, out, back))
        got = host.call("gpu", "held_checksum")
        w = host.worker("gpu")
        check("20 hibernate/wake cycles in a row, nothing lost",
              not failures and got == expected and w["pid"] == pid and w["generation"] == 1,
              "failures %s, checksum %s vs %s, generation %s; out %.2f..%.2f s, in %.2f..%.2f s" % (
                  failures[:2], got["checksum"], expected["checksum"], w["generation"],
                  min(t[0] for t in times), max(t[0] for t in times),
                  min(t[1] for t in times), max(t[1] for t in times)))
        host_absent(host, "after 21 cycles")

        host.call("bare", "import_module", '["torch"]')
        refusal = host.op("hibernate", "bare")
        check("a worker with no CUDA context is refused with the reason",
              refusal.get("hibernated") is False and "no CUDA context" in refusal.get("reason", ""),
              json.dumps(refusal))

        # Measured on the H200 (bench/results/h200-2026-12-02/hibernate-checks.txt): the lock is
        # taken between the thread's CUDA calls (7 ms), the thread then blocks in its next call
        # until the wake, and runs on; a lock asked for behind seconds of queued kernels times out
        # with CUDA_ERROR_NOT_READY instead (reference/measurements.md). Either is correct.
        host.call("busy", "start", "[60]", module="gpu_busy")
        time.sleep(1)
        answer = host.op("hibernate", "busy")
        before_rounds = host.call("busy", "rounds", module="gpu_busy")  # wakes it if hibernated
        time.sleep(1)
        after_rounds = host.call("busy", "stop", module="gpu_busy")
        taken = answer.get("hibernated") is True
        timed_out = answer.get("hibernated") is False and "CUDA_ERROR_NOT_READY" in answer.get("reason", "")
        check("a worker whose own thread keeps launching GPU work is hibernated between its calls or "
              "refused with NOT_READY, and its thread runs on after",
              (taken or timed_out) and after_rounds > before_rounds and host.worker("busy")["state"] == "ready",
              "%s; rounds %s then %s" % (json.dumps(answer), before_rounds, after_rounds))
        host.op("reap", "busy")

        # A hibernated worker reaped: gone at once, not woken, nothing left on the card.
        assert host.op("hibernate", "gpu").get("hibernated") is True
        reaped = host.op("reap", "gpu")
        deadline = time.time() + 5
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        check("a hibernated worker is reaped at once", reaped.get("reaped") is True and not alive(pid),
              json.dumps(reaped))

        # A hibernated worker killed from outside: the next call gets a fresh one.
        host.call("gpu", "open_cuda_context")
        pid2 = host.worker("gpu")["pid"]
        assert host.op("hibernate", "gpu").get("hibernated") is True
        os.kill(pid2, signal.SIGKILL)
        deadline = time.time() + 5
        while host.worker("gpu") is not None and time.time() < deadline:
            time.sleep(0.05)
        host.call("gpu", "open_cuda_context")
        w = host.worker("gpu")
        check("a hibernated worker killed -9 is replaced by a fresh generation",
              w["pid"] != pid2 and w["generation"] == 3 and pid2 not in apps(),
              "pid %s, generation %s" % (w["pid"], w["generation"]))

        # Shutdown with a hibernated worker: ended without waking, nothing left anywhere.
        pid3 = w["pid"]
        assert host.op("hibernate", "gpu").get("hibernated") is True
        host.cli("shutdown")
        host.process.wait(timeout=30)
        wait_until(lambda: device_used() <= baseline + 64 * MIB, 5, 0.1)
        check("shutdown ends a hibernated worker; the card is back to its baseline",
              not alive(pid3) and device_used() <= baseline + 64 * MIB,
              "device used %d MiB, baseline %d MiB" % (device_used() // MIB, baseline // MIB))
    finally:
        if host.process.poll() is None:
            host.process.kill()
            host.process.wait()
        host.print_log("hibernation", ("hibernated worker", "woke worker", "not hibernated"), 3)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        try:
            main_checks(tmp)
        except Exception as e:  # a broken step is a failed check, and the rest is reported
            check("checks ran to the end", False, "%s: %s" % (type(e).__name__, e))
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    sys.exit(0 if passed == len(results) else 1)
