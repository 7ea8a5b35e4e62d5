"""Isolated node packs in a real ComfyUI, driven through its HTTP API and websocket: the test
packs (tests/comfyui/packs) isolated beside the same packs in process, for what the adapter
promises: registration under the same interface, one node object per node id in the worker,
IS_CHANGED and VALIDATE_INPUTS answered there, tensors in and out byte-identical, errors in
ComfyUI's words, progress events as in process, interrupts (a Python loop within 0.2 s, a node
stuck in C killed within the grace period), a crash named and followed by a fresh worker, a
pack that fails or lacks its interpreter reported alone, and a warm scan cache that starts no
worker."""

import hashlib
import os
import time

import pytest

from conftest import COMFY_PYTHON, PACK_PYTHON, TEST_PACKS, start_server

NODES = TEST_PACKS / "isohost_test_nodes"
NUMPY1 = TEST_PACKS / "isohost_numpy1_pack"
BROKEN = TEST_PACKS / "isohost_broken_pack"
SCHEMA = TEST_PACKS / "isohost_schema_pack"
GRACE = 2.0
IMAGE = {"class_type": "LoadImage", "inputs": {"image": "isohost-test.png"}}


@pytest.fixture(scope="module")
def servers(comfy_tree, tmp_path_factory):
    """"isolated": the test packs in the pack environment (numpy 1.26), the class-based pack in
    ComfyUI's own interpreter (its comfy_api needs PyAV, which the pack environment lacks), a
    pack that fails to import, and one whose interpreter does not exist. "in_process": the same
    packs as ordinary custom nodes (the numpy 1 pack among them, which cannot import there)."""
    base = tmp_path_factory.mktemp("isolated")
    elsewhere = base / "elsewhere_pack"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    started = {}
    try:
        started["isolated"] = start_server(
            comfy_tree, base / "isolated", comfyui={"interrupt_grace_seconds": GRACE},
            envs={"pack": (PACK_PYTHON, [NODES, NUMPY1, BROKEN]),
                  "schema": (COMFY_PYTHON, [SCHEMA]),
                  "nowhere": ("/nonexistent/venv/bin/python", [elsewhere])})
        started["in_process"] = start_server(comfy_tree, base / "in_process",
                                             custom_nodes=[NODES, SCHEMA, NUMPY1])
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def isolated(servers):
    return servers["isolated"]


@pytest.fixture(scope="module")
def in_process(servers):
    return servers["in_process"]


def run_ok(server, workflow):
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    return history["outputs"]


def run_error(server, workflow):
    kind, message, _ = server.run(workflow)
    assert kind == "execution_error", (message, server.log_tail())
    return message["data"]


def report(server, tag="x", node="1"):
    """The Report node's outputs: pid, numpy, executable, unique_id, tag (one each)."""
    outputs = run_ok(server, {node: {"class_type": "ReportIsohost", "inputs": {"tag": tag}}})
    return {key: values[0] for key, values in outputs[node].items()}


def wait_for_message(server, kind, after, timeout=60):
    """The first websocket message of type `kind` received after index `after`."""
    found = []

    def seen():
        found[:] = [m for _, m in server.messages[after:] if m.get("type") == kind][:1]
        return bool(found)

    server._wait_for(seen, timeout, "a %s message" % kind)
    return found[0]


def start_and_interrupt(server, node, inputs):
    """Queues one node that tells the host when it has started (PromptServer.send_sync from
    the worker), interrupts it 0.3 s later; (end message, seconds from POST /interrupt)."""
    mark = len(server.messages)
    prompt_id = server.queue({"1": {"class_type": node, "inputs": inputs}})
    wait_for_message(server, "isohost_test.started", mark)
    time.sleep(0.3)
    sent = server.interrupt()
    ended_at, message = server.wait_for_event(
        prompt_id, ("execution_success", "execution_error", "execution_interrupted"), 60)
    server.finish(prompt_id)
    return message, ended_at - sent


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_nodes_are_registered_with_the_in_process_interface(isolated, in_process):
    mine, theirs = isolated.object_info(), in_process.object_info()
    names = [n for n in theirs if n.endswith(("Isohost", "IsohostSchema"))]
    assert len(names) == 11, names  # ten test nodes and the class-based one
    for name in names:
        assert name in mine, name
        for key in ("input", "input_order", "output", "output_name", "output_is_list",
                    "category", "output_node", "display_name", "description"):
            assert mine[name].get(key) == theirs[name].get(key), (name, key)
        assert "isohost_comfyui" in mine[name]["python_module"]
    assert "NumpyVersionIsohost" in mine and "NumpyVersionIsohost" not in theirs


def test_a_pack_that_fails_and_one_without_its_interpreter_are_reported_alone(isolated):
    log = "\n".join(isolated.log)
    elsewhere = isolated.base.parent / "elsewhere_pack"
    assert ("pack %s (environment 'pack') not loaded: ImportError: isohost_broken_pack needs a "
            "module this environment lacks" % BROKEN) in log
    assert "pack %s (environment 'nowhere') not loaded" % elsewhere in log
    assert "/nonexistent/venv/bin/python: No such file or directory" in log
    assert "10 nodes of %s run isolated in environment 'pack'" % NODES in log


def test_isolation_for_real_a_numpy1_pack_beside_comfyuis_numpy2(isolated, in_process):
    outputs = run_ok(isolated, {"1": {"class_type": "NumpyVersionIsohost", "inputs": {}}})
    assert outputs["1"]["numpy"][0].startswith("1.26.")
    assert any("isohost_numpy1_pack needs numpy 1.x, found 2." in line for line in in_process.log)
    here = report(in_process)
    assert here["numpy"].startswith("2.")


def test_a_node_runs_in_its_worker_with_hidden_inputs(isolated, in_process):
    there = report(isolated, tag="abc", node="17")
    assert there["executable"] == PACK_PYTHON
    assert there["pid"] != isolated.process.pid and there["pid"] in isolated.descendants()
    assert there["unique_id"] == "17" and there["tag"] == "abc"
    assert report(in_process)["pid"] == in_process.process.pid


def test_is_changed_is_answered_by_the_worker(isolated):
    """Report's IS_CHANGED says 'always changed' (NaN), so the same prompt runs it again; Invert
    has none, so ComfyUI caches it as it would in process."""
    assert report(isolated, "same")["tag"] == "same"
    assert report(isolated, "same")["tag"] == "same"
    workflow = {"1": IMAGE, "2": {"class_type": "InvertIsohost", "inputs": {"image": ["1", 0]}},
                "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
    run_ok(isolated, workflow)
    prompt_id = isolated.queue(workflow)
    isolated.finish(prompt_id)
    cached = [m["data"]["nodes"] for _, m in isolated.events(prompt_id, ("execution_cached",))]
    assert cached and "2" in cached[0]


def test_state_on_self_is_kept_per_node_id_between_prompts(isolated, in_process):
    workflow = {"5": {"class_type": "CounterIsohost", "inputs": {"step": 2}},
                "6": {"class_type": "CounterIsohost", "inputs": {"step": 1}}}
    for server in (isolated, in_process):
        counts = [run_ok(server, workflow) for _ in range(3)]
        assert [(c["5"]["count"][0], c["6"]["count"][0]) for c in counts] == \
            [(2, 1), (4, 2), (6, 3)]


def test_validate_inputs_is_answered_by_the_worker(isolated):
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as refused:
        isolated.queue({"5": {"class_type": "CounterIsohost", "inputs": {"step": 0}}})
    assert refused.value.code == 400
    assert "step must be positive, got 0" in refused.value.read().decode()


def saved_image(server, node, inputs=None):
    workflow = {"1": IMAGE,
                "2": {"class_type": node, "inputs": dict({"image": ["1", 0]}, **(inputs or {}))},
                "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0],
                                                            "filename_prefix": node}}}
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    return hashlib.sha256(server.output_files(history)["3"][0]).hexdigest(), history


def test_an_image_in_and_out_is_byte_identical(isolated, in_process):
    assert saved_image(isolated, "InvertIsohost")[0] == saved_image(in_process, "InvertIsohost")[0]


def test_a_class_based_comfy_api_node_runs_isolated(isolated, in_process):
    mine, history = saved_image(isolated, "ScaleImageIsohostSchema", {"factor": 0.7})
    theirs, their_history = saved_image(in_process, "ScaleImageIsohostSchema", {"factor": 0.7})
    assert mine == theirs
    pid = int(history["outputs"]["2"]["text"][0])
    assert pid != isolated.process.pid and pid in isolated.descendants()
    assert int(their_history["outputs"]["2"]["text"][0]) == in_process.process.pid


def test_a_worker_exception_is_comfyuis_execution_error(isolated, in_process):
    workflow = {"4": {"class_type": "RaisesIsohost", "inputs": {"message": "bad tile size"}}}
    mine, theirs = run_error(isolated, workflow), run_error(in_process, workflow)
    assert mine["node_id"] == theirs["node_id"] == "4"
    assert mine["exception_type"] == theirs["exception_type"] == "ValueError"
    message = mine["exception_message"]
    assert message.startswith("bad tile size")
    # The worker's traceback, down to the pack's own line.
    assert "In isolated environment 'pack'" in message
    assert 'packs/isohost_test_nodes/__init__.py", line' in message
    assert "raise ValueError(message)" in message


def test_a_model_never_crosses(isolated):
    error = run_error(isolated, {
        "1": {"class_type": "MakeModelIsohost", "inputs": {}},
        "2": {"class_type": "UseModelIsohost", "inputs": {"model": ["1", 0]}}})
    assert error["node_id"] == "1"
    assert error["exception_type"].endswith("ModelCannotCross")
    assert "output 0 (MODEL) of MakeModelIsohost is a torch.nn.modules.module.Module" in \
        error["exception_message"]


def progress_of(server, steps):
    prompt_id = server.queue({"3": {"class_type": "ProgressLoopIsohost",
                                    "inputs": {"steps": steps, "seconds_per_step": 0.01}}})
    server.finish(prompt_id)
    return [(m["data"]["value"], m["data"]["max"], m["data"]["node"])
            for _, m in server.events(prompt_id, ("progress",))]


def test_progress_events_are_those_in_process(isolated, in_process):
    mine = progress_of(isolated, 7)
    assert mine == progress_of(in_process, 7)
    assert mine == [(i, 7, "3") for i in range(1, 8)]


def test_an_interrupt_stops_a_busy_python_loop_within_0_2_s(isolated):
    before = report(isolated)["pid"]
    message, seconds = start_and_interrupt(isolated, "BusyLoopIsohost", {"seconds": 60.0})
    assert message["type"] == "execution_interrupted", message
    assert seconds < 0.2, seconds
    print("busy loop interrupted %.3f s after POST /interrupt" % seconds)
    assert report(isolated)["pid"] == before  # the same worker, still serving


def test_an_interrupt_stops_a_progress_loop_as_in_process(isolated, in_process):
    for server in (isolated, in_process):
        prompt_id = server.queue({"1": {"class_type": "ProgressLoopIsohost",
                                        "inputs": {"steps": 10000, "seconds_per_step": 0.02}}})
        server.wait_for_event(prompt_id, ("progress",))
        sent = server.interrupt()
        ended_at, message = server.wait_for_event(
            prompt_id, ("execution_success", "execution_error", "execution_interrupted"))
        server.finish(prompt_id)
        assert message["type"] == "execution_interrupted", message
        assert ended_at - sent < 0.2, (server is isolated, ended_at - sent)


def test_a_node_stuck_in_c_is_killed_within_the_grace_period(isolated):
    before = report(isolated)["pid"]
    message, seconds = start_and_interrupt(isolated, "StuckInCIsohost", {"seconds": 60})
    assert message["type"] == "execution_interrupted", message
    assert GRACE - 0.1 < seconds < GRACE + 1.0, seconds
    assert not alive(before)
    after = report(isolated)
    assert after["pid"] != before


def test_a_worker_killed_mid_node_is_named_and_the_next_prompt_runs(isolated):
    before = report(isolated)["pid"]
    error = run_error(isolated, {"9": {"class_type": "KillSelfIsohost", "inputs": {}}})
    assert error["node_id"] == "9"
    assert error["exception_type"] == "isohost.WorkerCrashed"
    assert "killed by SIGKILL" in error["exception_message"]
    assert "(pid %d, generation" % before in error["exception_message"]
    after = report(isolated)
    assert after["pid"] != before and after["numpy"].startswith("1.26.")


def test_a_warm_scan_cache_starts_no_worker(server_factory, tmp_path):
    import shutil

    pack = tmp_path / "isohost_test_nodes"
    shutil.copytree(NODES, pack)
    first = server_factory("cache", envs={"pack": (PACK_PYTHON, [pack])})
    assert first.descendants()  # the scan started the pack's worker
    cache = first.base / "isohost-scan-cache.json"
    first.stop()
    assert cache.is_file()
    second = server_factory("cache", envs={"pack": (PACK_PYTHON, [pack])})
    assert second.descendants() == []
    assert "ReportIsohost" in second.object_info()
    assert report(second)["executable"] == PACK_PYTHON  # started at the first prompt
    # A changed pack file is scanned again.
    second.stop()
    os.utime(pack / "__init__.py", ns=(time.time_ns(), time.time_ns()))
    third = server_factory("cache", envs={"pack": (PACK_PYTHON, [pack])})
    assert third.descendants()


def test_a_bad_configuration_is_one_logged_error_and_comfyui_starts(server_factory):
    server = server_factory("bad", envs={"pack": (PACK_PYTHON, [NODES])},
                            comfyui={"interrupt_grace": 3})
    log = "\n".join(server.log)
    assert "isohost: no isolated packs loaded: %s: unknown key 'interrupt_grace' in [comfyui]" \
        % (server.base / "isohost.toml") in log
    info = server.object_info()
    assert "ReportIsohost" not in info and "LoadImage" in info
