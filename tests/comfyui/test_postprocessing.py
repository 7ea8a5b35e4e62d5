"""The post-processing pack isolated gives the same output as in process, byte for byte, for
every node of it (none needs model weights); and it runs under another environment's packages.
One in-process and two isolated ComfyUI servers: the pack under ComfyUI's own interpreter (the
same packages, so byte-identical output is the test) and under the pack's environment (numpy
1.26, torch 2.13: isolation for real)."""

import hashlib

import pytest

from conftest import COMFY_PYTHON, PACK_PYTHON, start_server
import workflows


@pytest.fixture(scope="module")
def servers(comfy_tree, tmp_path_factory):
    base = tmp_path_factory.mktemp("postprocessing")
    _, pack = comfy_tree
    started = {}
    try:
        started["in_process"] = start_server(comfy_tree, base / "in_process", custom_nodes=[pack])
        started["isolated"] = start_server(comfy_tree, base / "isolated",
                                           envs={"postproc": (COMFY_PYTHON, [pack])})
        started["pack_env"] = start_server(comfy_tree, base / "pack_env",
                                           envs={"postproc": (PACK_PYTHON, [pack])})
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def pack_nodes(servers):
    nodes = workflows.pack_nodes(servers["in_process"].object_info(), "post-processing")
    assert len(nodes) == 23, sorted(nodes)
    return nodes


def digests(server, name, info):
    """The sha256 of each image the node's workflow saved; or, where the node failed, its
    error as ComfyUI reports it (type and message), which must be the same both ways."""
    kind, message, history = server.run(workflows.single_node(name, info,
                                                              image=server.fresh_image()))
    if kind == "execution_error":
        data = message["data"]
        return [("error", data["exception_type"], data["exception_message"].split("\n")[0])]
    assert kind == "execution_success", (name, message, server.log_tail())
    files = server.output_files(history)
    assert files, (name, history)
    return [hashlib.sha256(data).hexdigest() for node in sorted(files) for data in files[node]]


def test_every_node_is_registered_isolated_with_the_same_interface(servers, pack_nodes):
    isolated = servers["isolated"].object_info()
    for name, info in pack_nodes.items():
        assert name in isolated, name
        mine = isolated[name]
        for key in ("input", "output", "output_name", "output_is_list", "category",
                    "output_node", "display_name"):
            assert mine[key] == info[key], (name, key)
        assert mine["python_module"] == info["python_module"], name


@pytest.fixture(scope="module")
def in_process(servers, pack_nodes):
    """{node: (digests of a first run, of a second)} in process: a node whose two runs differ
    draws unseeded random numbers, and can only be held to the same number of images."""
    return {name: (digests(servers["in_process"], name, info),
                   digests(servers["in_process"], name, info))
            for name, info in sorted(pack_nodes.items())}


def test_isolated_output_is_byte_identical_to_in_process(servers, pack_nodes, in_process):
    nondeterministic, compared, failed = [], [], []
    for name, info in sorted(pack_nodes.items()):
        first, second = in_process[name]
        isolated = digests(servers["isolated"], name, info)
        assert len(isolated) == len(first), name
        if first != second:
            nondeterministic.append(name)
            continue
        assert isolated == first, "%s: isolated output differs from in process" % name
        (failed if first[0][0] == "error" else compared).append(name)
    print("byte-identical: %d nodes; failing the same way both ways: %s; nondeterministic in "
          "process itself: %s" % (len(compared), ", ".join(failed) or "none",
                                  ", ".join(nondeterministic) or "none"))
    assert len(compared) >= 20


def test_the_pack_runs_in_an_environment_comfyui_could_not_import_it_from(servers, pack_nodes,
                                                                          in_process):
    """numpy 1.26 and torch 2.13 there, numpy 2 and torch 2.14 in ComfyUI: every node succeeds
    where it succeeds in process, and fails with the same error where it fails there."""
    same = 0
    for name, info in sorted(pack_nodes.items()):
        reference = in_process[name][0]
        mine = digests(servers["pack_env"], name, info)
        if reference[0][0] == "error":
            assert mine[0][:2] == reference[0][:2], name
        else:
            assert mine[0][0] != "error", (name, mine)
            same += mine == reference
    print("under numpy 1.26 and torch 2.13: %d of %d nodes gave the same bytes as in process"
          % (same, len(pack_nodes)))


def test_a_ten_node_workflow_matches_in_process(servers, pack_nodes):
    chain = ["Blur", "Sharpen", "ColorTint", "Glow", "Vignette", "Solarize", "Pixelize",
             "Quantize", "Parabolize", "ChromaticAberration"]
    workflow = workflows.chain(chain, pack_nodes)
    results = []
    for which in ("in_process", "isolated"):
        kind, message, history = servers[which].run(workflow)
        assert kind == "execution_success", (which, message)
        results.append(servers[which].output_files(history))
    assert results[0] == results[1] and results[0]
