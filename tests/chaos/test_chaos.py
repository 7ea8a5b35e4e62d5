"""Chaos over real `isohost serve` hosts: each round starts a host with a spawned environment
and a zygote environment, has one of its workers start a setsid() grandchild (a daemon that
leaves the worker's process group), keeps callers busy (mid-call), asks for a cold start
(mid-start), and kill -9s one of host, zygote or worker at a random moment. After each round:
every caller got an answer or a named error (none hangs, none answered twice), and no process,
socket file, descriptor or memfd of the round is left; after a host's kill -9, a new host on the
same directory must end what the dead one left (its startup sweep), and replace its socket.
Bounded: ROUNDS rounds (100, about a minute and a half on two cores); ISOHOST_CHAOS_SEED replays
a run."""

import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("ISOHOST_BINARY", REPO / "build" / "isohost"))
FIXTURES = REPO / "tests" / "python" / "fixtures_mod"
PYTHON = "/usr/bin/python3"
ROUNDS = int(os.environ.get("ISOHOST_CHAOS_ROUNDS", "100"))
SEED = int(os.environ.get("ISOHOST_CHAOS_SEED", str(int(time.time()))))
ANSWER_LIMIT = 30  # seconds a caller may wait before the round fails as hung


def request(path, body, timeout=ANSWER_LIMIT):
    """One control request; its answer, or ("error", why) when the host went away."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall((json.dumps(body) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    return {"ok": False, "error": {"kind": "HostGone", "message": "connection closed"}}
                data += chunk
        except (ConnectionError, FileNotFoundError) as e:
            return {"ok": False, "error": {"kind": "HostGone", "message": str(e)}}
    return json.loads(data)


def processes_mentioning(text, files=("cmdline",)):
    """Live processes whose /proc files `files` hold `text`. A round's directory is on every
    worker's command line, and in the environment (TMPDIR) of everything its host started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # ended; its parent has not reaped it yet
            for name in files:
                with open("/proc/%s/%s" % (entry, name), "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
                        break
        except (OSError, IndexError):
            pass
    return found


def anything_of(directory):
    return processes_mentioning(str(directory), ("cmdline", "environ"))


def wait_for(predicate, limit=10):
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Host:
    def __init__(self, directory):
        self.dir = directory
        self.socket = str(directory / "control.sock")
        config = directory / "isohost.toml"
        # The round's directory is on every worker's path: it names the round's processes.
        env = 'python = "%s"\npath = ["%s", "%s"]\n' % (PYTHON, FIXTURES, directory)
        config.write_text("[host]\nshutdown_grace_seconds = 2\ncall_timeout_seconds = 20\n"
                          "[env.a]\n" + env + "[env.z]\n" + env + 'preload = ["isohost_test_funcs"]\n')
        self.log = open(directory / "host.log", "w")
        self.proc = subprocess.Popen(
            [str(BINARY), "--log-level", "warn", "serve", "--config", str(config), "--socket",
             self.socket], stdout=self.log, stderr=self.log, env=dict(os.environ, TMPDIR=str(directory)))
        assert wait_for(lambda: os.path.exists(self.socket) and request(self.socket, {"op": "ps"})["ok"])

    def ps(self):
        answer = request(self.socket, {"op": "ps"})
        assert answer["ok"], "ps: %s; the host's exit status: %s; its log:\n%s" % (
            answer, self.proc.poll(), (self.dir / "host.log").read_text()[-3000:])
        return answer["value"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def caller(host, env, target, args, answers):
    answers.append(request(host.socket, {"op": "call", "env": env, "target": target, "args": args}))


def test_chaos(tmp_path):
    rng = random.Random(SEED)
    print("chaos seed %d (ISOHOST_CHAOS_SEED), %d rounds" % (SEED, ROUNDS))
    descriptors_before = len(os.listdir("/proc/self/fd"))
    kills = {"host": 0, "zygote": 0, "worker": 0}
    grandchildren = {"a": 0, "z": 0}
    escaped = []
    for round_number in range(ROUNDS):
        directory = tmp_path / ("round%d" % round_number)
        directory.mkdir()
        host = Host(directory)
        try:
            # Warm workers in both environments, then keep them busy and start a cold one.
            for env in ("a", "z"):
                assert request(host.socket, {"op": "call", "env": env, "target": "isohost_test_funcs:pid"})["ok"]
            # A daemon started by one of them: setsid(), its parent gone, an exec'ed sleep.
            grandchild_env = rng.choice(["a", "z"])
            answer = request(host.socket, {"op": "call", "env": grandchild_env,
                                           "target": "isohost_test_funcs:start_setsid_grandchild",
                                           "args": [str(directory / "grandchild.pid")]})
            assert answer["ok"], answer
            grandchildren[grandchild_env] += 1
            answers = []
            callers = [threading.Thread(target=caller, args=(host, env, "isohost_test_funcs:sleep",
                                                             [rng.uniform(0.05, 0.5)], answers))
                       for env in ("a", "z", "a")]
            if rng.random() < 0.5:  # mid-start: a reap makes the next call start a new worker
                request(host.socket, {"op": "reap", "env": "z"})
                callers.append(threading.Thread(target=caller, args=(host, "z", "isohost_test_funcs:pid", [], answers)))
            for t in callers:
                t.start()
            time.sleep(rng.uniform(0, 0.3))  # a random moment: this is the chaos, not a wait
            victim = rng.choice(["host", "zygote", "worker"])
            status = host.ps()
            pids = {"host": [host.proc.pid],
                    "zygote": [z["pid"] for z in status["zygotes"] if z.get("pid", -1) > 0],
                    "worker": [w["pid"] for w in status["workers"]]}[victim]
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills[victim] += 1
                if victim == "host":
                    host.proc.wait()
            for t in callers:
                t.join(ANSWER_LIMIT)
                assert not t.is_alive(), "round %d: a caller hung after killing the %s" % (round_number, victim)
            assert len(answers) == len(callers), "round %d: %s" % (round_number, answers)
            for answer in answers:
                assert answer["ok"] or answer["error"]["kind"] in (
                    "WorkerCrashed", "HostGone", "HostShuttingDown", "ProtocolError"), answer
            if host.proc.poll() is None:
                answer = request(host.socket, {"op": "shutdown"})
                assert answer["ok"], "round %d, after killing the %s: %s" % (round_number, victim, answer)
                host.proc.wait(30)
            else:
                host.proc.wait()
        finally:
            host.close()
        # Workers and zygotes die with their host (the death signal), whatever was killed.
        assert wait_for(lambda: not processes_mentioning(str(directory))), \
            "round %d: processes left after killing the %s: %s" % (
                round_number, victim, processes_mentioning(str(directory)))
        if victim == "host":
            # A host killed with kill -9 cannot remove its socket, nor end a grandchild that
            # left its worker's tree; the next host on the path does both (its startup sweep
            # ends what carries the dead host's tag), and must then leave nothing.
            again = Host(directory)
            assert request(again.socket, {"op": "shutdown"})["ok"]
            again.proc.wait(30)
            again.close()
        grandchild = int((directory / "grandchild.pid").read_text())
        (directory / "grandchild.pid").unlink()
        wait_for(lambda: not anything_of(directory))
        left = anything_of(directory)
        if grandchild in left:
            escaped.append("round %d (from %r, the %s killed)" % (round_number, grandchild_env, victim))
            os.kill(grandchild, signal.SIGKILL)  # counted; the suite leaves nothing behind
            left.remove(grandchild)
        assert not left, "round %d: processes left after killing the %s: %s" % (round_number, victim, left)
    assert not escaped, "%d setsid grandchildren outlived their round: %s" % (len(escaped), escaped)
    for directory in tmp_path.iterdir():
        left = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
        assert left == ["host.log", "isohost.toml"], "%s holds %s" % (directory, left)
    assert len(os.listdir("/proc/self/fd")) == descriptors_before
    print("chaos: %d rounds, kills %s, setsid grandchildren %s, escaped grandchildren %d, "
          "orphans 0, hung callers 0, leaked descriptors 0" % (ROUNDS, kills, grandchildren, len(escaped)))
