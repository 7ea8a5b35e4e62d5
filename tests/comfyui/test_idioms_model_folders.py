"""A pack that registers a model folder of its own at import (Impact Pack's "sams" and
"ultralytics"), and loaders that list it (packs/isohost_idiom_nodes/model_folders.py): isolated,
the import runs in the worker, and the host registers the folder from the scan, so the loaders
are listed, run, and offer files added later as in process, and ComfyUI's /models knows the
folder."""

import importlib.util
import logging
import sys
import types
import uuid

import pytest

from comfy_server import REPO
from conftest import BUILD_PYTHON

ADDED = ("AddedFolderLoaderIdiomIsohost", "isohost_idiom_models")  # add_model_folder_path
OWN = ("OwnFolderLoaderIdiomIsohost", "isohost_idiom_pt_models")  # its own extensions: .pt
LOADERS = pytest.mark.parametrize("loader", [ADDED, OWN], ids=["added", "own"])


def both(idiom_servers):
    return idiom_servers["isolated"], idiom_servers["in_process"]


def offered(server, node):
    """The files the loader `node` offers, as ComfyUI's /object_info lists them now."""
    return server.object_info()[node]["input"]["required"]["name"][0]


def load(server, node, name):
    """Runs the loader on `name`: {"path", "size"} as the node found it."""
    kind, message, history = server.run({"1": {"class_type": node, "inputs": {"name": name}}})
    assert kind == "execution_success", (message, server.log_tail())
    return {key: values[0] for key, values in history["outputs"]["1"].items()}


@LOADERS
def test_a_loader_of_the_packs_own_folder_is_listed_as_in_process(idiom_servers, loader):
    node, _ = loader
    isolated, in_process = both(idiom_servers)
    listed = [server.object_info()[node] for server in (isolated, in_process)]
    assert listed[0] == listed[1]
    assert "m1.pt" in listed[0]["input"]["required"]["name"][0]
    alone = [server.request("GET", "/object_info/" + node) for server in (isolated, in_process)]
    assert alone[0] == alone[1] == {node: listed[0]}


@LOADERS
def test_a_loader_of_the_packs_own_folder_runs_as_in_process(idiom_servers, loader):
    node, folder = loader
    for server in both(idiom_servers):
        assert load(server, node, "m1.pt") == {
            "path": str(server.base / "models" / folder / "m1.pt"), "size": len(b"isohost")}


@LOADERS
def test_a_file_added_to_the_packs_own_folder_is_offered_as_in_process(idiom_servers, loader):
    node, folder = loader
    isolated, in_process = both(idiom_servers)
    stem = "added-%s" % uuid.uuid4().hex[:8]
    for server in (isolated, in_process):
        (server.base / "models" / folder / (stem + ".pt")).write_bytes(b"xy")
        (server.base / "models" / folder / (stem + ".txt")).write_bytes(b"xy")
    after = [offered(server, node) for server in (isolated, in_process)]
    assert after[0] == after[1]
    assert stem + ".pt" in after[0]
    assert (stem + ".txt" in after[0]) == (loader == ADDED)  # the pack's extensions hold
    for server in (isolated, in_process):
        assert load(server, node, stem + ".pt")["size"] == 2


@LOADERS
def test_comfyuis_models_route_knows_the_packs_own_folder_as_in_process(idiom_servers, loader):
    _, folder = loader
    isolated, in_process = both(idiom_servers)
    for server in (isolated, in_process):
        assert folder in server.request("GET", "/models")
    files = [server.request("GET", "/models/" + folder) for server in (isolated, in_process)]
    assert files[0] == files[1] and "m1.pt" in files[0]


@pytest.fixture
def fake_folder_paths(monkeypatch):
    """A folder_paths module holding "checkpoints" and "text_encoders" (which "clip" names)."""
    fake = types.ModuleType("folder_paths")
    fake.folder_names_and_paths = {"checkpoints": (["/host/checkpoints"], {".ckpt"}),
                                   "text_encoders": (["/host/te"], {".pt"})}
    fake.map_legacy = lambda name: {"clip": "text_encoders"}.get(name, name)
    monkeypatch.setitem(sys.modules, "folder_paths", fake)
    return fake


def test_the_scan_describes_each_folder_its_file_lists_name(fake_folder_paths, monkeypatch):
    monkeypatch.syspath_prepend(str(BUILD_PYTHON))
    from isohost_comfy_worker import file_lists

    fake_folder_paths.folder_names_and_paths["own"] = ["/worker/own", ".pt"]  # not its shape
    fake_folder_paths.folder_names_and_paths["sams"] = (["/m/sams"], {".pth", ".pt"})
    nodes = {"A": {"file_lists": {"required": {"x": ["None", {"folder": "sams"}]}}},
             "B": {"file_lists": {"optional": {"y": [{"folder": "clip"}, {"folder": "own"}],
                                               "z": [{"folder": "gone"}]}}},
             "C": {}, "D": {"file_lists": {"required": {"image": [{"input": {"keep": []}}]}}}}
    assert file_lists.folders(nodes) == {"sams": [["/m/sams"], [".pt", ".pth"]],
                                         "clip": [["/host/te"], [".pt"]]}


def test_the_host_registers_the_folders_it_lacks_and_keeps_its_own(fake_folder_paths, caplog):
    spec = importlib.util.spec_from_file_location(
        "isohost_comfyui_model_folders", REPO / "comfyui" / "isohost_comfyui" / "model_folders.py")
    model_folders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_folders)
    with caplog.at_level(logging.WARNING, logger="isohost"):
        model_folders.register({"sams": [["/m/sams"], [".pt"]],
                                "checkpoints": [["/worker/checkpoints"], []],
                                "clip": [["/worker/te"], []],
                                "broken": ["/m/broken", ".pt"]}, "/packs/p")
        model_folders.register(["not", "a", "table"], "/packs/q")
    assert fake_folder_paths.folder_names_and_paths == {
        "checkpoints": (["/host/checkpoints"], {".ckpt"}), "text_encoders": (["/host/te"], {".pt"}),
        "sams": (["/m/sams"], {".pt"})}
    assert "'broken' of /packs/p" in caplog.text and "of /packs/q are unreadable" in caplog.text
