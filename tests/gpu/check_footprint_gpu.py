"""GPU checks of isohost's memory figures against nvidia-smi, on a machine with an NVIDIA GPU.

Run by bench/gpu/run.sh with the isohost binary as the first argument. Standard library only.
Prints one line per check and closes with "N passed, N failed".
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ISOHOST = sys.argv[1]
MIB = 1 << 20
results = []


def check(name, ok, detail):
    results.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def within(value, expected, fraction):
    return abs(value - expected) <= fraction * expected


def nvidia_smi_apps():
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True).stdout
    apps = {}
    for line in out.strip().splitlines():
        pid, used = [x.strip() for x in line.split(",")]
        apps[int(pid)] = int(used) * MIB
    return apps


def ask(socket_path, *args):
    return subprocess.run([ISOHOST, *args, "--socket", socket_path], check=True,
                          capture_output=True, text=True).stdout


def worker_figures(socket_path):
    ps = json.loads(ask(socket_path, "ps", "--json"))
    return ps, ps["workers"][0]


def serve_checks():
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "isohost.toml")
        socket_path = os.path.join(tmp, "control.sock")
        with open(config, "w") as f:
            f.write('[env.gpu]\npython = "python3"\nenv = { CUDA_MODULE_LOADING = "LAZY" }\n')
        host = subprocess.Popen([ISOHOST, "--log-level", "warn", "serve", "--config", config,
                                 "--socket", socket_path])
        try:
            deadline = time.time() + 20
            while not os.path.exists(socket_path) and time.time() < deadline:
                time.sleep(0.05)

            def call(function, args="[]"):
                subprocess.run([ISOHOST, "call", "--socket", socket_path, "gpu",
                                "isohost_worker.stages:" + function, "--args", args],
                               check=True, capture_output=True, text=True)

            call("import_module", '["torch"]')
            call("open_cuda_context")
            ps, worker = worker_figures(socket_path)
            apps = nvidia_smi_apps()
            smi = apps.get(worker["pid"])
            check("context VRAM matches nvidia-smi within 5%",
                  smi is not None and worker["vram"] is not None and within(worker["vram"], smi, 0.05),
                  "isohost %s MiB (%s), nvidia-smi %s MiB" % (
                      worker["vram"] and worker["vram"] // MIB, worker["vram_method"],
                      smi and smi // MIB))
            context = worker["vram"] or 0
            check("host holds no CUDA context (absent from nvidia-smi)", ps["host"]["pid"] not in apps,
                  "host pid %d, nvidia-smi pids %s" % (ps["host"]["pid"], sorted(apps)))
            check("fixed VRAM is the context", worker["fixed_vram"] == context - (worker["allocator_reserved"] or 0),
                  "fixed %s, allocator %s" % (worker["fixed_vram"], worker["allocator_reserved"]))

            call("hold_tensor", "[%d]" % (1 << 30))
            _, worker = worker_figures(socket_path)
            added = (worker["vram"] or 0) - context
            check("holding 1 GiB adds 1024 MiB within 2%", within(added, 1 << 30, 0.02),
                  "added %.1f MiB" % (added / MIB))

            call("drop_tensors")
            _, worker = worker_figures(socket_path)
            check("after del and empty_cache VRAM returns to the context figure",
                  within(worker["vram"] or 0, context, 0.02),
                  "%s MiB against %s MiB" % ((worker["vram"] or 0) // MIB, context // MIB))
            apps = nvidia_smi_apps()
            check("host still absent from nvidia-smi", ps["host"]["pid"] not in apps, str(sorted(apps)))
            ask(socket_path, "shutdown")
            host.wait(timeout=30)
        finally:
            if host.poll() is None:
                host.kill()


def footprint_checks(path):
    with open(path) as f:
        runs = json.load(f)
    for run in runs if isinstance(runs, list) else [runs]:
        mode = run["module_loading"]
        stages = {s["key"]: s for s in run["stages"]}
        missing = [k for k in ("bare", "torch", "cuda", "tensor", "release") if "skipped" in stages.get(k, {"skipped": 1})]
        check(mode + ": every stage measured", not missing, "skipped: %s" % missing)
        if missing:
            continue
        check(mode + ": import torch is many times the bare interpreter",
              stages["torch"]["pss"] > 5 * stages["bare"]["pss"],
              "%d MB vs %d MB" % (stages["torch"]["pss"] // 10**6, stages["bare"]["pss"] // 10**6))
        added = stages["tensor"]["vram"] - stages["cuda"]["vram"]
        check(mode + ": 1 GiB stage adds 1024 MiB within 2%", within(added, 1 << 30, 0.02),
              "%.1f MiB" % (added / MIB))
        check(mode + ": release stage returns to the context figure",
              within(stages["release"]["vram"], stages["cuda"]["vram"], 0.02),
              "%d vs %d MiB" % (stages["release"]["vram"] // MIB, stages["cuda"]["vram"] // MIB))


if __name__ == "__main__":
    serve_checks()
    if len(sys.argv) > 2:
        footprint_checks(sys.argv[2])
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    sys.exit(0 if passed == len(results) else 1)
