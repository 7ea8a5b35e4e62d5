"""A real `isohost serve` host for the live-view tests (top, metrics, the page): one environment
of plain /usr/bin/python3 with the test functions, its control socket and log in the test's own
directory. Teardown shuts the host down and checks that none of its processes is left."""

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("ISOHOST_BINARY", REPO / "build" / "isohost"))
FIXTURES = REPO / "tests" / "python" / "fixtures_mod"
PYTHON = "/usr/bin/python3"


def request(path, body, timeout=30):
    """One control request and its answer (a dict with "ok")."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(body) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the host closed the connection without answering")
            data += chunk
    return json.loads(data)


def wait_for(predicate, limit=30, what="the condition"):
    """Polls a state (a file, a socket, a process) until it holds; fails naming it."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %s s waiting for %s" % (limit, what))
        time.sleep(0.01)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (for a program that must be given
    one, like Prometheus; our own listeners take port 0 instead)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid):
    """The pids whose parent is pid, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class ServedHost:
    """`isohost serve` with env "a" (spawned); extra serve arguments and config text allowed."""

    def __init__(self, directory, serve_args=(), extra_config=""):
        self.dir = Path(directory)
        self.socket = str(self.dir / "control.sock")
        self.config = self.dir / "isohost.toml"
        self.config.write_text(
            "[host]\nshutdown_grace_seconds = 2\n%s\n[env.a]\npython = \"%s\"\npath = [\"%s\"]\n"
            % (extra_config, PYTHON, FIXTURES))
        self.log_path = self.dir / "host.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(BINARY), "serve", "--config", str(self.config), "--socket", self.socket,
             *serve_args], stdout=self.log, stderr=subprocess.STDOUT,
            env=dict(os.environ, TMPDIR=str(self.dir)))
        wait_for(self._answers_ps, what="the host's control socket (log: %s)" % self.log_path)

    def _answers_ps(self):
        if self.proc.poll() is not None:
            raise AssertionError("the host exited with %s; its log:\n%s" % (
                self.proc.returncode, self.log_path.read_text()[-3000:]))
        try:
            return request(self.socket, {"op": "ps"}, timeout=5)["ok"]
        except (FileNotFoundError, ConnectionRefusedError):
            return False

    def wait_log(self, pattern, limit=30):
        """The first match of the regular expression `pattern` in the host's log, once written."""
        def found():
            if self.proc.poll() is not None:
                raise AssertionError("the host exited with %s; its log:\n%s" % (
                    self.proc.returncode, self.log_path.read_text()[-3000:]))
            return re.search(pattern, self.log_path.read_text())
        return wait_for(found, limit, "%r in %s" % (pattern, self.log_path))

    def ask(self, op, **fields):
        answer = request(self.socket, dict(fields, op=op))
        assert answer["ok"], "%s: %s" % (op, answer)
        return answer["value"]

    def call(self, target, *args, env="a"):
        return self.ask("call", env=env, target=target, args=list(args))

    def close(self):
        descendants = children_of(self.proc.pid)
        if self.proc.poll() is None:
            try:
                request(self.socket, {"op": "shutdown"}, timeout=10)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("the host did not shut down within 30 s")
        self.log.close()
        for pid in descendants:
            wait_for(lambda: not os.path.exists("/proc/%d" % pid) or _is_zombie(pid),
                     what="child %d of the host to end" % pid)


def _is_zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def served_host(tmp_path):
    hosts = []

    def start(serve_args=(), extra_config=""):
        host = ServedHost(tmp_path, serve_args, extra_config)
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        host.close()
