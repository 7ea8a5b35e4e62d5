"""Real ComfyUI servers for the tests: ComfyUI and the post-processing pack unpacked once per
session; servers started per module, each with its own base directory."""

import contextlib
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from comfy_server import REPO, ComfyServer, unpack, write_test_image
from workflows import IMAGE_FILE

VENV = REPO / ".venv"
# The GPU machine runs these with its own python3 for both (tests/gpu/check_comfyui_gpu.py).
COMFY_PYTHON = os.environ.get("ISOHOST_COMFY_PYTHON", str(VENV / "comfyui" / "bin" / "python"))
PACK_PYTHON = os.environ.get("ISOHOST_PACK_PYTHON", str(VENV / "pack" / "bin" / "python"))
# "gpu": ComfyUI runs on the GPU (no --cpu).
DEVICE = os.environ.get("ISOHOST_COMFY_DEVICE", "cpu")
# Where ComfyUI's packages that its interpreter lacks were put (the GPU machine's wheels).
_COMFY_ENV = ({"PYTHONPATH": os.environ["ISOHOST_COMFY_PYTHONPATH"]}
              if os.environ.get("ISOHOST_COMFY_PYTHONPATH") else {})
TEST_PACKS = Path(__file__).resolve().parent / "packs"
BUILD_PYTHON = Path(os.environ.get("ISOHOST_BUILD_PYTHON", REPO / "build" / "python"))

if not (BUILD_PYTHON / "isohost").is_dir():
    raise RuntimeError("%s holds no isohost package: build first (make build)" % BUILD_PYTHON)
for python in (COMFY_PYTHON, PACK_PYTHON):
    if not shutil.which(python):
        raise RuntimeError("%s is missing: run scripts/setup --comfyui" % python)


@contextlib.contextmanager
def holding_a_node(server):
    """Runs the schema pack's HoldIsohostSchema on `server` and yields {"pid": the process
    running it} while the node holds its thread; lets it go on leaving, and adds "outcome", the
    type of the prompt's last event."""
    name = "isohost-hold-%d-%d" % (os.getpid(), time.monotonic_ns())
    held = {}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)
        listener.listen(1)
        listener.settimeout(60)
        prompt_id = server.queue({"1": {"class_type": "HoldIsohostSchema",
                                        "inputs": {"socket": name}}})
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(60)
            with connection.makefile("rb") as said:
                held["pid"] = int(said.read())  # until the node's end of the handshake
            yield held
    _, message = server.wait_for_event(
        prompt_id, ("execution_success", "execution_error", "execution_interrupted"), 60)
    server.finish(prompt_id)
    held["outcome"] = message["type"]


@pytest.fixture(scope="session")
def comfy_tree(tmp_path_factory):
    """(ComfyUI root, post-processing pack dir), unpacked once."""
    return unpack(tmp_path_factory.mktemp("unpacked"))


def isolated_config(base, envs, host=None, comfyui=None):
    """isohost.toml in `base`: `envs` is {name: (python, [pack dirs])} or {name: (python,
    [pack dirs], [folders for its path])}."""
    lines = ["[host]", "call_timeout_seconds = 120", "start_timeout_seconds = 60",
             "shutdown_grace_seconds = 2"]
    lines += ["%s = %s" % (k, _toml(v)) for k, v in (host or {}).items()]
    if comfyui:
        lines += ["[comfyui]"] + ["%s = %s" % (k, _toml(v)) for k, v in comfyui.items()]
    for name, (python, packs, *path) in envs.items():
        lines += ["[env.%s]" % name, "python = %r" % str(python),
                  "packs = [%s]" % ", ".join(repr(str(p)) for p in packs)]
        if path:
            lines += ["path = [%s]" % ", ".join(repr(str(p)) for p in path[0])]
    (base / "isohost.toml").write_text("\n".join(lines).replace("'", '"') + "\n")


def _toml(value):
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def start_server(comfy_tree, base, custom_nodes=(), envs=None, host=None, comfyui=None,
                 env=None, args=()):
    root, _ = comfy_tree
    base.mkdir(parents=True, exist_ok=True)
    if envs is not None:
        isolated_config(base, envs, host, comfyui)
        custom_nodes = list(custom_nodes) + [REPO / "comfyui" / "isohost_comfyui"]
    (base / "input").mkdir(exist_ok=True)
    write_test_image(base / "input" / IMAGE_FILE)
    return ComfyServer(root, base, COMFY_PYTHON, custom_nodes,
                       env=dict(_COMFY_ENV, ISOHOST_PYTHONPATH=str(BUILD_PYTHON), **(env or {})),
                       args=args, cpu=DEVICE == "cpu")


IDIOMS = TEST_PACKS / "isohost_idiom_nodes"
# A library on the idiom environment's path alone (packs/env_library).
ENV_LIBRARY = TEST_PACKS / "env_library"


@pytest.fixture(scope="session")
def idiom_servers(comfy_tree, tmp_path_factory):
    """{"isolated", "in_process"}: the idiom pack (tests/comfyui/test_idioms_*.py) isolated in a
    worker under ComfyUI's own interpreter, and in process; started once for every idiom
    test."""
    base = tmp_path_factory.mktemp("idioms")
    started = {}
    try:
        started["isolated"] = start_server(comfy_tree, base / "isolated",
                                           envs={"idioms": (COMFY_PYTHON, [IDIOMS],
                                                            [ENV_LIBRARY])})
        started["in_process"] = start_server(comfy_tree, base / "in_process",
                                             custom_nodes=[IDIOMS])
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def server_factory(comfy_tree, tmp_path):
    """start(name, **options) -> a running ComfyServer, stopped (and checked) afterwards."""
    servers = []

    def start(name, **options):
        server = start_server(comfy_tree, tmp_path / name, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
