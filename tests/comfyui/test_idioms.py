"""Idioms of popular packs, isolated as in process (the idiom pack's mappings, server_module and
interrupting modules; conftest.idiom_servers): ComfyUI's node table in the worker, the types
linked to a VALIDATE_INPUTS, what packs import from `server`, and a node that interrupts its own
prompt."""

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
    names = "LookUpNodesIdiomIsohost,ServerFactsIdiomIsohost,KSampler"
    outputs = run_ok(server, {"1": {"class_type": "LookUpNodesIdiomIsohost",
                                    "inputs": {"names": names}}})
    assert outputs["1"]["found"] == [{name: True for name in names.split(",")}]
    assert outputs["1"]["display_name"] == ["Look up nodes (idioms)"]


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
