"""The adapter inside a real ComfyUI: progress, interrupts, crashes, errors in ComfyUI's words,
state per node id, validation, models that must not cross, packs that fail alone, and the scan
cache. Nodes from tests/comfyui/packs, isolated in the pack environment (numpy 1.26)."""

import json
import os
import signal
import subprocess
import urllib.error

import pytest

from comfy_server import REPO
from conftest import (_COMFY_ENV, BUILD_PYTHON, COMFY_PYTHON, DEVICE, PACK_PYTHON, TEST_PACKS,
                      isolated_config, start_server)

GRACE = 1.0


@pytest.fixture(scope="module")
def isolated(comfy_tree, tmp_path_factory):
    base = tmp_path_factory.mktemp("adapter") / "isolated"
    envs = {"tests": (PACK_PYTHON, [TEST_PACKS / "isohost_test_nodes",
                                    TEST_PACKS / "isohost_numpy1_pack",
                                    TEST_PACKS / "isohost_broken_pack",
                                    TEST_PACKS / "isohost_no_such_pack"]),
            "missing": ("/no/such/python", [TEST_PACKS / "isohost_gpu_nodes"])}
    server = start_server(comfy_tree, base, envs=envs,
                          comfyui={"interrupt_grace_seconds": GRACE})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def in_process(comfy_tree, tmp_path_factory):
    base = tmp_path_factory.mktemp("adapter") / "in_process"
    server = start_server(comfy_tree, base, custom_nodes=[TEST_PACKS / "isohost_test_nodes",
                                                          TEST_PACKS / "isohost_numpy1_pack"])
    yield server
    server.stop()


def node(class_type, node_id="1", **inputs):
    return {node_id: {"class_type": class_type, "inputs": inputs}}


def ui(history, node_id="1"):
    return history["outputs"][node_id]


def report(server):
    kind, message, history = server.run(node("ReportIsohost", tag="who"))
    assert kind == "execution_success", message
    return ui(history)


def progress_values(server, steps):
    prompt_id = server.queue(node("ProgressLoopIsohost", steps=steps, seconds_per_step=0.0))
    kind, message, _ = server.finish(prompt_id)
    assert kind == "execution_success", message
    return [(m["data"]["value"], m["data"]["max"], m["data"]["node"])
            for _, m in server.events(prompt_id, ("progress",))]


def test_progress_reaches_the_websocket_as_in_process(isolated, in_process):
    expected = [(i, 12, "1") for i in range(1, 13)]
    assert progress_values(in_process, 12) == expected
    assert progress_values(isolated, 12) == expected


def interrupt_after_start(server, workflow):
    before = len(server.messages)
    prompt_id = server.queue(workflow)
    server._wait_for(lambda: any(m.get("type") == "isohost_test.started"
                                 for _, m in server.messages[before:]), 60, "the node to start")
    sent = server.interrupt()
    ended_at, message = server.wait_for_event(prompt_id, ("execution_interrupted",
                                                          "execution_error", "execution_success"))
    server.finish(prompt_id)
    return message, ended_at - sent


def test_a_worker_gets_openmps_passive_wait_and_comfyui_keeps_its_own(isolated, in_process):
    assert report(isolated)["omp_wait_policy"] == [os.environ.get("OMP_WAIT_POLICY", "PASSIVE")]
    assert report(in_process)["omp_wait_policy"] == [os.environ.get("OMP_WAIT_POLICY", "")]


def test_an_interrupt_stops_a_python_loop_within_0_2_s_and_the_worker_serves_on(isolated):
    pid = report(isolated)["pid"]
    message, seconds = interrupt_after_start(isolated, node("BusyLoopIsohost", seconds=60.0))
    assert message["type"] == "execution_interrupted", message
    print("interrupt to execution_interrupted: %.3f s" % seconds)
    assert seconds < 0.2
    assert report(isolated)["pid"] == pid


def interrupt_at_a_tick(server):
    """Seconds from POST /interrupt to execution_interrupted for a loop that ticks every 20 ms."""
    prompt_id = server.queue(node("ProgressLoopIsohost", steps=10000, seconds_per_step=0.02))
    server.wait_for_event(prompt_id, ("progress",))
    sent = server.interrupt()
    ended_at, _ = server.wait_for_event(prompt_id, ("execution_interrupted",))
    server.finish(prompt_id)
    return ended_at - sent


@pytest.mark.parametrize("where", ["in_process", "isolated"])
def test_a_progress_loop_is_interrupted_at_its_next_tick(where, request):
    seconds = interrupt_at_a_tick(request.getfixturevalue(where))
    print("%s, interrupt to execution_interrupted: %.3f s" % (where, seconds))
    assert seconds < 0.2


def test_a_node_stuck_in_c_is_killed_within_the_grace_and_replaced(isolated):
    pid = report(isolated)["pid"]
    message, seconds = interrupt_after_start(isolated, node("StuckInCIsohost", seconds=60))
    assert message["type"] == "execution_interrupted", message
    print("stuck in C: interrupt to execution_interrupted %.3f s (grace %.1f s)" % (seconds, GRACE))
    assert GRACE <= seconds < GRACE + 2
    # Logged by the host as it kills the worker, and read from ComfyUI's output on its own thread.
    isolated.wait_for_log("did not stop within 1 s of its interrupt")
    assert report(isolated)["pid"] != pid


def test_a_worker_killed_mid_node_fails_the_prompt_by_name_and_the_next_succeeds(isolated):
    kind, message, _ = isolated.run(node("KillSelfIsohost"))
    assert kind == "execution_error", message
    assert message["data"]["exception_type"] == "isohost.WorkerCrashed"
    assert "killed by SIGKILL" in message["data"]["exception_message"]
    assert report(isolated)["numpy"] == [pack_numpy()]


def test_a_worker_replaced_between_prompts_is_sent_the_settings_again(isolated):
    # After a first call the stand-ins send the settings' key alone; a worker that died between
    # prompts (killed from outside here, as an idle reap would end it) is replaced by one that
    # lacks them, which says so, and the call goes again with them whole.
    pid = report(isolated)["pid"][0]
    os.kill(pid, signal.SIGKILL)
    isolated.wait_for_log("(pid %d, generation" % pid, "killed by SIGKILL while idle")
    again = report(isolated)
    assert again["pid"][0] != pid
    assert any("environment 'tests' has a new worker; its settings go again" in line
               for line in isolated.log)
    assert report(isolated)["pid"] == again["pid"]


def test_a_worker_exception_is_comfyuis_execution_error_with_the_workers_traceback(isolated):
    kind, message, _ = isolated.run(node("RaisesIsohost", message="tile 7 is 0 px wide"))
    assert kind == "execution_error"
    data = message["data"]
    assert data["exception_type"] == "ValueError" and data["node_id"] == "1"
    assert "tile 7 is 0 px wide" in data["exception_message"]
    assert "raise ValueError(message)" in data["exception_message"]  # the worker's frame
    assert "In isolated environment 'tests'" in data["exception_message"]


def test_state_on_self_is_kept_per_node_id_between_prompts(isolated):
    counts = []
    for node_id in ("7", "7", "8", "7"):
        kind, message, history = isolated.run(node("CounterIsohost", node_id, step=2))
        assert kind == "execution_success", message
        counts.append(ui(history, node_id)["count"][0])
    # Node 7 is absent from the third prompt, so ComfyUI drops its object, as in process
    # (test_isolated.py compares the two): the fourth prompt counts from nothing again.
    assert counts == [2, 4, 2, 2]


def test_validate_inputs_is_answered_by_the_worker(isolated):
    with pytest.raises(urllib.error.HTTPError) as refused:
        isolated.queue(node("CounterIsohost", step=0))
    body = json.loads(refused.value.read().decode())
    assert "step must be positive, got 0" in json.dumps(body)


def test_a_model_never_crosses_silently(isolated):
    workflow = dict(node("MakeModelIsohost", "1"), **node("UseModelIsohost", "2", model=["1", 0]))
    kind, message, _ = isolated.run(workflow)
    assert kind == "execution_error", message
    data = message["data"]
    assert data["exception_type"].endswith("ModelCannotCross"), data
    assert "output 0 (MODEL) of MakeModelIsohost is a torch.nn.modules.module.Module" in \
        data["exception_message"]


def test_a_pack_that_fails_and_a_missing_interpreter_are_reported_alone(isolated):
    log = "\n".join(isolated.log)
    assert "isohost_broken_pack (environment 'tests') not loaded: ImportError: " \
           "isohost_broken_pack needs a module this environment lacks" in log
    assert "isohost_no_such_pack (environment 'tests') not loaded: the directory does not " \
           "exist" in log
    assert "(environment 'missing') not loaded: the interpreter of environment 'missing', " \
           "/no/such/python, is not an executable file" in log
    # Found without a worker: none was started for the missing interpreter, nor a zygote.
    assert "worker 'missing'" not in log and "zygote of 'missing'" not in log
    info = isolated.object_info()
    assert "ReportIsohost" in info and "NumpyVersionIsohost" in info
    # ComfyUI's torch threads spin by default (its environment sets neither variable here).
    assert any("start ComfyUI with GOMP_SPINCOUNT=10000" in line for line in isolated.log)
    # The status route (the side panel) lists them, in the log's words.
    not_loaded = {(n["environment"], os.path.basename(n["pack"])): n["reason"]
                  for n in isolated.request("GET", "/isohost/status")["not_loaded"]}
    assert set(not_loaded) == {("tests", "isohost_broken_pack"),
                               ("tests", "isohost_no_such_pack"),
                               ("missing", "isohost_gpu_nodes")}
    assert not_loaded[("tests", "isohost_no_such_pack")] == "the directory does not exist"
    assert not_loaded[("missing", "isohost_gpu_nodes")].endswith("is not an executable file")
    assert "needs a module this environment lacks" in not_loaded[("tests", "isohost_broken_pack")]


def pack_numpy():
    import subprocess

    return subprocess.run([PACK_PYTHON, "-c", "import numpy; print(numpy.__version__)"],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_pack_that_needs_numpy_1_runs_isolated_and_would_not_import_in_comfyui(isolated,
                                                                                  in_process):
    if not pack_numpy().startswith("1."):
        pytest.skip("the pack environment has numpy %s: no numpy 1 wheel for its Python "
                    "(scripts/comfyui-envs)" % pack_numpy())
    kind, message, history = isolated.run(node("NumpyVersionIsohost"))
    assert kind == "execution_success", message
    assert ui(history)["numpy"] == [pack_numpy()]
    assert "NumpyVersionIsohost" not in in_process.object_info()
    assert any("isohost_numpy1_pack needs numpy 1.x, found 2." in line for line in in_process.log)


def test_a_warm_scan_cache_starts_no_worker_with_comfyui(comfy_tree, tmp_path):
    envs = {"tests": (PACK_PYTHON, [TEST_PACKS / "isohost_test_nodes"]),
            "schema": (COMFY_PYTHON, [TEST_PACKS / "isohost_schema_pack"])}
    first = start_server(comfy_tree, tmp_path / "cached", envs=envs)
    first.stop()
    assert any("started worker 'tests'" in line for line in first.log)
    second = start_server(comfy_tree, tmp_path / "cached", envs=envs)
    try:
        assert not any("started worker" in line for line in second.log), second.log_tail()
        assert report(second)["numpy"] == [pack_numpy()]  # the first call starts it
        # A pack's routes come from the cache too; the first request starts its worker.
        echo = second.request("GET", "/isohost_test/echo/warm")
        assert echo["name"] == "warm" and echo["pid"] != second.process.pid
        second.wait_for_log("started worker 'schema'")
    finally:
        second.stop()


def test_a_pack_left_in_custom_nodes_too_is_named_in_one_line(comfy_tree, tmp_path):
    pack = TEST_PACKS / "isohost_test_nodes"
    server = start_server(comfy_tree, tmp_path / "twice", custom_nodes=[pack],
                          envs={"tests": (PACK_PYTHON, [pack])})
    try:
        said = [line for line in server.log if "replace those of the same name" in line]
    finally:
        server.stop()
    assert len(said) == 1, server.log_tail()
    assert "nodes of %s replace those of the same name already loaded: " % pack in said[0]
    assert said[0].endswith("is the pack also in custom_nodes/? There it runs in ComfyUI's "
                            "process too: move it out")


def test_a_cached_scan_does_not_hide_a_missing_interpreter(comfy_tree, tmp_path):
    interpreter = tmp_path / "python"
    interpreter.symlink_to(PACK_PYTHON)
    envs = {"tests": (str(interpreter), [TEST_PACKS / "isohost_test_nodes"])}
    first = start_server(comfy_tree, tmp_path / "cached", envs=envs)
    first.stop()
    interpreter.unlink()
    second = start_server(comfy_tree, tmp_path / "cached", envs=envs)
    try:
        assert any("isohost_test_nodes (environment 'tests') not loaded: the interpreter of "
                   "environment 'tests', %s, is not an executable file" % interpreter in line
                   for line in second.log), second.log_tail()
        assert "ReportIsohost" not in second.object_info()
    finally:
        second.stop()


# ComfyUI's nodes loaded by a script, no server made: nodes.py first (it puts comfy/ before
# ComfyUI's root on sys.path, so importing ComfyUI's server after it would fail), then the adapter.
NODES_WITHOUT_A_SERVER = """
import json, sys
root, adapter, device = sys.argv[1:4]
sys.argv = [sys.argv[0]] + (["--cpu"] if device == "cpu" else [])
sys.path.insert(0, root)
import comfy.options
comfy.options.enable_args_parsing()
import nodes
sys.path.insert(0, adapter)
import isohost_comfyui
import torch
image = torch.rand(1, 8, 8, 3)
out = isohost_comfyui.NODE_CLASS_MAPPINGS["InvertIsohost"]().run_isolated(image=image)[0]
print(json.dumps({"inverted": bool(torch.equal(out, 1.0 - image))}))
isohost_comfyui.host.close()
"""


def test_the_adapters_nodes_run_in_a_script_without_comfyuis_server(comfy_tree, tmp_path):
    """As bench comfyui loads them: the nodes run; the routes and on-prompt handlers, with no
    server to serve them, are left out by name."""
    root, _ = comfy_tree
    isolated_config(tmp_path, {"tests": (COMFY_PYTHON, [TEST_PACKS / "isohost_test_nodes",
                                                        TEST_PACKS / "isohost_schema_pack"])})
    env = dict(os.environ, **_COMFY_ENV, ISOHOST_PYTHONPATH=str(BUILD_PYTHON),
               ISOHOST_COMFYUI_CONFIG=str(tmp_path / "isohost.toml"))
    done = subprocess.run([COMFY_PYTHON, "-c", NODES_WITHOUT_A_SERVER, str(root),
                           str(REPO / "comfyui"), DEVICE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"inverted": True}
    assert "routes of %s are not served: no ComfyUI server runs in this process" % (
        TEST_PACKS / "isohost_schema_pack") in done.stderr
    assert "on-prompt handlers of %s are not called: no ComfyUI server" % (
        TEST_PACKS / "isohost_schema_pack") in done.stderr
