"""Tests of the worker's torch features (sleep), run with an interpreter that has torch
(.venv/comfyui/bin/python): in this process with the "cpu" stand-in for the GPU, and in real
worker processes over real sockets, with tests/python's small host."""

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


def load_sibling_conftest(directory):
    """tests/`directory`/conftest.py as a module, under a name of its own: pytest knows this file
    as `conftest` already."""
    path = HERE.parent / directory / "conftest.py"
    spec = importlib.util.spec_from_file_location("isohost_%s_tests_conftest" % directory, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_python_tests = load_sibling_conftest("python")
# The live-view tests' served host (`isohost serve` in the test's directory), for the host's side.
live = load_sibling_conftest("live")
Worker = _python_tests.Worker
PYTHON_FIXTURES = _python_tests.FIXTURES


@pytest.fixture
def spawn():
    """spawn(**options) -> a started Worker that can import tests/torch/fixtures and
    tests/python/fixtures_mod; all are ended afterwards."""
    yield from _python_tests.started_workers(paths=(str(FIXTURES), str(PYTHON_FIXTURES)))


@pytest.fixture
def worker(spawn):
    return spawn()
