"""GPU checks of admission against nvidia-smi on a real card, run by bench/gpu/run.sh with the
isohost binary as the first argument. Standard library only. One line per check, then
"N passed, N failed".

A real `isohost serve` with four workers on one card:
1. three workers each leave 40 GiB in torch's cache; a fourth reserves 60 GiB, more than is
   free: the host releases idle caches and the grant follows (the fourth then allocates it);
2. `isohost ps` agrees with nvidia-smi within 5%, per worker and for the device;
3. with the caches gone and two workers holding 60 and 50 GiB in use, a third reserves 30 GiB:
   the host hibernates an idle worker (not a reap) and the grant follows.
The host never appears in nvidia-smi's process list.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ISOHOST = sys.argv[1]
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "fixtures_mod")
MIB = 1 << 20
results = []


def check(name, ok, detail):
    results.append(bool(ok))
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def smi(*query):
    return subprocess.run(["nvidia-smi", *query], check=True, capture_output=True, text=True).stdout


def apps():
    out = smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    return {int(p): int(u) * MIB for p, u in (l.split(",") for l in out.strip().splitlines() if l.strip())}


def device():
    out = smi("--query-gpu=memory.total,memory.used,memory.free", "--format=csv,noheader,nounits")
    total, used, free = (int(x) * MIB for x in out.strip().splitlines()[0].split(","))
    return {"total": total, "used": used, "free": free}


class Host:
    def __init__(self, tmp):
        self.socket = os.path.join(tmp, "control.sock")
        config = os.path.join(tmp, "isohost.toml")
        envs = "".join('[env.%s]\npython = "python3"\npath = ["%s"]\n' % (name, FIXTURES) for name in "abcd")
        with open(config, "w") as f:
            f.write("[host]\nidle_release_seconds = 0\nvram_reserve_mib = 512\n" + envs)
        self.log_path = os.path.join(tmp, "host.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([ISOHOST, "--log-level", "info", "serve", "--config", config,
                                         "--socket", self.socket], stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while not os.path.exists(self.socket) and time.time() < deadline:
            time.sleep(0.05)

    def cli(self, *args, timeout=300):
        return subprocess.run([ISOHOST, *args, "--socket", self.socket], capture_output=True, text=True,
                              timeout=timeout)

    def call(self, env, function, *args):
        done = self.cli("call", env, "isohost_test_funcs:" + function, "--args", json.dumps(list(args)))
        if done.returncode != 0:
            raise RuntimeError("call %s on %s failed: %s" % (function, env, done.stderr))
        return json.loads(done.stdout)

    def ps(self):
        return json.loads(self.cli("ps", "--json").stdout)

    def close(self):
        self.cli("shutdown")
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def compare_ps(host):
    ps = host.ps()
    listed = apps()
    for w in ps["workers"]:
        smi_used = listed.get(w["pid"], 0)
        ours = w.get("vram") or 0
        check("ps VRAM of '%s' within 5%% of nvidia-smi" % w["env"],
              abs(ours - smi_used) <= 0.05 * max(smi_used, 1) + MIB,
              "ps %d MiB, nvidia-smi %d MiB" % (ours // MIB, smi_used // MIB))
    d, smi_device = ps["devices"][0], device()
    check("ps device free within 5% of nvidia-smi", abs(d["free"] - smi_device["free"]) <= 0.05 * smi_device["total"],
          "ps %d MiB, nvidia-smi %d MiB; ps books: held %d, reclaimable %d, fixed %d, pending %d MiB"
          % (d["free"] // MIB, smi_device["free"] // MIB, d["held"] // MIB, d["reclaimable"] // MIB,
             d["fixed"] // MIB, d["pending"] // MIB))
    check("host absent from nvidia-smi", host.process.pid not in listed, "host pid %d" % host.process.pid)
    return ps


def main():
    with tempfile.TemporaryDirectory() as tmp:
        host = Host(tmp)
        try:
            for env in "abc":
                host.call(env, "cuda_allocate_mb", 40 * 1024)
                host.call(env, "cuda_drop_tensors")
            host.call("d", "cuda_allocate_mb", 1)
            before = device()
            print("device before: free %d MiB of %d" % (before["free"] // MIB, before["total"] // MIB))
            started = time.time()
            answer = host.call("d", "cuda_reserve_and_allocate_mb", 60 * 1024)
            check("60 GiB more than free is granted after releases",
                  answer["granted"] and answer["outcome"] == "release_then_grant",
                  "%s in %.2f s: %s" % (answer["outcome"], time.time() - started, answer["explanation"]))
            check("the grant was allocated", apps().get(host.ps()["workers"][3]["pid"], 0) > 60 * 1024 * MIB
                  or any(v > 60 * 1024 * MIB for v in apps().values()), "d holds %s" % answer.get("steps"))
            compare_ps(host)

            for env in "abc":
                host.cli("release", env)
            host.call("a", "cuda_allocate_mb", 50 * 1024)
            free = device()["free"]
            ask = max(free // MIB - 512 + 4 * 1024, 1024)  # more than is grantable by 4 GiB
            print("device free %d MiB; c asks %d MiB" % (free // MIB, ask))
            started = time.time()
            answer = host.call("c", "cuda_reserve_and_allocate_mb", ask)
            check("a request short by 4 GiB is granted after a hibernation, not a reap",
                  answer["granted"] and answer["outcome"] == "hibernate_then_grant"
                  and not any(s.startswith("reaped") for s in answer["steps"]),
                  "%s after %s in %.2f s: %s" % (answer["outcome"], answer["steps"], time.time() - started,
                                                 answer["explanation"]))
            ps = compare_ps(host)
            states = {w["env"]: w["state"] for w in ps["workers"]}
            check("the hibernated worker is still alive, hibernated", "hibernated" in states.values(),
                  json.dumps(states))
        finally:
            host.close()
            with open(host.log_path) as f:
                lines = [l.rstrip() for l in f if "admission" in l or "hibernat" in l or "release" in l]
            print("host log (admission, release, hibernation):")
            for line in lines:
                print("  " + line)
    print("%d passed, %d failed" % (results.count(True), results.count(False)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
