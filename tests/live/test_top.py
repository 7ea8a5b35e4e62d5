"""`isohost top` as a user sees it: the live view in a real tmux session, keys sent and the
screen read back; the plain frame through a pipe; and a host that is not there."""

import json
import os
import socket as sockets
import subprocess
import threading
import uuid

import pytest

from conftest import BINARY, request, wait_for

WIDTH, HEIGHT = 160, 40


class Tmux:
    """A tmux server of this test's own (-L), so no other session is ever touched."""

    def __init__(self):
        self.server = "isohost-top-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])

    def run(self, *args):
        return subprocess.run(["tmux", "-L", self.server, "-f", "/dev/null", *args], check=True,
                               capture_output=True, text=True).stdout

    def start(self, command):
        self.run("new-session", "-d", "-s", "top", "-x", str(WIDTH), "-y", str(HEIGHT), command)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys):
        self.run("send-keys", "-t", "top", *keys)

    def wait_screen(self, predicate, what, limit=30):
        """Polls the pane until predicate(screen) holds; fails with the last screen."""
        last = [""]

        def check():
            last[0] = self.screen()
            return predicate(last[0])

        try:
            wait_for(check, limit=limit, what=what)
        except AssertionError as e:
            raise AssertionError("%s; the screen:\n%s" % (e, last[0])) from None
        return last[0]

    def kill(self):
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True)


@pytest.fixture
def tmux():
    session = Tmux()
    yield session
    session.kill()


def top_command(socket, exit_file):
    """top in the pane, its exit status written where the test can wait for it."""
    return "%s top --socket %s; echo $? > %s" % (BINARY, socket, exit_file)


def line_with(screen, *parts):
    return next((line for line in screen.splitlines() if all(p in line for p in parts)), None)


def simulated_card(directory):
    """A 1000 MiB card in a file (src/probe/simulated_gpu.hpp), so the device bar is drawn."""
    gpu = directory / "gpu.json"
    gpu.write_text(json.dumps({"devices": [{"index": 0, "name": "simulated", "total_mib": 1000}],
                               "processes": []}))
    return gpu


def test_live_view_release_reap_resize_quit(served_host, tmux, tmp_path):
    gpu = simulated_card(tmp_path)
    host = served_host(extra_config='simulated_gpu = "gpu.json"\nvram_reserve_mib = 0')
    # 300 MiB in use and 200 MiB cached: a release gives the 200 back.
    pid = host.call("isohost_sim_vram:hold", str(gpu), 300, 200)
    exit_file = tmp_path / "top.exit"
    tmux.start(top_command(host.socket, exit_file))

    screen = tmux.wait_screen(lambda s: line_with(s, str(pid), "ready") and "reclaimable 200Mi" in s,
                              "worker %d ready, with its cache, on the screen" % pid)
    bar = line_with(screen, "GPU 0 simulated")
    assert bar is not None and len(bar.rstrip()) == WIDTH, screen
    assert "host pid %d" % host.proc.pid in screen

    # Select it (the only row: down and up again, by arrow and by letter), and release it.
    tmux.keys("Down")
    tmux.keys("k")
    tmux.keys("r")
    screen = tmux.wait_screen(lambda s: "release 'a': done" in s and "reclaimable 0" in s,
                              "the release's answer and the card without the cache")
    worker = host.ask("ps")["workers"][0]
    assert worker["pid"] == pid and worker["reclaimable_vram"] == 0, worker
    metrics = host_metrics(host)
    if metrics is not None:
        assert metrics["envs"]["a"]["releases"] == 1, metrics["envs"]["a"]

    # Narrower: the frame is drawn again for 120 columns.
    tmux.run("resize-window", "-t", "top", "-x", "120", "-y", str(HEIGHT))
    tmux.wait_screen(lambda s: len((line_with(s, "GPU 0 simulated") or "").rstrip()) == 120,
                     "the device bar redrawn 120 columns wide")

    tmux.keys("x")
    tmux.wait_screen(lambda s: "reap 'a': done, pid %d" % pid in s and "(no workers running)" in s,
                     "the reap's answer and no worker left")
    assert host.ask("ps")["workers"] == []

    tmux.keys("q")
    wait_for(lambda: exit_file.exists() and exit_file.read_text().strip() == "0",
             what="top to exit 0 after q")


def host_metrics(host):
    """The metrics op's value, or None on a host without it."""
    answer = request(host.socket, {"op": "metrics"})
    return answer["value"] if answer["ok"] else None


def test_live_view_waits_for_a_host_that_is_not_there_yet(served_host, tmux, tmp_path):
    socket = tmp_path / "control.sock"  # where served_host puts it
    exit_file = tmp_path / "top.exit"
    tmux.start(top_command(socket, exit_file))
    tmux.wait_screen(lambda s: "cannot reach a host on '%s'" % socket in s and "trying again" in s,
                     "the unreachable host named, and top still trying")
    host = served_host()
    tmux.wait_screen(lambda s: "host pid %d" % host.proc.pid in s and "cannot reach" not in s,
                     "the frame once the host is up")
    tmux.keys("q")
    wait_for(lambda: exit_file.exists() and exit_file.read_text().strip() == "0",
             what="top to exit 0 after q")


def test_plain_frame_through_a_pipe(served_host):
    host = served_host()
    pid = host.call("isohost_test_funcs:pid")
    for extra in ([], ["--once"]):
        out = subprocess.run([str(BINARY), "top", "--socket", host.socket, *extra],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout  # no terminal codes in a pipe
        assert "host pid %d" % host.proc.pid in out.stdout
        row = line_with(out.stdout, str(pid), "ready")
        assert row is not None and row.startswith("a "), out.stdout
        assert "GPU: none" in out.stdout or "GPU 0" in out.stdout


class OldHost:
    """A host from before the metrics op, on its own socket: it answers `metrics` as such a host
    did (unknown op) and `ps` with a real host's answer."""

    def __init__(self, path, ps_value):
        self.ps_value = ps_value
        self.asked = []
        self.listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection, connection.makefile("rwb") as stream:
                op = json.loads(stream.readline())["op"]
                self.asked.append(op)
                if op == "ps":
                    answer = {"ok": True, "value": self.ps_value}
                else:
                    answer = {"ok": False, "error": {
                        "kind": "BadRequest", "message": "unknown op '%s'; known: ps, call" % op}}
                stream.write((json.dumps(answer) + "\n").encode())

    def close(self):
        self.listener.close()


def test_plain_frame_from_a_host_without_the_metrics_op(served_host, tmp_path):
    host = served_host()
    pid = host.call("isohost_test_funcs:pid")
    old = OldHost(tmp_path / "old.sock", host.ask("ps"))
    try:
        out = subprocess.run([str(BINARY), "top", "--once", "--socket", str(tmp_path / "old.sock")],
                             capture_output=True, text=True, timeout=30)
    finally:
        old.close()
    assert out.returncode == 0, out.stderr
    assert old.asked == ["metrics", "ps"]
    assert line_with(out.stdout, str(pid), "ready") is not None, out.stdout
    assert " up " not in out.stdout.splitlines()[0]  # ps gives no uptime


def test_no_host_is_a_clear_error(tmp_path):
    socket = tmp_path / "nothing.sock"
    for extra in ([], ["--once"]):
        out = subprocess.run([str(BINARY), "top", "--socket", str(socket), *extra],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1
        assert out.stdout == ""
        assert out.stderr.startswith("isohost: ControlError: cannot reach a host on '%s'" % socket), out.stderr
