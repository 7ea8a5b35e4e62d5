"""Objects of a pack's own classes (the idiom pack's held_objects and pipe_types modules;
conftest.idiom_servers), as Impact Pack's SEGS and packs' PIPE objects: passed between two
nodes of the pack, isolated as in process; isolated, they stay in the pack's worker, and a node
in ComfyUI's process that reads one fails with ObjectCannotCross, naming the output (in
process it would read it). And, without a server, how the worker tells a pack's objects."""

import sys
import types
import uuid

import pytest

from conftest import BUILD_PYTHON

IMAGE = {"class_type": "LoadImage", "inputs": {"image": "isohost-test.png"}}


def make(label):
    return {"class_type": "MakePipeIdiomIsohost", "inputs": {"image": ["1", 0], "label": label}}


def read_pipe(label):
    return {"1": IMAGE, "2": make(label),
            "3": {"class_type": "ReadPipeIdiomIsohost",
                  "inputs": {"pipe": ["2", 0], "segs": ["2", 1]}}}


def preview(label, output):
    return {"1": IMAGE, "2": make(label),
            "4": {"class_type": "PreviewAny", "inputs": {"source": ["2", output]}}}


def fresh_label():
    """A label no earlier prompt used, so that ComfyUI's cache has no MakePipe of it."""
    return "pipe-%s" % uuid.uuid4().hex[:8]


def run_ok(server, workflow):
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    return history["outputs"]


def test_a_packs_objects_pass_between_its_nodes_isolated_as_in_process(idiom_servers):
    texts = {}
    for name, server in idiom_servers.items():
        texts[name] = run_ok(server, read_pipe("same"))["3"]["text"]
    assert texts["isolated"] == texts["in_process"]
    assert texts["isolated"][0].startswith("same: image [1, ")
    assert texts["isolated"][0].endswith("own classes: True")


def test_a_packs_object_read_in_process_fails_by_name(idiom_servers):
    isolated, in_process = idiom_servers["isolated"], idiom_servers["in_process"]
    run_ok(in_process, preview(fresh_label(), 0))  # in process, PreviewAny reads any object
    kind, message, _ = isolated.run(preview(fresh_label(), 0))
    assert kind == "execution_error", message
    data = message["data"]
    assert data["node_id"] == "2" and data["exception_type"].endswith("ObjectCannotCross"), data
    assert data["exception_message"].startswith(
        "output 0 (IDIOM_PIPE) of MakePipeIdiomIsohost is a isohost_idiom_nodes.pipe_types.Pipe: "
        "only isolated environment 'idioms' can import its class (the pack's, or a library "
        "installed there alone), so the object cannot reach PreviewAny outside that "
        "environment; run the nodes that read it in environment 'idioms'"), data["exception_message"]
    # The worker goes on: the next prompt passes the objects between the pack's nodes.
    run_ok(isolated, read_pipe(fresh_label()))


@pytest.mark.parametrize("output,class_name", [(0, "Pipe"), (1, "Seg")])
def test_a_kept_object_that_comfyuis_cache_hands_to_a_node_in_process_fails_by_name(
        idiom_servers, output, class_name):
    """The first prompt keeps MakePipe's outputs in the worker (only ReadPipe reads them); the
    second reuses its cached outputs for PreviewAny, which cannot have them."""
    isolated = idiom_servers["isolated"]
    name = fresh_label()
    run_ok(isolated, read_pipe(name))
    kind, message, _ = isolated.run(preview(name, output))
    assert kind == "execution_error", message
    data = message["data"]
    assert data["node_id"] == "4" and data["exception_type"].endswith("ObjectCannotCross"), data
    assert data["exception_message"].startswith(
        "output %d (%s) of MakePipeIdiomIsohost is a isohost_idiom_nodes.pipe_types.%s: "
        % (output, ("IDIOM_PIPE", "IDIOM_SEGS")[output], class_name)), data["exception_message"]
    assert "cannot reach a node outside that environment" in data["exception_message"]


def test_the_worker_finds_a_packs_objects_by_the_modules_their_pickle_names(tmp_path,
                                                                            monkeypatch):
    """A pack's module named after its path, and a module a pack imports from a directory of its
    own put on sys.path (Impact Pack's impact.core); plain values and ComfyUI's are no pack's."""
    monkeypatch.syspath_prepend(str(BUILD_PYTHON))
    from isohost_comfy_worker import held, packs, values

    pack_dir = str(tmp_path / "a_pack")
    root = pack_dir.replace(".", "_x_")
    monkeypatch.setattr(packs, "_loaded", {pack_dir: types.ModuleType(root)})
    own = _module(monkeypatch, root + ".utils", None)
    beside = _module(monkeypatch, "impactish.core", pack_dir + "/modules/impactish/core.py")
    other = _module(monkeypatch, "elsewhere", str(tmp_path / "elsewhere.py"))
    assert values.worker_only_class(own.Thing()) == "a_pack.utils.Thing"
    assert (values.worker_only_class({"segs": ((4, 4), [beside.Thing()])})
            == "impactish.core.Thing")
    for plain in (3, "text", [1, {"a": (2.0, None)}], other.Thing(), types.SimpleNamespace()):
        assert values.worker_only_class(plain) is None, plain
    # Kept where the host allows it; refused, by class, where the host would have to read it.
    kept, refused, text = held.keep_outputs((own.Thing(), own.Thing(), "x"),
                                            [held.KEEP, held.CROSS, held.KEEP])
    assert set(kept) == {held.MARK, "pid"} and text == "x"
    assert refused == {held.REFUSED: "a_pack.utils.Thing"}
    assert held.take(kept) == {held.REFUSED: "a_pack.utils.Thing"}
    # Without the host's word (keep_outputs_in_workers off) every output crosses, refused alike.
    assert held.keep_outputs((own.Thing(), 5), ()) == ({held.REFUSED: "a_pack.utils.Thing"}, 5)
    held.drop([[kept["pid"], kept[held.MARK]]])


def detector_workflow(label, reader):
    """MakeDetector's object of a library of the idiom environment alone, read by `reader`."""
    inputs = {"detector": ["1", 0]} if reader == "UseDetectorIdiomIsohost" else {
        "source": ["1", 0]}
    return {"1": {"class_type": "MakeDetectorIdiomIsohost", "inputs": {"label": label}},
            "2": {"class_type": reader, "inputs": inputs}}


def test_a_librarys_objects_pass_between_the_packs_nodes_in_its_worker(idiom_servers):
    isolated = idiom_servers["isolated"]
    outputs = run_ok(isolated, detector_workflow("seen", "UseDetectorIdiomIsohost"))
    assert outputs["2"]["text"] == ["seen of isohost_env_library"]


def test_a_librarys_object_read_in_process_fails_by_name(idiom_servers):
    isolated = idiom_servers["isolated"]
    kind, message, _ = isolated.run(detector_workflow(fresh_label(), "PreviewAny"))
    assert kind == "execution_error", message
    data = message["data"]
    assert data["node_id"] == "1" and data["exception_type"].endswith("ObjectCannotCross"), data
    assert data["exception_message"].startswith(
        "output 0 (IDIOM_DETECTOR) of MakeDetectorIdiomIsohost is a "
        "isohost_env_library.Detector: only isolated environment 'idioms' can import its class"
    ), data["exception_message"]


def test_the_worker_finds_objects_of_libraries_the_host_cannot_import(monkeypatch):
    monkeypatch.syspath_prepend(str(BUILD_PYTHON))
    from isohost_comfy_worker import comfy_env, values

    library = _module(monkeypatch, "only_here.models", "/env/site-packages/only_here/models.py")
    everywhere = _module(monkeypatch, "everywhere", "/env/site-packages/everywhere.py")
    monkeypatch.setattr(comfy_env, "_host_modules", frozenset())
    assert values.worker_only_class(library.Thing()) is None  # the host's word not yet had
    monkeypatch.setattr(comfy_env, "_host_modules", frozenset({"everywhere", "builtins"}))
    assert values.worker_only_class([everywhere.Thing(), {"x": library.Thing()}]) == (
        "only_here.models.Thing")
    assert values.worker_only_class(everywhere.Thing()) is None


def test_the_host_lists_what_it_can_import_namespace_packages_too(tmp_path, monkeypatch):
    (tmp_path / "namespace_only" / "sub").mkdir(parents=True)
    (tmp_path / "plain.py").write_text("")
    (tmp_path / "not-a-name").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    names = _worker_settings_module(monkeypatch).host_modules()
    assert {"namespace_only", "plain", "sys", "os", "pytest"} <= set(names)
    assert "not-a-name" not in names and names == sorted(names)


def test_the_host_lists_its_modules_when_settings_are_first_used(monkeypatch):
    # A ComfyUI start whose scans are cached and that runs no isolated node does not pay for the
    # list, and a pack ComfyUI loads after the adapter is in it.
    worker_settings = _worker_settings_module(monkeypatch)
    listed = []
    real = worker_settings.host_modules
    monkeypatch.setattr(worker_settings, "host_modules", lambda: listed.append(1) or real())
    made = worker_settings.WorkerSettings({"a": {"device": 1}, "b": {}})
    assert listed == [] and sorted(made) == ["a", "b"] and len(made) == 2
    _module(monkeypatch, "loaded_after_the_adapter", "/custom_nodes/later/__init__.py")
    assert "loaded_after_the_adapter" in made["a"]["host_modules"]
    assert made["a"]["device"] == 1 and made["b"]["device"] is None
    assert made["b"]["builtin_node_modules"] == {"SolidMask": "comfy_extras.nodes_mask"}
    assert made["a"]["key"] != made["b"]["key"] and listed == [1]  # made once, for all


def _worker_settings_module(monkeypatch):
    """The adapter's worker_settings.py, loaded alone, with stand-ins for ComfyUI's modules it
    reads."""
    import argparse
    import importlib.util

    from comfy_server import REPO

    folder_paths = types.ModuleType("folder_paths")
    folder_paths.folder_names_and_paths = {"checkpoints": (["/m/checkpoints"], {".safetensors"})}
    cli_args = types.ModuleType("comfy.cli_args")
    cli_args.args = argparse.Namespace(cpu=False, port=8188, tls_keyfile=None)
    nodes = types.ModuleType("nodes")
    nodes.NODE_CLASS_MAPPINGS = {
        "KSampler": type("KSampler", (), {}),
        "SolidMask": type("SolidMask", (), {"RELATIVE_PYTHON_MODULE": "comfy_extras.nodes_mask"}),
        "Packed": type("Packed", (), {"RELATIVE_PYTHON_MODULE": "custom_nodes.some_pack"})}
    monkeypatch.setitem(sys.modules, "nodes", nodes)
    monkeypatch.setitem(sys.modules, "folder_paths", folder_paths)
    monkeypatch.setitem(sys.modules, "comfy", types.ModuleType("comfy"))
    monkeypatch.setitem(sys.modules, "comfy.cli_args", cli_args)
    spec = importlib.util.spec_from_file_location(
        "isohost_comfyui_worker_settings",
        REPO / "comfyui" / "isohost_comfyui" / "worker_settings.py")
    worker_settings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker_settings)
    return worker_settings


def _module(monkeypatch, name, path):
    """A module `name` (from file `path`) in sys.modules, holding a class Thing."""
    module = types.ModuleType(name)
    module.__file__ = path
    exec("class Thing:\n    pass\n", module.__dict__)
    monkeypatch.setitem(sys.modules, name, module)
    return module
