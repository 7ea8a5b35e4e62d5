"""Isolated nodes are the nodes in process, as ComfyUI sees them: the same packs isolated and
in process, side by side, compared for what test_adapter.py does not cover: the interface each
node shows (/object_info, inputs in their order), hidden inputs, IS_CHANGED deciding ComfyUI's
cache, node objects kept per node id as ComfyUI keeps them, a pack written in the class-based
comfy_api schema, a scan cache that notices a changed pack, and a broken configuration that
leaves ComfyUI running."""

import hashlib
import os
import shutil
import signal
import socket
import time

import pytest

from comfy_server import ADAPTER
from conftest import COMFY_PYTHON, PACK_PYTHON, TEST_PACKS, holding_a_node, start_server

NODES = TEST_PACKS / "isohost_test_nodes"
SCHEMA = TEST_PACKS / "isohost_schema_pack"
IMAGE = {"class_type": "LoadImage", "inputs": {"image": "isohost-test.png"}}


@pytest.fixture(scope="module")
def servers(comfy_tree, tmp_path_factory):
    """"isolated": the test nodes in the pack environment (numpy 1.26), the class-based pack in
    a worker under ComfyUI's own interpreter (comfy_api needs PyAV, which the pack environment
    lacks). "in_process": the same two packs as ordinary custom nodes."""
    base = tmp_path_factory.mktemp("isolated")
    started = {}
    try:
        started["isolated"] = start_server(
            comfy_tree, base / "isolated",
            envs={"pack": (PACK_PYTHON, [NODES]), "schema": (COMFY_PYTHON, [SCHEMA])},
            comfyui={"route_timeout_seconds": 3.0})
        started["in_process"] = start_server(comfy_tree, base / "in_process",
                                             custom_nodes=[NODES, SCHEMA])
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


def report(server, tag="x", node="1"):
    """The Report node's outputs: pid, numpy, executable, unique_id, tag."""
    outputs = run_ok(server, {node: {"class_type": "ReportIsohost", "inputs": {"tag": tag}}})
    return {key: values[0] for key, values in outputs[node].items()}


def test_every_node_shows_comfyui_the_interface_it_has_in_process(isolated, in_process):
    mine, theirs = isolated.object_info(), in_process.object_info()
    names = [n for n in theirs if n.endswith(("Isohost", "IsohostSchema"))]
    assert len(names) == 31, names  # twenty-seven test nodes and the four class-based ones
    for name in names:
        assert name in mine, name
        for key in ("input", "input_order", "output", "output_name", "output_is_list",
                    "output_tooltips", "category", "output_node", "display_name",
                    "description"):
            assert mine[name].get(key) == theirs[name].get(key), (name, key)
        # The pack's module, as in process (the frontend's badge), not the adapter's.
        assert mine[name]["python_module"] == theirs[name]["python_module"], name
        assert mine[name]["python_module"] in ("custom_nodes.isohost_test_nodes",
                                               "custom_nodes.isohost_schema_pack"), name
    # Inputs in their declared order, not sorted (ComfyUI draws them in this order).
    assert mine["ProgressLoopIsohost"]["input_order"]["required"] == ["steps",
                                                                      "seconds_per_step"]


def test_the_packs_web_directory_is_served_as_in_process(isolated, in_process):
    import urllib.request

    script = "/extensions/isohost_test_nodes/isohost_test.js"
    for server in (isolated, in_process):
        assert script in server.request("GET", "/extensions"), server is isolated
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (server.port, script)) as answer:
            assert answer.read() == (NODES / "web" / "isohost_test.js").read_bytes()


def http(server, method, path, body=None, headers=None):
    """(status, headers, body) of a request to `server`, whatever its status."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request("http://127.0.0.1:%d%s" % (server.port, path), data=body,
                                     method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def open_route_channel(server, method="GET", path="/isohost_test/echo/ready"):
    """Until the schema pack's route answers: the first request starts its worker and opens
    the channel to its routes, which may outlast the route timeout (3 s) on a busy machine."""
    for _ in range(10):
        if http(server, method, path)[0] == 200:
            return
    raise AssertionError("the schema pack's route %s never answered" % path)


@pytest.mark.parametrize("where", ["isolated", "in_process"])
def test_a_packs_route_interrupting_the_prompt_stops_it_as_in_process(where, servers):
    # The route runs in the schema pack's worker, the node in the test pack's: ComfyUI's flag is
    # set as the route asks, and the running node stops at its next tick.
    server = servers[where]
    # Its first answer imports ComfyUI's nodes module in the worker, which outlasted the route
    # timeout on the busy 2-core machine; asked while no prompt runs, it interrupts none.
    open_route_channel(server, "POST", "/isohost_test/interrupt")
    loop = {"1": {"class_type": "ProgressLoopIsohost",
                  "inputs": {"steps": 100000, "seconds_per_step": 0.02}}}
    prompt_id = server.queue(loop)
    server.wait_for_event(prompt_id, ("progress",))
    assert http(server, "POST", "/isohost_test/interrupt")[::2] == (200, b'{"interrupted": true}')
    kind, message, _ = server.finish(prompt_id, timeout=60)
    assert kind == "execution_interrupted", (kind, message)
    # Asked while no prompt runs, it interrupts none: the next prompt clears it as it starts.
    assert http(server, "POST", "/isohost_test/interrupt")[0] == 200
    loop["1"]["inputs"].update(steps=3, seconds_per_step=0.0)
    loop["2"] = {"class_type": "ProgressLoopIsohost",
                 "inputs": {"steps": 2, "seconds_per_step": 0.0}}
    run_ok(server, loop)


def test_a_packs_route_interrupting_its_own_workers_running_node_stops_it(isolated):
    # The route runs on the worker's server loop while its main thread runs the pack's node
    # (held in C, in recv): the interrupt is set in ComfyUI at once, not kept for the node's
    # end, so the node's call is interrupted and raises as it comes back to Python.
    open_route_channel(isolated)  # not behind the held node
    with holding_a_node(isolated) as held:
        assert http(isolated, "POST", "/isohost_test/interrupt")[0] == 200
        isolated.wait_for_log("interrupting the call in flight in worker 'schema'")
    assert held["outcome"] == "execution_interrupted"


def test_a_packs_http_routes_are_served_through_its_worker_as_in_process(isolated, in_process):
    """The class-based pack adds routes to ComfyUI's server; isolated, its handlers run in its
    worker (another pid) and answer as in process: path variables, query, headers, a JSON body,
    cookies, a raised HTTPNotFound, HEAD of a GET route, a file, a static directory, and each
    under /api too. A handler that hangs is cancelled at route_timeout_seconds."""
    import json

    echo = "/isohost_test/echo/caf%C3%A9?size=3&size=4&tag=x"
    answers = {}
    for name, server in (("isolated", isolated), ("in_process", in_process)):
        got = answers[name] = {}
        for prefix in ("", "/api"):
            status, headers, body = http(server, "GET", prefix + echo,
                                         headers={"X-Isohost-Test": "yes"})
            assert status == 200, (name, body, server.log_tail())
            assert headers["Content-Type"].startswith("application/json")
            got[prefix + "echo"] = json.loads(body)
        status, headers, body = http(server, "POST", "/isohost_test/sum",
                                     json.dumps({"numbers": [1, 2, 39]}).encode(),
                                     {"Content-Type": "application/json"})
        got["sum"] = (status, body, headers["X-Isohost-Sum"], headers["Set-Cookie"])
        got["missing"] = http(server, "GET", "/isohost_test/missing")[::2]
        got["source"] = http(server, "GET", "/isohost_test/source")[::2]
        got["static"] = http(server, "GET", "/isohost_test/static/__init__.py")[::2]
        got["fails"] = http(server, "GET", "/isohost_test/fails")
        got["head"] = http(server, "HEAD", "/isohost_test/echo/x")[::2]
    mine, theirs = answers["isolated"], answers["in_process"]
    worker = mine["echo"]["pid"]
    for key in ("echo", "/apiecho"):
        assert mine[key].pop("pid") != isolated.process.pid
        assert theirs[key].pop("pid") == in_process.process.pid
        assert mine[key] == theirs[key], key
    assert mine["echo"] == {"name": "caf\u00e9", "query": {"size": "3", "tag": "x"},
                            "header": "yes", "path": "/isohost_test/echo/caf\u00e9",
                            "remote": "127.0.0.1"}
    assert mine["sum"] == theirs["sum"]
    assert mine["sum"][:3] == (200, b"42", "3") and "isohost_test=summed" in mine["sum"][3]
    assert mine["missing"] == theirs["missing"] == (404, b"nothing here")
    assert mine["head"] == theirs["head"] == (200, b"")
    pack_source = (SCHEMA / "__init__.py").read_bytes()
    assert mine["source"] == theirs["source"] == (200, pack_source)
    assert mine["static"] == theirs["static"] == (200, pack_source)
    # A handler's exception: 500 as in process, and here with its type and message.
    assert mine["fails"][0] == theirs["fails"][0] == 500
    assert mine["fails"][2] == b"RuntimeError: this route fails on purpose"
    isolated.wait_for_log("failed in its worker", "this route fails on purpose")
    # A handler that awaits too long is cancelled after route_timeout_seconds and answered
    # 504; its worker serves on.
    started = time.monotonic()
    status, _, body = http(isolated, "GET", "/isohost_test/slow")
    assert status == 504 and b"within 3 s (route_timeout_seconds)" in body, (status, body)
    assert time.monotonic() - started >= 3.0
    status, _, body = http(isolated, "GET", echo)
    assert status == 200 and json.loads(body)["pid"] == worker
    # One that blocks its server loop until the test lets go is answered 504 at 3 s; the
    # worker's next request waits for the loop, as every request of ComfyUI's would in process,
    # and is answered once the handler returns.
    name = "isohost-stuck-%d-%d" % (os.getpid(), time.monotonic_ns())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)
        listener.listen(1)
        listener.settimeout(60)
        status, _, body = http(isolated, "GET", "/isohost_test/stuck?socket=" + name)
        assert status == 504 and b"within 3 s (route_timeout_seconds)" in body, (status, body)
        connection, _ = listener.accept()  # the handler, still blocking its loop
        with connection, connection.makefile("rb") as said:
            assert int(said.read()) == worker
    status, _, body = http(isolated, "GET", echo)  # the handler let go on the close above
    assert status == 200 and json.loads(body)["pid"] == worker
    # Its worker killed mid-request: a 503 that says so; the next request gets a fresh worker.
    # (In process this would kill ComfyUI.)
    status, _, body = http(isolated, "POST", "/isohost_test/crash", b"")
    assert status == 503 and b"ended before it answered" in body, (status, body)
    isolated.wait_for_log("killed by SIGKILL")
    status, _, body = http(isolated, "GET", echo)
    assert status == 200 and json.loads(body)["pid"] not in (worker, isolated.process.pid)


def test_a_packs_streamed_response_arrives_chunk_by_chunk_as_in_process(isolated, in_process):
    """A handler that writes its StreamResponse itself: its first chunk reaches the client while
    the handler still waits (for a second request), the rest after; one that fails midway ends
    the response early (the client's read is incomplete), both as in process."""
    from http.client import HTTPConnection, IncompleteRead

    got = {}
    for name, server in (("isolated", isolated), ("in_process", in_process)):
        for query in ("", "?fail"):
            connection = HTTPConnection("127.0.0.1", server.port, timeout=60)
            try:
                connection.request("GET", "/isohost_test/stream" + query)
                response = connection.getresponse()
                first = response.readline()  # sent before the handler goes on
                assert http(server, "POST", "/isohost_test/stream_release")[0] == 200
                try:
                    rest = response.read()
                except IncompleteRead as e:
                    rest = ("cut short", e.partial)
                headers = {k: response.getheader(k) for k in (
                    "Content-Type", "X-Isohost-Stream", "Set-Cookie", "Transfer-Encoding")}
                got[name, query] = (response.status, headers, first, rest)
            finally:
                connection.close()
    assert got["isolated", ""] == got["in_process", ""]
    assert got["isolated", ""][2:] == (b"first\n", b"second\n")
    assert got["isolated", "?fail"] == got["in_process", "?fail"]
    assert got["isolated", "?fail"][2:] == (b"first\n", ("cut short", b""))
    isolated.wait_for_log("failed after its response began; it ends there")


def test_a_packs_route_answers_while_its_worker_runs_a_node_as_in_process(isolated, in_process):
    """HoldIsohostSchema holds its thread until the test lets it go; meanwhile a request to a
    route of the same pack is answered by the same process, as ComfyUI answers one in process."""
    import json

    for name, server in (("isolated", isolated), ("in_process", in_process)):
        with holding_a_node(server) as held:
            status, _, body = http(server, "GET", "/isohost_test/echo/x")
        assert status == 200 and json.loads(body)["pid"] == held["pid"], (name, body)
        assert held["outcome"] == "execution_success", (name, held)
        assert (held["pid"] == server.process.pid) == (server is in_process)


def test_a_packs_on_prompt_handlers_rewrite_the_prompt_as_in_process(isolated, in_process):
    """The class-based pack's on-prompt handlers run for every prompt, isolated in its worker:
    one rewrites a tag another pack's node then reports; one that raises is logged and the
    prompt goes on, as in process."""
    for server in (isolated, in_process):
        tag = report(server, tag="isohost-on-prompt")["tag"]
        assert tag.startswith("rewritten by "), tag
        assert (tag == "rewritten by %d" % server.process.pid) == (server is in_process), tag
        assert report(server, tag="isohost-on-prompt-fails")["tag"] == "isohost-on-prompt-fails"
    isolated.wait_for_log("an on-prompt handler of", "failed in its worker")
    isolated.wait_for_log("this on-prompt handler fails on purpose")


SLOW_OPEN_PACK = """
import os, socket
from server import PromptServer


async def _hold():
    # Holds this server loop from its start, as a pack's slow start holds it, until the test
    # closes its connection to the abstract socket $ISOHOST_TEST_HOLD_SOCKET.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(60)
        connection.connect("\\0" + os.environ["ISOHOST_TEST_HOLD_SOCKET"])
        connection.sendall(str(os.getpid()).encode())
        connection.shutdown(socket.SHUT_WR)
        connection.recv(1)


def _rewrite(json_data):
    for node in json_data.get("prompt", {}).values():
        if node.get("inputs", {}).get("tag") == "isohost-slow-open":
            node["inputs"]["tag"] = "rewritten by %d" % os.getpid()
    return json_data


PromptServer.instance.loop.create_task(_hold())
PromptServer.instance.add_on_prompt_handler(_rewrite)
NODE_CLASS_MAPPINGS = {}
"""


def test_a_prompt_goes_on_without_on_prompt_handlers_still_opening_and_the_next_has_them(
        server_factory, tmp_path):
    """A pack's channel that opens slower than on_prompt_timeout_seconds (its worker's server
    loop held, as a slow start holds it): the prompt goes on without the pack's on-prompt
    handlers, logged; the channel goes on opening, and the next prompt is rewritten by the
    worker that opened it."""
    pack = tmp_path / "isohost_slow_open_pack"
    pack.mkdir()
    (pack / "__init__.py").write_text(SLOW_OPEN_PACK)
    name = "isohost-slow-open-%d-%d" % (os.getpid(), time.monotonic_ns())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)
        listener.listen(1)
        listener.settimeout(60)
        server = server_factory("slow_open", envs={"slow": (COMFY_PYTHON, [pack]),
                                                   "nodes": (PACK_PYTHON, [NODES])},
                                comfyui={"on_prompt_timeout_seconds": 1},
                                env={"ISOHOST_TEST_HOLD_SOCKET": name})
        connection, _ = listener.accept()
        with connection:  # the pack's server loop is held until this closes
            connection.settimeout(60)
            with connection.makefile("rb") as said:
                pid = int(said.read())
            assert report(server, tag="isohost-slow-open")["tag"] == "isohost-slow-open"
            server.wait_for_log("the prompt goes on without the on-prompt handlers of %s" % pack,
                                "is still running after 1 s")
    assert report(server, tag="isohost-slow-open")["tag"] == "rewritten by %d" % pid


def test_a_packs_server_loop_runs_its_tasks_and_handlers_as_in_process(isolated, in_process):
    """The pack schedules a task on PromptServer.instance.loop at import, and its route handler
    awaits PromptServer.instance.send_json: isolated, the worker's server loop runs the task once
    the import is done and the handler on that same loop, and the message reaches the host's
    websocket clients, as in process."""
    import json

    for server in (isolated, in_process):
        status, _, body = http(server, "GET", "/isohost_test/loop")
        assert status == 200, (body, server.log_tail())
        assert json.loads(body) == {"on_server_loop": True, "background_ran": True}
        server._wait_for(lambda: any(m.get("type") == "isohost_test.loop"
                                     for _, m in server.messages), 60, "the handler's message")
        pids = [m["data"]["pid"] for _, m in server.messages if m.get("type") == "isohost_test.loop"]
        assert (pids[0] == server.process.pid) == (server is in_process), pids


def test_a_message_a_packs_task_sends_between_requests_reaches_the_websocket(
        isolated, in_process, tmp_path):
    """A task the pack left on its server loop sends a message after the request that started
    it was answered, while nothing runs in the worker: it reaches the websocket as in process."""
    import json

    for name, server in (("isolated", isolated), ("in_process", in_process)):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        status, _, body = http(server, "POST", "/isohost_test/later",
                               json.dumps({"fifo": str(fifo)}).encode(),
                               {"Content-Type": "application/json"})
        assert (status, body) == (200, b"later"), server.log_tail()
        with open(fifo, "w") as f:  # answered: the worker runs nothing now
            f.write("go\n")
        server._wait_for(lambda: any(m.get("type") == "isohost_test.later"
                                     for _, m in server.messages), 60, "the task's message")
        pid = next(m["data"]["pid"] for _, m in server.messages
                   if m.get("type") == "isohost_test.later")
        assert (pid == server.process.pid) == (server is in_process), pid


def test_comfyuis_queue_from_a_node_and_a_route_in_a_worker_is_the_hosts_as_in_process(
        isolated, in_process):
    """QueueViewIsohost reads the queue while it runs (the prompt running, items, keys, tasks
    left, a past prompt's history) and puts a prompt in it, numbered with the server's counter;
    a route reads it between calls."""
    seen = {}
    for name, server in (("isolated", isolated), ("in_process", in_process)):
        past = server.queue({"1": {"class_type": "ReportIsohost", "inputs": {"tag": "past"}}})
        assert server.finish(past)[0] == "execution_success"
        now = server.queue({"1": {"class_type": "QueueViewIsohost",
                                  "inputs": {"past": past, "requeue": name}}})
        kind, message, history = server.finish(now)
        assert kind == "execution_success", (message, server.log_tail())
        view = {key: values[0] for key, values in history["outputs"]["1"].items()}
        assert view.pop("running") == [now] and view["past_outputs"] == ["1"], view
        assert view["number_step"] == 1, view
        # The prompt the node put in the queue runs next.
        kind, message, history = server.finish(view.pop("requeued"))
        assert kind == "execution_success", (message, server.log_tail())
        assert history["outputs"]["1"]["tag"] == [name]
        seen[name] = view
    assert seen["isolated"]["refused"].startswith("prompt_queue.get_history(map_function=...)")
    seen["isolated"]["refused"] = seen["in_process"]["refused"]  # in process it is no error
    assert seen["isolated"] == seen["in_process"]
    # A route handler runs with no node of its worker running: asked between calls.
    assert isolated.request("GET", "/isohost_test/queue") == in_process.request(
        "GET", "/isohost_test/queue") == {"remaining": 0}


def test_a_combo_of_model_files_lists_a_file_added_later_as_in_process(isolated, in_process):
    """CheckpointName lists models/checkpoints each time ComfyUI asks; isolated, the stand-in
    fills that combo from ComfyUI's folder_paths, so a file added after the scan (cached across
    starts) is offered, validated and found by the worker."""
    for server in (isolated, in_process):
        folder = server.base / "models" / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "first.safetensors").write_bytes(b"x")
    before = [server.object_info()["CheckpointNameIsohost"]["input"]["required"]["ckpt_name"]
              for server in (isolated, in_process)]
    for server in (isolated, in_process):
        (server.base / "models" / "checkpoints" / "added.safetensors").write_bytes(b"x")
    after = [server.object_info()["CheckpointNameIsohost"]["input"]["required"]["ckpt_name"]
             for server in (isolated, in_process)]
    assert before[0] == before[1] and after[0] == after[1]
    assert after[0][0] == ["None", "added.safetensors", "first.safetensors"]
    for server in (isolated, in_process):
        outputs = run_ok(server, {"1": {"class_type": "CheckpointNameIsohost",
                                        "inputs": {"ckpt_name": "added.safetensors"}}})
        assert outputs["1"]["path"] == [
            str(server.base / "models" / "checkpoints" / "added.safetensors")]


def test_a_node_runs_in_its_worker_and_gets_its_hidden_inputs(isolated, in_process):
    there = report(isolated, tag="abc", node="17")
    assert there["executable"] == PACK_PYTHON and there["numpy"].startswith("1.26.")
    assert there["pid"] != isolated.process.pid and there["pid"] in isolated.descendants()
    assert there["unique_id"] == "17" and there["tag"] == "abc"
    here = report(in_process, tag="abc", node="17")
    assert here["pid"] == in_process.process.pid and here["unique_id"] == "17"


def test_comfyuis_server_names_the_prompt_and_its_client_to_a_node_as_in_process(isolated,
                                                                                  in_process):
    """PromptServer.instance.client_id (where packs send their messages), last_prompt_id and
    last_node_id, read by a node running in a worker as in process."""
    for server in (isolated, in_process):
        for node in ("5", "6"):  # a second prompt: the worker is told of each
            prompt_id = server.queue({node: {"class_type": "ReportIsohost",
                                             "inputs": {"tag": "x"}}})
            kind, message, history = server.finish(prompt_id)
            assert kind == "execution_success", message
            seen = {key: values[0] for key, values in history["outputs"][node].items()}
            assert (seen["client_id"], seen["last_prompt_id"], seen["last_node_id"]) == (
                server.client_id, prompt_id, node), seen


def test_is_changed_decides_comfyuis_cache_as_in_process(isolated, in_process):
    """Report's IS_CHANGED (answered in the worker) says it changed, so the same prompt runs it
    again; Invert has none, so ComfyUI serves it from its cache the second time."""
    workflow = {"1": IMAGE, "2": {"class_type": "InvertIsohost", "inputs": {"image": ["1", 0]}},
                "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
                "4": {"class_type": "ReportIsohost", "inputs": {"tag": "same"}}}
    for server in (isolated, in_process):
        run_ok(server, workflow)
        prompt_id = server.queue(workflow)
        server.finish(prompt_id)
        cached = [m["data"]["nodes"] for _, m in server.events(prompt_id, ("execution_cached",))]
        executed = [m["data"]["node"] for _, m in server.events(prompt_id, ("executed",))]
        assert "2" in cached[0] and "4" not in cached[0], (server is isolated, cached)
        assert "4" in executed


def test_a_node_runs_a_model_in_comfyuis_inference_mode_as_in_process(isolated, in_process):
    """ComfyUI runs prompts under torch.inference_mode(): a model's output carries no autograd
    history. Run without it, the worker's model built one (keeping alive whatever a backward
    pass would need for as long as the output lived), and the node saw grad mode on."""
    workflow = {"1": IMAGE,
                "2": {"class_type": "ThroughModelIsohost", "inputs": {"image": ["1", 0]}},
                "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0],
                                                            "filename_prefix": "model"}}}
    seen = {}
    for name, server in (("isolated", isolated), ("in_process", in_process)):
        kind, message, history = server.run(workflow)
        assert kind == "execution_success", (name, message)
        seen[name] = (history["outputs"]["2"]["inference_mode"],
                      history["outputs"]["2"]["grad_enabled"],
                      history["outputs"]["2"]["output_has_history"],
                      server.output_files(history)["3"])
    assert seen["isolated"] == seen["in_process"]
    assert seen["in_process"][:3] == ([True], [False], [False])


def test_node_objects_are_kept_per_node_id_as_in_process(isolated, in_process):
    workflow = {"5": {"class_type": "CounterIsohost", "inputs": {"step": 2}},
                "6": {"class_type": "CounterIsohost", "inputs": {"step": 1}}}
    for server in (isolated, in_process):
        counts = [run_ok(server, workflow) for _ in range(3)]
        assert [(c["5"]["count"][0], c["6"]["count"][0]) for c in counts] == \
            [(2, 1), (4, 2), (6, 3)], server is isolated


def test_a_node_left_out_of_a_prompt_loses_its_object_as_in_process(isolated, in_process):
    """ComfyUI drops the objects of nodes a prompt lacks: node 7, absent from the second
    prompt, starts again from nothing in the third; node 8, in all three, counts on."""
    def counter(*node_ids):
        return {n: {"class_type": "CounterIsohost", "inputs": {"step": 1}} for n in node_ids}

    for server in (isolated, in_process):
        counts = [run_ok(server, counter(*ids)) for ids in (("7", "8"), ("8",), ("7", "8"))]
        assert [{n: c[n]["count"][0] for n in c} for c in counts] == \
            [{"7": 1, "8": 1}, {"8": 2}, {"7": 1, "8": 3}], server is isolated


def chain(*extra):
    """Load, Invert (2), Invert (3), HeldCount (4), Preview (5), and `extra` nodes from 6 on."""
    workflow = {"1": IMAGE,
                "2": {"class_type": "InvertIsohost", "inputs": {"image": ["1", 0]}},
                "3": {"class_type": "InvertIsohost", "inputs": {"image": ["2", 0]}},
                "4": {"class_type": "HeldCountIsohost", "inputs": {"image": ["3", 0]}},
                "5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}}}
    workflow.update({str(6 + i): node for i, node in enumerate(extra)})
    return workflow


def run_images(server, workflow):
    """(history outputs, {node id: [image bytes]}, the nodes ComfyUI served from its cache)."""
    prompt_id = server.queue(workflow)
    kind, message, history = server.finish(prompt_id)
    assert kind == "execution_success", (message, server.log_tail())
    cached = server.events(prompt_id, ("execution_cached",))[0][1]["data"]["nodes"]
    return history["outputs"], server.output_files(history), cached


PREVIEW_OF_2 = {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}
SCALE_OF_2 = {"class_type": "ScaleImageIsohostSchema", "inputs": {"image": ["2", 0], "factor": 0.5}}


def test_values_between_nodes_of_one_environment_stay_in_its_worker(isolated, in_process):
    """Nodes 2 and 3's outputs are read by nodes of their own environment only: the worker
    keeps them (HeldCount, node 4, counts them there), and the image that reaches ComfyUI's
    preview is the one in process."""
    outputs, images = {}, {}
    for server in (isolated, in_process):
        outputs[server], images[server], _ = run_images(server, chain())
    assert outputs[isolated]["4"]["held"][0] >= 2 and outputs[in_process]["4"]["held"] == [-1]
    assert images[isolated]["5"] == images[in_process]["5"]


def test_a_kept_output_that_comfyui_hands_to_other_nodes_later_is_their_value(isolated,
                                                                            in_process):
    """Node 2's output was kept in the first prompt; in the second, ComfyUI serves node 2 from
    its cache and hands that output to a node in process (a preview) and to a node of another
    environment (ScaleImage, in "schema"): each gets the image itself."""
    for server in (isolated, in_process):
        run_images(server, chain())
    images = {}
    for server in (isolated, in_process):
        _, images[server], cached = run_images(server, chain(PREVIEW_OF_2, SCALE_OF_2, {
            "class_type": "PreviewImage", "inputs": {"images": ["7", 0]}}))
        assert "2" in cached, (server is isolated, cached)
    for node in ("5", "6", "8"):
        assert images[isolated][node] == images[in_process][node], node


def test_a_worker_lost_between_prompts_has_comfyui_run_its_nodes_again(isolated, in_process):
    """The worker holding node 2's output is killed (as an idle reap would end it): the next
    prompt runs node 2 again, where ComfyUI would otherwise hand its cached output, which names
    a value no process holds any more, to a preview."""
    run_images(isolated, chain())
    pid = report(isolated)["pid"]
    run_images(isolated, chain())
    os.kill(pid, signal.SIGKILL)
    isolated.wait_for_log("(pid %d, generation" % pid, "killed by SIGKILL while idle")
    _, images, cached = run_images(isolated, chain(PREVIEW_OF_2))
    assert "2" not in cached and "3" not in cached, cached
    _, expected, _ = run_images(in_process, chain(PREVIEW_OF_2))
    assert images["6"] == expected["6"] and images["5"] == expected["5"]


def test_list_outputs_and_list_inputs_as_in_process(isolated, in_process):
    """SplitWords' list output makes ComfyUI run Report once per word (three calls on one
    node's object) and hand JoinWords (INPUT_IS_LIST) every word in one call."""
    workflow = {"1": {"class_type": "SplitWordsIsohost", "inputs": {"text": "red green blue"}},
                "2": {"class_type": "ReportIsohost", "inputs": {"tag": ["1", 0]}},
                "3": {"class_type": "JoinWordsIsohost", "inputs": {"words": ["1", 0],
                                                                   "separator": "/"}}}
    results = []
    for server in (isolated, in_process):
        outputs = run_ok(server, workflow)
        results.append((outputs["2"]["tag"], outputs["2"]["unique_id"], outputs["3"]))
    assert results[0] == results[1]
    assert results[0] == (["red", "green", "blue"], ["2", "2", "2"],
                          {"joined": ["red/green/blue"], "calls": [1]})


def test_a_wildcard_type_and_inputs_of_any_name_link_and_arrive_as_in_process(isolated,
                                                                               in_process):
    """PassAny's "*" (a str whose `!=` is never true) links to an IMAGE on either side, and its
    optional category, a dict that holds every name, takes inputs the node never declared."""
    workflow = {"1": IMAGE,
                "2": {"class_type": "PassAnyIsohost",
                      "inputs": {"value": ["1", 0], "extra_1": "hello", "n": 3}},
                "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
    results = []
    for server in (isolated, in_process):
        outputs = run_ok(server, workflow)
        results.append((outputs["2"], len(outputs["3"]["images"])))
    assert results[0] == results[1] == ({"more": ["extra_1", "n"], "kind": ["Tensor"]}, 1)
    schema = {"1": IMAGE, "2": {"class_type": "PassAnyIsohostSchema",
                                "inputs": {"value": ["1", 0]}},
              "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
    for server in (isolated, in_process):  # comfy_api's io.AnyType
        assert len(run_ok(server, schema)["3"]["images"]) == 1, server is isolated


def test_validate_inputs_taking_s_for_its_class_is_asked_as_in_process(isolated, in_process):
    import urllib.error

    for server in (isolated, in_process):
        assert run_ok(server, {"1": {"class_type": "PositiveIsohost",
                                     "inputs": {"x": 3}}})["1"] == {"x": [3]}
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.queue({"1": {"class_type": "PositiveIsohost", "inputs": {"x": -2}}})
        assert refused.value.code == 400
        assert "x must be positive, not -2" in refused.value.read().decode(), server is isolated


def test_a_node_expanding_into_others_names_them_as_in_process(isolated, in_process):
    """The expanded nodes' ids start with ComfyUI's prefix for the expanding node, set in the
    host before each node runs: two nodes' expansions (one each in two workers, say) never
    share an id."""
    workflow = {"7": {"class_type": "ExpandIsohost", "inputs": {"value": 1}},
                "8": {"class_type": "ExpandIsohost", "inputs": {"value": 2}}}
    for server in (isolated, in_process):
        outputs = run_ok(server, workflow)
        assert (outputs["7"]["prefix"], outputs["8"]["prefix"]) == (["7.0.0."], ["8.0.0."]), \
            server is isolated


def test_a_seed_a_node_writes_into_the_prompt_reaches_the_nodes_after_it_as_in_process(
        isolated, in_process):
    """StampSeed writes the seed it used into the hidden PROMPT and EXTRA_PNGINFO (the host's
    objects, which SaveImage embeds); ShowStamp, after it, reads both."""
    workflow = {"1": {"class_type": "StampSeedIsohost", "inputs": {"seed": -1}},
                "2": {"class_type": "ShowStampIsohost", "inputs": {"seed": ["1", 0],
                                                                   "stamped": "1"}}}
    for server in (isolated, in_process):
        kind, message, history = server.run(workflow, extra_data={"extra_pnginfo": {"a": 1}})
        assert kind == "execution_success", (message, server.log_tail())
        assert history["outputs"]["2"] == {"seed": [12345], "in_prompt": [12345],
                                           "in_pnginfo": [12345]}, server is isolated


def binary_frames(server, prompt):
    """The binary websocket frames ComfyUI sends while it runs `prompt`, on a websocket of our
    own with its own client id (the harness's keeps text messages only)."""
    import uuid

    import websocket

    client_id = uuid.uuid4().hex
    ws = websocket.create_connection("ws://127.0.0.1:%d/ws?clientId=%s"
                                     % (server.port, client_id), timeout=60)
    try:
        server.request("POST", "/prompt", {"client_id": client_id, "prompt": prompt})
        frames = []
        while True:
            data = ws.recv()
            if isinstance(data, bytes):
                frames.append(data)
            elif '"execution_success"' in data or '"execution_error"' in data:
                assert "execution_success" in data, data
                return frames
    finally:
        ws.close()


def _pixels(data):
    """(size, RGB bytes) of an encoded image."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(data))
    return image.size, image.convert("RGB").tobytes()


def previews_of(server, steps):
    """The preview frames ComfyUI sends over the websocket for PreviewSteps: [(event type,
    image type, (width, height), the decoded image's bytes)]."""
    import struct

    frames = binary_frames(server, {
        "1": {"class_type": "PreviewStepsIsohost", "inputs": {"steps": steps}}})
    return [struct.unpack(">II", data[:8]) + _pixels(data[8:]) for data in frames]


def test_progress_previews_reach_the_websocket_as_in_process(isolated, in_process):
    mine, theirs = previews_of(isolated, 3), previews_of(in_process, 3)
    assert [f[:3] for f in mine] == [(1, 1, (512, 256))] * 3  # PREVIEW_IMAGE, JPEG
    assert [f[:3] for f in mine] == [f[:3] for f in theirs]
    for (*_, mine_pixels), (*_, their_pixels) in zip(mine, theirs):
        assert mine_pixels == their_pixels  # shrunk the same way, one JPEG encoding


def test_a_class_based_nodes_set_progress_reaches_the_websocket_as_in_process(isolated,
                                                                             in_process):
    """comfy_api's set_progress names the executing node itself and updates ComfyUI's progress
    registry, whose handler sends `progress_state`: in a worker it needs ComfyUI's executing
    context and the host's registry (before, it raised "node_id must be provided")."""
    seen = {}
    for name, server in (("isolated", isolated), ("in_process", in_process)):
        prompt_id = server.queue({"7": {"class_type": "StepsIsohostSchema",
                                        "inputs": {"steps": 4}}})
        kind, message, history = server.finish(prompt_id)
        assert kind == "execution_success", (name, message)
        states = [m["data"]["nodes"].get("7") for _, m in server.events(prompt_id,
                                                                        ("progress_state",))]
        seen[name] = ([(state["value"], state["max"], state["state"]) for state in states
                       if state is not None], history["outputs"]["7"]["text"])
    assert seen["isolated"] == seen["in_process"]
    assert (2, 4, "running") in seen["in_process"][0] and seen["in_process"][1] == ["node 7"]


def server_messages_of(server):
    """ServerMessages' binary frames, decoded: (TEXT, its bytes), (PREVIEW_IMAGE, image type,
    size, pixels), (PREVIEW_IMAGE_WITH_METADATA, metadata, size, pixels)."""
    import json
    import struct

    decoded = []
    for data in binary_frames(server, {"1": {"class_type": "ServerMessagesIsohost",
                                             "inputs": {"text": "h\u00e9llo"}}}):
        event = struct.unpack(">I", data[:4])[0]
        if event == 1:
            decoded.append((event, struct.unpack(">I", data[4:8])[0]) + _pixels(data[8:]))
        elif event == 4:
            length = struct.unpack(">I", data[4:8])[0]
            decoded.append((event, json.loads(data[8:8 + length])) + _pixels(data[8 + length:]))
        else:
            decoded.append((event, data[4:]))
    return decoded


def test_a_packs_server_messages_reach_the_websocket_as_in_process(isolated, in_process):
    """Binary events a pack sends (text under its node, raw bytes, images the server encodes,
    with and without metadata) reach the front end as the same frames, pixel for pixel; and a
    named event too."""
    mine, theirs = server_messages_of(isolated), server_messages_of(in_process)
    assert [f[:2] for f in mine] == [
        (3, b"\x00\x00\x00\x011h\xc3\xa9llo"),  # node id "1" and the text, as ComfyUI packs it
        (3, b"\x00\x01raw bytes\xff"), (1, 2),
        (4, {"node_id": "1", "image_type": "image/png"})]
    assert mine[2][2] == (100, 40) and mine[3][2] == (300, 120)
    assert mine == theirs
    for server in (isolated, in_process):  # on the harness's websocket, read by its thread
        server._wait_for(lambda: any(m.get("type") == "isohost_test.sent"
                                     and m["data"] == {"text": "h\u00e9llo"}
                                     for _, m in server.messages), 60, "the named event")


def test_a_thread_polling_comfyuis_interrupt_flag_sees_it_as_in_process(isolated, in_process):
    """PollingThread's work thread polls processing_interrupted() while the node's thread
    waits in join(); it stops when the flag is set, and ComfyUI ends the prompt as interrupted
    before the next node. Isolated, the worker's flag is the host's interrupt of the call, so the
    thread stops as it does in process: no wait for the grace period, no kill."""
    before = report(isolated)["pid"]
    for server in (isolated, in_process):
        mark = len(server.messages)
        prompt_id = server.queue({
            "1": {"class_type": "PollingThreadIsohost", "inputs": {"seconds": 30.0}},
            "2": {"class_type": "ReportIsohost", "inputs": {"tag": ["1", 0]}}})
        server._wait_for(lambda: any(m.get("type") == "isohost_test.started"
                                     for _, m in server.messages[mark:]), 60, "the loop")
        sent = server.interrupt()
        ended_at, message = server.wait_for_event(
            prompt_id, ("execution_success", "execution_error", "execution_interrupted"), 60)
        server.finish(prompt_id)
        assert message["type"] == "execution_interrupted", (server is isolated, message)
        assert ended_at - sent < 0.5, (server is isolated, ended_at - sent)
    assert report(isolated)["pid"] == before


def scaled(server):
    workflow = {"1": IMAGE,
                "2": {"class_type": "ScaleImageIsohostSchema",
                      "inputs": {"image": ["1", 0], "factor": 0.7}},
                "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0],
                                                            "filename_prefix": "scaled"}}}
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    digest = hashlib.sha256(server.output_files(history)["3"][0]).hexdigest()
    return digest, history["outputs"]["2"]["text"][0]


def test_a_class_based_comfy_api_node_runs_isolated_as_in_process(isolated, in_process):
    mine, my_text = scaled(isolated)
    theirs, their_text = scaled(in_process)
    assert mine == theirs
    assert their_text == "pid %d, node 2" % in_process.process.pid
    pid = int(my_text.split(",")[0].split()[1])
    assert my_text == "pid %d, node 2" % pid  # its hidden UNIQUE_ID reached the worker
    assert pid != isolated.process.pid and pid in isolated.descendants()


def test_a_class_based_nodes_validate_inputs_and_fingerprint_inputs_run_in_the_worker(
        isolated, in_process):
    import urllib.error

    for server in (isolated, in_process):
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.queue({"1": IMAGE, "2": {"class_type": "ScaleImageIsohostSchema",
                                            "inputs": {"image": ["1", 0], "factor": 3.0}}})
        assert refused.value.code == 400
        assert "a factor of 3 is reserved for this test" in refused.value.read().decode()
        # fingerprint_inputs says it changed: the same prompt runs it again.
        workflow = {"1": IMAGE, "2": {"class_type": "ScaleImageIsohostSchema",
                                      "inputs": {"image": ["1", 0], "factor": 0.3}}}
        run_ok(server, workflow)
        prompt_id = server.queue(workflow)
        server.finish(prompt_id)
        cached = [m["data"]["nodes"] for _, m in server.events(prompt_id, ("execution_cached",))]
        assert cached == [["1"]], (server is isolated, cached)


def test_an_object_holding_a_model_never_crosses(isolated):
    kind, message, _ = isolated.run({"1": {"class_type": "MakeHolderIsohost", "inputs": {}}})
    assert kind == "execution_error", message
    assert message["data"]["exception_type"].endswith("ModelCannotCross")
    assert message["data"]["exception_message"].startswith(
        "output 0 (UPSCALE_MODEL) of MakeHolderIsohost is a torch.nn.modules.module.Module (held "
        "by a types.SimpleNamespace)")


def test_lazy_inputs_are_evaluated_as_check_lazy_status_asks(isolated, in_process):
    """LazySwitch's check_lazy_status (in the worker, on its node's object) asks for one input;
    the branch of the other (an Invert) never runs, as in process."""
    def switch(server, use_first):
        workflow = {"1": IMAGE,
                    "2": {"class_type": "InvertIsohost", "inputs": {"image": ["1", 0]}},
                    "3": {"class_type": "LazySwitchIsohost", "inputs": {
                        "use_first": use_first, "first": ["1", 0], "second": ["2", 0]}},
                    "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0],
                                                                "filename_prefix": "lazy"}}}
        prompt_id = server.queue(workflow)
        kind, message, history = server.finish(prompt_id)
        assert kind == "execution_success", (message, server.log_tail())
        ran = [m["data"]["node"] for _, m in server.events(prompt_id, ("executing",))]
        image = hashlib.sha256(server.output_files(history)["4"][0]).hexdigest()
        return "2" in ran, image

    for use_first in (True, False):
        mine, theirs = switch(isolated, use_first), switch(in_process, use_first)
        assert mine == theirs
        assert mine[0] is not use_first  # the Invert ran only when its branch was asked for


def test_a_changed_pack_is_scanned_again(server_factory, tmp_path):
    pack = tmp_path / "isohost_test_nodes"
    shutil.copytree(NODES, pack)
    envs = {"pack": (PACK_PYTHON, [pack])}
    first = server_factory("cache", envs=envs)
    assert first.descendants()  # the scan started the pack's worker
    first.stop()
    assert (first.base / "isohost-scan-cache.json").is_file()
    second = server_factory("cache", envs=envs)
    assert second.descendants() == [] and "ReportIsohost" in second.object_info()
    second.stop()
    now = time.time_ns()
    os.utime(pack / "__init__.py", ns=(now, now))
    third = server_factory("cache", envs=envs)
    assert third.descendants()


def test_a_broken_configuration_is_one_logged_error_and_comfyui_runs_on(server_factory):
    server = server_factory("bad", envs={"pack": (PACK_PYTHON, [NODES])},
                            comfyui={"interrupt_grace": 3})
    assert any(line.startswith("isohost: no isolated packs loaded: %s: unknown key "
                               "'interrupt_grace' in [comfyui]" % (server.base / "isohost.toml"))
               for line in server.log), server.log_tail()
    info = server.object_info()
    assert "ReportIsohost" not in info and "LoadImage" in info
    assert run_ok(server, {"1": IMAGE, "2": {"class_type": "PreviewImage",
                                             "inputs": {"images": ["1", 0]}}})


def test_an_environment_isohost_refuses_is_left_out_alone(server_factory, tmp_path):
    base = tmp_path / "bad_env"
    base.mkdir()
    (base / "isohost.toml").write_text(
        '[env.typo]\npython = "%s"\npythn = "x"\npacks = ["%s"]\n'
        '[env.pack]\npython = "%s"\npacks = ["%s"]\n' % (PACK_PYTHON, SCHEMA, PACK_PYTHON, NODES))
    server = server_factory("bad_env", custom_nodes=[ADAPTER])
    assert any(line.startswith("isohost: environment 'typo' not loaded (%s): %s: unknown key "
                               "'pythn' in [env.typo]" % (SCHEMA, base / "isohost.toml"))
               for line in server.log), server.log_tail()
    info = server.object_info()
    assert "ReportIsohost" in info and "ScaleImageIsohostSchema" not in info
    assert report(server)["executable"] == PACK_PYTHON
