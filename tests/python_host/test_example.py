"""examples/python_api.py runs as docs/python-api.md says it does."""

import os
import subprocess

from conftest import BUILD_PYTHON, PYTHON, REPO


def test_the_example_runs():
    env = dict(os.environ, PYTHONPATH=str(BUILD_PYTHON))
    done = subprocess.run([PYTHON, str(REPO / "examples" / "python_api.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "doubled: (16, 1024, 1024) float32 True"
    assert lines[1] == "sum: 1.0"
    assert lines[2] == "raised: ValueError - call math:sqrt raised ValueError: math domain error"
    assert lines[3].startswith("mean: 0.500 worker pid: ")
    assert lines[4].startswith("worker: numpy ready ")
