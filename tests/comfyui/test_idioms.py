"""Idioms of popular packs, isolated as in process (the idiom pack's mappings, server_module and
interrupting modules; conftest.idiom_servers): ComfyUI's node table in the worker, the types
linked to a VALIDATE_INPUTS, what packs import from `server`, and a node that interrupts its own
prompt."""

import uuid

import pytest

IMAGE = {"class_type": "LoadImage", "inputs": {"image": "isohost-test.png"}}


@pytest.fixture(scope="module", params=["isolated", "in_process"])
def server(request, idiom_servers):
    return idiom_servers[request.param]


def run_ok(server, workflow):
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    return history["outputs"]


def test_the_packs_nodes_are_in_comfyuis_node_table_as_in_process(server):
    # Loop nodes (easy-use's whileLoopEnd) look up the classes of the prompt's nodes there; the
    # worker imports `nodes` only as the node runs.
    # ComfyUI's nodes outside nodes.py (SolidMask, the class-based SplitImageWithAlpha) are
    # there too: the worker imports their module as one is looked up.
    names = "LookUpNodesIdiomIsohost,ServerFactsIdiomIsohost,KSampler,SolidMask,SplitImageWithAlpha"
    outputs = run_ok(server, {"1": {"class_type": "LookUpNodesIdiomIsohost",
                                    "inputs": {"names": names + ",NoSuchNodeIdiomIsohost"}}})
    assert outputs["1"]["found"] == [dict({name: True for name in names.split(",")},
                                          NoSuchNodeIdiomIsohost=False)]
    assert outputs["1"]["display_name"] == ["Look up nodes (idioms)"]


def test_a_pack_runs_comfyuis_own_nodes_from_the_node_table_as_in_process(server):
    outputs = run_ok(server, {"1": {"class_type": "CallBuiltinNodeIdiomIsohost",
                                    "inputs": {"value": 0.25}}})
    assert outputs["1"]["mask"] == [[[1, 4, 8], 8.0]]
    assert outputs["1"]["modules"] == ["comfy_extras.nodes_mask", "comfy_extras.nodes_compositing"]


def test_a_pack_listing_the_node_table_finds_comfyuis_own_nodes_as_in_process(server):
    # The worker imports ComfyUI's own node modules as a pack lists the table.
    builtin = {name for name, info in server.object_info().items()
               if info["python_module"] == "nodes"
               or info["python_module"].startswith(("comfy_extras.", "comfy_api_nodes."))}
    names = set(run_ok(server, {"1": {"class_type": "ListNodeTableIdiomIsohost",
                                      "inputs": {}}})["1"]["names"])
    assert {"SolidMask", "SplitImageWithAlpha", "KSampler"} <= builtin
    assert builtin - names == set() and "ListNodeTableIdiomIsohost" in names


def test_a_wildcard_linked_to_a_validated_input_matches_as_in_process(server):
    # The linked type is the pack's own str subclass in the host, which the worker cannot
    # import: it arrives a wildcard still.
    kind, message, history = server.run({
        "1": {"class_type": "MakeAnyIdiomIsohost", "inputs": {"value": 4}},
        "2": {"class_type": "TakeAnyCheckedIdiomIsohost", "inputs": {"value": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}}})
    assert kind == "execution_success", (message, server.log_tail())
    assert history["outputs"]["3"]["text"] == ["5"]


def test_what_packs_read_of_comfyuis_server_is_there_as_in_process(server):
    facts = run_ok(server, {"1": {"class_type": "ServerFactsIdiomIsohost", "inputs": {}}})
    assert facts["1"]["facts"] == [{"text_event": 3, "port": server.port,
                                    "address": "127.0.0.1", "args_port": server.port,
                                    "args_listen": "127.0.0.1",
                                    "supports": ["custom_nodes_from_web"]}]


def test_a_node_that_interrupts_its_prompt_ends_it_at_the_next_node(server):
    kind, message, _ = server.run({
        "1": IMAGE,
        "2": {"class_type": "InterruptPromptIdiomIsohost", "inputs": {"image": ["1", 0]}},
        "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}})
    assert kind == "execution_interrupted", (kind, message)
    assert message["data"]["node_id"] == "3"
    # The flag went with that prompt: the next one runs, its isolated node too.
    facts = run_ok(server, {"1": {"class_type": "ServerFactsIdiomIsohost", "inputs": {}}})
    assert facts["1"]["facts"][0]["port"] == server.port


def test_comfyui_runs_other_nodes_while_an_async_node_awaits_as_in_process(server):
    # The async node runs first (ComfyUI starts async nodes first; SaveImage waits for an image
    # not in ComfyUI's cache) and awaits the file SaveImage writes: isolated, its stand-in must let
    # ComfyUI run SaveImage meanwhile (a stand-in that blocks fails with the node's timeout).
    prefix = "isohost-awaited-%s" % uuid.uuid4().hex[:12]
    outputs = run_ok(server, {
        "1": {"class_type": "AwaitOutputFileIdiomIsohost",
              "inputs": {"prefix": prefix, "timeout": 20.0}},
        "2": _uncached_image(),
        "3": {"class_type": "SaveImage",
              "inputs": {"images": ["2", 0], "filename_prefix": prefix}}})
    assert outputs["1"]["found"] == [prefix]
    assert outputs["3"]["images"][0]["filename"].startswith(prefix)


def test_an_awaiting_node_is_interrupted_as_in_process(server):
    prompt_id = server.queue({"1": {"class_type": "AwaitOutputFileIdiomIsohost", "inputs": {
        "prefix": "isohost-never-%s" % uuid.uuid4().hex[:12], "timeout": 300.0}}})
    server.wait_for_event(prompt_id, ("executing",))
    server.interrupt()
    kind, message, _ = server.finish(prompt_id, timeout=60)
    assert kind == "execution_interrupted", (kind, message)
    assert message["data"]["node_id"] == "1"
    # The next prompt runs, the same node too.
    test_comfyui_runs_other_nodes_while_an_async_node_awaits_as_in_process(server)


def test_an_awaiting_node_stops_when_another_node_fails_the_prompt(server):
    # ComfyUI cancels the tasks a failed prompt leaves (SaveImage refusing a path outside the
    # output folder): the isolated node's call is interrupted, where it would hold the prompt's
    # thread until its own timeout (finish waits for the queue's status, which ComfyUI sends
    # once that thread is free: without the interrupt, 300 s later).
    prompt_id = server.queue({
        "1": {"class_type": "AwaitOutputFileIdiomIsohost", "inputs": {
            "prefix": "isohost-never-%s" % uuid.uuid4().hex[:12], "timeout": 300.0}},
        "2": _uncached_image(),
        "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0],
                                                    "filename_prefix": "../../isohost-outside"}}})
    kind, message, _ = server.finish(prompt_id, timeout=60)
    assert kind == "execution_error" and message["data"]["node_id"] == "3", (kind, message)
    test_comfyui_runs_other_nodes_while_an_async_node_awaits_as_in_process(server)


def _uncached_image():
    """A node making an image that ComfyUI's cache does not hold (a colour of its own), and no
    file in the input directory (test_idioms_input_files lists it)."""
    return {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1,
                                                   "color": uuid.uuid4().int % 0xFFFFFF}}
