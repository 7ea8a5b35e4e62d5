"""How a worker starts: argv, sys.path, and the hello it sends first."""

import glob
import importlib.metadata
import os
import platform
import struct
import subprocess
import sys

import pytest

from conftest import FIXTURES, PACKAGE_PARENT, WORKER_SCRIPT, frames


def _installed_torch():
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_hello_fields(worker):
    hello = worker.hello
    assert hello == {
        "op": "hello",
        "protocol": frames.VERSION,
        "pid": worker.pid,
        "env": "test",
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": _installed_torch(),
        "capabilities": ["call", "ping", "memory", "release", "hibernating", "woken", "shutdown", "answer",
                         "interrupt", "sleep", "wake"],
    }
    assert worker.value("isohost_test_funcs:protocol_version") == frames.VERSION


def test_hello_does_not_import_torch(worker):
    report = worker.request("memory")["value"]
    assert report["torch_imported"] is False


def test_hello_bytes_on_the_wire(spawn):
    w = spawn(expect_hello=False)
    raw = b""
    while len(raw) < 16:
        raw += w.sock.recv(16 - len(raw))
    magic, version, flags, json_length, buffer_count = struct.unpack("<4sHHII", raw)
    assert (magic, version, flags, buffer_count) == (b"ISOH", frames.VERSION, 0, 0)
    body = b""
    while len(body) < json_length:
        body += w.sock.recv(json_length - len(body))
    assert body.startswith(b"{") and b'"op":"hello"' in body


def test_script_mode_puts_the_package_parent_on_sys_path_not_the_package(worker):
    path = worker.value("isohost_test_funcs:sys_path")
    assert str(PACKAGE_PARENT / "isohost_worker") not in path
    assert str(PACKAGE_PARENT) in path
    assert path[0] == str(FIXTURES)


def test_module_mode(spawn):
    w = spawn(as_module=True, env_name="as-module")
    assert w.hello["env"] == "as-module"
    assert w.value("isohost_test_funcs:add", 2, 3) == 5


def test_path_dirs_go_first_in_order(spawn, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "isohost_test_which.py").write_text("NAME = %r\ndef name():\n    return NAME\n"
                                                      % folder.name)
    w = spawn(paths=[str(first), str(second), str(FIXTURES)])
    assert w.value("isohost_test_which:name") == "first"
    assert w.value("isohost_test_funcs:sys_path")[:3] == [str(first), str(second), str(FIXTURES)]


def test_without_path_the_fixtures_are_not_importable(spawn):
    w = spawn(paths=[])
    assert w.error("isohost_test_funcs:echo", 1)["where"] == "import"


def test_bad_fd_is_refused_with_a_message():
    result = subprocess.run(
        [sys.executable, "-s", "-u", str(WORKER_SCRIPT), "--fd", "97", "--env", "x"],
        capture_output=True, timeout=10)
    assert result.returncode == 2
    assert b"--fd 97" in result.stderr


def _other_interpreters():
    """Other CPython 3.9+ builds on this machine (pyenv), or ISOHOST_TEST_PYTHONS."""
    listed = os.environ.get("ISOHOST_TEST_PYTHONS")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = []
    for python in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))):
        minor = os.path.basename(os.path.dirname(os.path.dirname(python))).split(".")[1]
        if minor.isdigit() and int(minor) >= 9:
            found.append(python)
    return found


@pytest.mark.parametrize("python", _other_interpreters() or [None])
def test_other_interpreters_round_trip(spawn, python):
    if python is None:
        pytest.skip("no other Python 3.9+ interpreter found (set ISOHOST_TEST_PYTHONS)")
    w = spawn(python=python)
    assert w.hello["pid"] == w.pid
    assert w.value("isohost_test_funcs:kwargs_echo", a=[1, {"b": None}]) == {"a": [1, {"b": None}]}
    assert w.error("isohost_test_funcs:raises", "x")["type"] == "ValueError"
    assert w.request("ping")["value"] == {"pid": w.pid}
    assert w.request("release")["value"]["callbacks"] == 1
    w.send({"op": "shutdown"})
    assert w.wait() == 0


def test_any_inherited_descriptor_number(spawn):
    w = spawn(fd=None)
    if w.argv[w.argv.index("--fd") + 1] == "3":
        pytest.skip("the socket happened to be descriptor 3 here")
    assert w.value("isohost_test_funcs:add", 1, 2) == 3
