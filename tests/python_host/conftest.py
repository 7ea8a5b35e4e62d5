"""The Python host API under test: the isohost package from the build tree (build/python,
or $ISOHOST_BUILD_PYTHON), hosting real workers that run tests/python/fixtures_mod."""

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_PYTHON = Path(os.environ.get("ISOHOST_BUILD_PYTHON", REPO / "build" / "python"))
FIXTURES = REPO / "tests" / "python" / "fixtures_mod"
PYTHON = "/usr/bin/python3"

if not (BUILD_PYTHON / "isohost").is_dir():
    raise RuntimeError("%s holds no isohost package: build first (make build)" % BUILD_PYTHON)
sys.path.insert(0, str(BUILD_PYTHON))

import isohost  # noqa: E402


def config(**host):
    """Two fixture environments, short timeouts."""
    env = {"python": PYTHON, "path": [str(FIXTURES)]}
    return {"host": dict({"call_timeout_seconds": 20, "start_timeout_seconds": 20,
                          "shutdown_grace_seconds": 2}, **host),
            "env": {"w": dict(env), "other": dict(env)}}


def simulated_gpu(tmp_path, total_mib=1000):
    """The path of a simulated card (the config's `simulated_gpu`) of `total_mib`, free."""
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"devices": [{"index": 0, "name": "simulated",
                                            "total_mib": total_mib}], "processes": []}))
    return gpu


@pytest.fixture(scope="module")
def host():
    with isohost.Host(config()) as h:
        yield h


@pytest.fixture
def fresh_host():
    with isohost.Host(config(call_timeout_seconds=3)) as h:
        yield h


def descriptor_count():
    return len(os.listdir("/proc/self/fd"))


def mapping_count():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
