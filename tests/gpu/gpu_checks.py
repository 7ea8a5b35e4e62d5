"""What the GPU check scripts share: one PASS/FAIL line per check, and the card as nvidia-smi and
/proc see it. Standard library only; the scripts import it from beside them."""

import json
import os
import subprocess
import time

MIB = 1 << 20
GIB = 1 << 30
# Every check's outcome, in order; a script ends with "N passed, N failed" from it.
results = []


def check(name, ok, detail):
    results.append(bool(ok))
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def within(value, expected, fraction):
    return value is not None and expected is not None and abs(value - expected) <= fraction * expected


def smi(*query):
    return subprocess.run(["nvidia-smi", *query], check=True, capture_output=True, text=True).stdout


def apps():
    """pid -> bytes of VRAM, for every compute process nvidia-smi lists."""
    out = smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    listed = {}
    for line in out.strip().splitlines():
        pid, used = [x.strip() for x in line.split(",")]
        listed[int(pid)] = int(used) * MIB
    return listed


def device_used():
    return int(smi("--query-gpu=memory.used", "--format=csv,noheader,nounits").strip().splitlines()[0]) * MIB


def alive(pid):
    """Whether the process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition, seconds, step=0.05):
    """Polls `condition` (a file, a state, a process) until it holds or `seconds` pass; returns
    whether it holds."""
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(step)
    return condition()


class ServedHost:
    """A real `isohost serve` (BINARY) with the config text given, its socket and log in `tmp`,
    driven through the CLI as a user would."""

    def __init__(self, binary, tmp, config_text):
        self.binary = binary
        self.socket = os.path.join(tmp, "control.sock")
        config = os.path.join(tmp, "isohost.toml")
        with open(config, "w") as f:
            f.write(config_text)
        self.log = open(os.path.join(tmp, "host.log"), "w")
        self.process = subprocess.Popen([binary, "--log-level", "info", "serve", "--config", config,
                                         "--socket", self.socket], stdout=self.log, stderr=self.log)
        wait_until(lambda: os.path.exists(self.socket), 20)

    def cli(self, *args, timeout=120):
        return subprocess.run([self.binary, *args, "--socket", self.socket], capture_output=True,
                              text=True, timeout=timeout)

    def call(self, env, function, args="[]", module="isohost_worker.stages"):
        done = self.cli("call", env, module + ":" + function, "--args", args)
        if done.returncode != 0:
            raise RuntimeError("call %s in %s failed: %s" % (function, env, done.stderr.strip()))
        return json.loads(done.stdout)

    def op(self, op, env):
        done = self.cli(op, env)
        return json.loads(done.stdout) if done.stdout.strip() else {"error": done.stderr.strip()}

    def ps(self):
        return json.loads(self.cli("ps", "--json").stdout)

    def worker(self, env):
        for w in self.ps()["workers"]:
            if w["env"] == env:
                return w
        return None

    def print_log(self, what, markers, ends):
        """Closes the host's log and prints its lines that hold any of `markers` (the first and
        last `ends`), then its last 8 lines."""
        self.log.close()
        with open(self.log.name) as f:
            lines = [l.rstrip() for l in f]
        marked = [l for l in lines if any(m in l for m in markers)]
        print("host log, %s lines (first %d, last %d):" % (what, ends, ends))
        for line in marked[:ends] + marked[-ends:]:
            print("  " + line)
        print("host log, last 8 lines:")
        for line in lines[-8:]:
            print("  " + line)
