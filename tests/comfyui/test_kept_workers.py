"""A worker holding outputs the running prompt still needs is kept: no reap takes them between
two nodes of its environment (here the idle reap, at 1 s, while a node of another environment
runs), as ComfyUI keeps its own outputs in process; once the prompt ends it may be reaped again
(docs/comfyui.md, "Values that stay in the worker")."""

import time

import pytest

from conftest import COMFY_PYTHON, PACK_PYTHON, TEST_PACKS, start_server

IMAGE = {"class_type": "LoadImage", "inputs": {"image": "isohost-test.png"}}
IDLE_REAP_SECONDS = 1.0


@pytest.fixture(scope="module")
def server(comfy_tree, tmp_path_factory):
    started = start_server(
        comfy_tree, tmp_path_factory.mktemp("kept"),
        envs={"pack": (PACK_PYTHON, [TEST_PACKS / "isohost_test_nodes"]),
              "wait": (COMFY_PYTHON, [TEST_PACKS / "isohost_wait_pack"])},
        host={"idle_reap_seconds": IDLE_REAP_SECONDS})
    try:
        yield started
    finally:
        started.stop()


def wait_until(predicate, timeout, what):
    """Polls a state isohost's status shows (nothing else tells of it)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "waited %d s for %s" % (timeout, what)
        time.sleep(0.05)


def pack_worker(server):
    """The "pack" environment's worker in isohost's status, or None."""
    status = server.request("GET", "/isohost/status")
    return next((w for w in status["workers"] if w["env"] == "pack"), None)


def test_a_worker_holding_the_prompts_outputs_outlives_its_idle_reap_until_the_prompt_ends(
        server, tmp_path):
    # Node 2's image stays in its worker for node 4, of the same environment; node 3, of
    # another, holds the prompt in between until the test writes its file.
    release = tmp_path / "release"
    prompt_id = server.queue({
        "1": IMAGE,
        "2": {"class_type": "InvertWithNoteIsohost", "inputs": {"image": ["1", 0]}},
        "3": {"class_type": "WaitForFileIsohost",
              "inputs": {"note": ["2", 1], "path": str(release), "timeout": 120.0}},
        "4": {"class_type": "PassAnyIsohost", "inputs": {"value": ["2", 0], "after": ["3", 0]}}})
    server._wait_for(lambda: any(m["data"].get("node") == "3" for _, m in
                                 server.events(prompt_id, ("executing",))),
                     60, "node 3 running")
    pid = None

    def kept_past_its_reap():
        nonlocal pid
        worker = pack_worker(server)
        assert worker is not None and (pid is None or worker["pid"] == pid), (
            "the worker holding node 2's image was reaped: %s" % worker)
        pid = worker["pid"]
        return worker["kept"] and worker["idle_seconds"] > 2 * IDLE_REAP_SECONDS

    wait_until(kept_past_its_reap, 60, "the worker kept past its idle reap")
    release.touch()
    kind, message, history = server.finish(prompt_id)
    assert kind == "execution_success", (message, server.log_tail())
    assert history["outputs"]["4"]["kind"] == ["Tensor"]
    assert history["outputs"]["4"]["more"] == ["after"]
    # The prompt ended: let go, the idle worker is reaped.
    wait_until(lambda: pack_worker(server) is None, 60, "the worker reaped once let go")
    server.wait_for_log("environment 'pack' let go")
