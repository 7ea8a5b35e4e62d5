"""The host embedded in a Python program that handles its own children, as ComfyUI or any
program may: a thread that reaps every child (waitpid(-1)), or SIGCHLD ignored (the kernel then
reaps them at exit). The host's workers may be reaped by someone else first; each caller must
still get a named error for a worker that died, and the host must serve on (before, the host's
reap threw ECHILD, the worker was never marked dead and its caller waited for ever)."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD_PYTHON, FIXTURES, PYTHON

PROGRAM = textwrap.dedent("""
    import os, signal, sys, threading
    sys.path.insert(0, sys.argv[1])
    import isohost

    def reap_every_child():
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                threading.Event().wait(0.001)  # no child yet: the host starts one soon

    if sys.argv[3] == "reaper":
        threading.Thread(target=reap_every_child, daemon=True).start()
    else:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    env = {"python": sys.argv[4], "path": [sys.argv[2]]}
    config = {"host": {"call_timeout_seconds": 30, "start_timeout_seconds": 30},
              "env": {"w": env}}
    with isohost.Host(config) as host:
        assert host.call("w", "isohost_test_funcs:add", 1, 2) == 3
        try:
            host.call("w", "isohost_test_funcs:crash_with_code", 9)
        except isohost.WorkerCrashed as e:
            print("crash named:", e)
        assert host.call("w", "isohost_test_funcs:add", 2, 2) == 4
        print("served on")
""")


@pytest.mark.parametrize("children", ["reaper", "ignored"])
def test_a_worker_reaped_by_the_embedding_program_is_still_a_named_crash(children):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(BUILD_PYTHON), str(FIXTURES), children, PYTHON],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "crash named:" in done.stdout, done.stdout + done.stderr
    if children == "ignored":  # the kernel reaped it: the host cannot know its status
        assert "another part of this process" in done.stdout, done.stdout
    assert "served on" in done.stdout
