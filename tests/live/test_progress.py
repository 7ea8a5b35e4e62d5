"""Long CLI work shows its progress on stderr when stderr is a terminal, and nothing when it is
a pipe (docs/live-view.md). The terminal is a real pseudo-terminal; the command's table still
goes to stdout."""

import os
import pty
import subprocess

from conftest import BINARY, PYTHON


def run_with_terminal_stderr(args):
    """Runs args with stderr on a pseudo-terminal and stdout on a pipe; returns both."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        follower = -1
        stderr = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            stderr += chunk
        stdout = proc.stdout.read()
        assert proc.wait(timeout=120) == 0, stderr
        return stdout.decode(), stderr.decode()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


FOOTPRINT = [str(BINARY), "--log-level", "warn", "footprint", "--python", PYTHON, "--stages", "bare,numpy"]


def test_footprint_shows_each_stage_on_a_terminal_and_clears_the_line():
    stdout, stderr = run_with_terminal_stderr(FOOTPRINT)
    assert "footprint: starting a worker on %s" % PYTHON in stderr
    assert "footprint: stage numpy" in stderr
    # Each step overwrites the line; the last thing written clears it.
    assert stderr.endswith("\r")
    assert "numpy" in stdout and "footprint:" not in stdout


def test_footprint_writes_no_progress_into_a_pipe():
    done = subprocess.run(FOOTPRINT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "footprint:" not in done.stderr and "\r" not in done.stderr


def test_bench_names_each_figure_as_it_is_measured():
    _, stderr = run_with_terminal_stderr([str(BINARY), "bench", "probe", "--rounds", "10"])
    assert "bench probe: starting" in stderr
    assert "bench probe: measured " in stderr
