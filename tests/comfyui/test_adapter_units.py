"""The adapter's pieces that need no ComfyUI server: the settings file, the scan cache's key,
model detection, and the combos of model files. Fast; run with the ComfyUI tests."""

import asyncio
import copy
import inspect
import os
import re
import sys
import threading
import types

import pytest
import torch

from conftest import BUILD_PYTHON
from comfy_server import REPO

sys.path.insert(0, str(BUILD_PYTHON))

from isohost_comfy_worker import comfy_env, file_lists  # noqa: E402
from isohost_comfy_worker.values import ModelCannotCross, find_model, refuse_models  # noqa: E402


def _adapter_module(name):
    """One module of the adapter, alone: its package's __init__ is ComfyUI's custom node, which
    needs a running ComfyUI."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "isohost_comfyui_" + name, REPO / "comfyui" / "isohost_comfyui" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


catalog = _adapter_module("catalog")
settings = _adapter_module("settings")
torch_threads = _adapter_module("torch_threads")


def write(path, text):
    path.write_text(text)
    return path


def test_settings_take_out_the_adapters_keys_and_resolve_paths(tmp_path):
    path = write(tmp_path / "isohost.toml", """
[host]
idle_reap_seconds = 60
[comfyui]
interrupt_grace_seconds = 1.5
[env.a]
python = "venvs/a/bin/python"
path = ["lib", "~/shared"]
cwd = "work"
packs = ["packs/one", "/abs/two"]
""")
    loaded = settings.load(str(path), "/opt/ComfyUI")
    assert loaded.host_config == {"host": {"idle_reap_seconds": 60}, "env": {"a": {
        "python": str(tmp_path / "venvs/a/bin/python"),
        "path": [str(tmp_path / "lib"), os.path.expanduser("~/shared"), "/opt/ComfyUI"],
        "cwd": str(tmp_path / "work"), "env": {"OMP_WAIT_POLICY": "PASSIVE"}}}}
    assert loaded.packs == [("a", str(tmp_path / "packs/one")), ("a", "/abs/two")]
    assert loaded.interrupt_grace_seconds == 1.5
    assert loaded.scan_cache == str(tmp_path / "isohost-scan-cache.json")
    assert loaded.keep_outputs_in_workers is True
    assert loaded.route_timeout_seconds == 120.0
    assert loaded.on_prompt_timeout_seconds == 10.0


def test_a_workers_openmp_wait_policy_is_passive_unless_set(tmp_path, monkeypatch):
    path = write(tmp_path / "isohost.toml", """
[env.a]
[env.b]
env = {OMP_WAIT_POLICY = "ACTIVE", OMP_NUM_THREADS = "4"}
""")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    envs = settings.load(str(path), "/opt/ComfyUI").host_config["env"]
    assert envs["a"]["env"] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert envs["b"]["env"] == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "4"}
    # Set in ComfyUI's own environment, it reaches the workers as it is.
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert settings.load(str(path), "/opt/ComfyUI").host_config["env"]["a"]["env"] == {}


@pytest.mark.parametrize("environ, spins", [
    ({}, True),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, True),
    ({"OMP_WAIT_POLICY": " passive "}, False),
    ({"GOMP_SPINCOUNT": "10000"}, False),
])
def test_torch_threads_spin_long_where_libgomp_is_loaded_with_its_default(tmp_path, environ,
                                                                          spins):
    with_gomp = write(tmp_path / "maps", "7f00-7f10 r-xp 0 08:01 5 /x/torch/lib/libgomp.so.1\n")
    without = write(tmp_path / "maps-bare", "7f00-7f10 r-xp 0 08:01 5 /usr/lib/libc.so.6\n")
    assert torch_threads.spin_long(environ, str(with_gomp)) is spins
    assert torch_threads.spin_long(environ, str(without)) is False
    assert torch_threads.spin_long(environ, str(tmp_path / "none")) is False


@pytest.mark.parametrize("text, words", [
    ("[comfyui]\ngrace = 1\n", "unknown key 'grace' in [comfyui]"),
    ("[comfyui]\ninterrupt_grace_seconds = -1\n", "interrupt_grace_seconds must be a number"),
    ("[comfyui]\nroute_timeout_seconds = 0\n",
     "route_timeout_seconds must be a number of seconds from 0.001 to 86400, not 0"),
    ("[comfyui]\non_prompt_timeout_seconds = \"soon\"\n",
     "on_prompt_timeout_seconds must be a number of seconds from 0.001 to 3600, not 'soon'"),
    ("[env.a]\npacks = \"/one\"\n", "[env.a] packs must be a list of directories"),
    ("[env.a]\npacks = [\"\"]\n", "[env.a] packs must be a list of directories, not ['']"),
    ("[env.a]\npath = 5\n", "[env.a] path must be a list of directories, not 5"),
    ("[env.a]\npath = \"lib\"\n", "[env.a] path must be a list of directories, not 'lib'"),
    ("[env.a]\npacks = [\"p\"]\n[env.b]\npacks = [\"./p/\"]\n",
     "is listed in [env.a] and in [env.b]; a pack runs in one environment"),
    ("[comfyiu]\ngrace = 1\n", "unknown table [comfyiu] (known: comfyui, env, host)"),
    ("[comfyui]\nkeep_outputs_in_workers = 1\n", "keep_outputs_in_workers must be true or false"),
    ("[env.a\n", ""),
])
def test_a_bad_settings_file_is_named_with_its_key(tmp_path, text, words):
    path = write(tmp_path / "isohost.toml", text)
    with pytest.raises(settings.SettingsError) as refused:
        settings.load(str(path), "/opt/ComfyUI")
    assert str(refused.value).startswith(str(path)) and words in str(refused.value)


def test_a_settings_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "isohost.toml"
    path.write_bytes(b'[env.a]\npython = "caf\xe9"\n')
    with pytest.raises(settings.SettingsError, match="is not UTF-8 text"):
        settings.load(str(path), "/opt/ComfyUI")


def test_a_missing_settings_file_says_where_it_was_looked_for(tmp_path):
    with pytest.raises(settings.SettingsError) as refused:
        settings.load(str(tmp_path / "isohost.toml"), "/opt/ComfyUI")
    assert "isohost.toml does not exist" in str(refused.value)


def test_the_scan_cache_key_follows_the_packs_python_files_and_environment(tmp_path):
    pack = tmp_path / "pack"
    (pack / "sub").mkdir(parents=True)
    write(pack / "__init__.py", "x = 1\n")
    write(pack / "sub" / "nodes.py", "y = 1\n")
    env = {"python": "/usr/bin/python3"}
    first = catalog.fingerprint(str(pack), env)
    assert catalog.fingerprint(str(pack), env) == first
    write(pack / "README.md", "not code\n")
    assert catalog.fingerprint(str(pack), env) == first
    assert catalog.fingerprint(str(pack), {"python": "/other/python"}) != first
    write(pack / "sub" / "nodes.py", "y = 22\n")
    assert catalog.fingerprint(str(pack), env) != first


def test_the_scan_cache_keeps_what_it_was_given(tmp_path):
    path = str(tmp_path / "cache.json")
    cache = catalog.Catalog(path)
    cache.put("/p", "key", {"nodes": {"B": {}, "A": {}}})
    cache.save()
    again = catalog.Catalog(path)
    assert list(again.get("/p", "key")["nodes"]) == ["B", "A"]
    assert again.get("/p", "other") is None
    write(tmp_path / "cache.json", "{not json")
    assert catalog.Catalog(path).get("/p", "key") is None
    for malformed in ('["oops"]', '{"/p": "oops", "/q": {"fingerprint": "key"}}'):
        write(tmp_path / "cache.json", '{"format": %d, "packs": %s}' % (catalog.FORMAT, malformed))
        assert catalog.Catalog(path).get("/p", "key") is None  # scanned again, not a crash


def test_models_are_found_where_pickling_would_copy_them():
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(2, 2)
    assert find_model(linear) == ("", "torch.nn.modules.module.Module")
    assert find_model([{"m": linear}]) == ("[0]['m']", "torch.nn.modules.module.Module")
    assert find_model(types.SimpleNamespace(model=linear)) == (
        "held by a types.SimpleNamespace", "torch.nn.modules.module.Module")
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    conditioning = [[torch.zeros(1, 77, 8), {"pooled_output": torch.zeros(1, 8)}]]
    for value in (latent, conditioning, torch.zeros(2), "text", 3, None,
                  torch.nn.Parameter(torch.zeros(2))):
        assert find_model(value) is None
    with pytest.raises(ModelCannotCross) as refused:
        refuse_models({"ui": {}, "result": (latent, linear)}, "Loader", ("LATENT", "MODEL"))
    assert str(refused.value).startswith("output 1 (MODEL) of Loader is a "
                                         "torch.nn.modules.module.Module:")


def test_combos_of_model_files_are_found_by_their_markers(monkeypatch):
    fake = types.ModuleType("folder_paths")
    fake.get_filename_list = lambda folder: ["real.safetensors"]
    monkeypatch.setitem(sys.modules, "folder_paths", fake)

    def input_types():
        import folder_paths
        return {"required": {
            "ckpt": (["None"] + folder_paths.get_filename_list("checkpoints"),),
            "both": ("COMBO", {"options": folder_paths.get_filename_list("loras")
                               + folder_paths.get_filename_list("vae")}),
            "filtered": ([f for f in folder_paths.get_filename_list("vae") if f.endswith(".pt")],),
            "fixed": (["a", "b"],),
            "number": ("INT", {"default": 1})}}

    assert file_lists.parts_of(input_types) == {"required": {
        "ckpt": ["None", {"folder": "checkpoints"}],
        "both": [{"folder": "loras"}, {"folder": "vae"}]}}
    assert fake.get_filename_list("x") == ["real.safetensors"]  # put back


@pytest.fixture
def fake_input_directory(monkeypatch, tmp_path):
    """A folder_paths module whose input directory is tmp_path/"input"."""
    fake = types.ModuleType("folder_paths")
    fake.input_directory = str(tmp_path / "input")
    fake.get_filename_list = lambda folder: []
    fake.get_input_directory = lambda: fake.input_directory
    fake.set_input_directory = lambda path: setattr(fake, "input_directory", path)
    monkeypatch.setitem(sys.modules, "folder_paths", fake)
    return fake


def test_combos_of_the_input_directory_are_found_by_the_probe(fake_input_directory, tmp_path):
    import mimetypes

    def input_types():
        import folder_paths
        directory = folder_paths.get_input_directory()
        top = sorted(os.listdir(directory))
        nested = [os.path.relpath(os.path.join(root, f), directory)
                  for root, _, files in os.walk(directory) for f in files]
        return {"required": {
            "image": ([f for f in top if (mimetypes.guess_type(f)[0] or "").startswith("image/")
                       and os.path.isfile(os.path.join(directory, f))], {"image_upload": True}),
            "any": (["none"] + top,),
            "video": ("COMBO", {"options": sorted(f for f in top if f.endswith(".mp4"))}),
            "png": ([f for f in nested if f.endswith(".png")],),
            "fixed": (["a", "b"],)}}

    with file_lists.InputProbe(str(tmp_path / "temp")) as probe:
        found = file_lists.parts_of(input_types, probe)
        assert os.path.isdir(probe.path)
    assert not os.path.exists(probe.path)  # removed
    assert fake_input_directory.get_input_directory() == str(tmp_path / "input")  # put back
    image = found["required"]["image"][0]["input"]
    assert {"png", "jpg", "jpeg", "webp"} <= set(image["keep"])
    assert not {"mp4", "txt", "safetensors"} & set(image["keep"])
    assert (image["bare"], image["folders"], image["nested"]) == (False, False, False)
    assert found["required"]["any"] == ["none", {"input": {
        "bare": True, "folders": True, "nested": False, "drop": []}}]
    assert found["required"]["video"] == [{"input": {
        "bare": False, "folders": False, "nested": False, "keep": ["mp4"]}}]
    assert found["required"]["png"] == [{"input": {
        "bare": False, "folders": False, "nested": True, "keep": ["png"]}}]
    assert "fixed" not in found["required"]


def test_the_stand_ins_list_the_input_directory_by_the_scans_rule(fake_input_directory, tmp_path):
    host_lists = _adapter_module("file_lists")
    directory = tmp_path / "input"
    (directory / "clips").mkdir(parents=True)
    for name in ("b.PNG", "a.jpg", "notes.txt", "README", "clips/one.png", "clips/two.mp4"):
        (directory / name).write_bytes(b"x")
    images = {"bare": False, "folders": False, "nested": False, "keep": ["jpg", "png"]}
    assert host_lists.input_files(str(directory), images) == ["a.jpg", "b.PNG"]
    assert host_lists.input_files(str(directory), dict(images, nested=True)) == [
        "a.jpg", "b.PNG", "clips/one.png"]
    everything = {"bare": True, "folders": True, "nested": False, "drop": ["txt"]}
    assert host_lists.input_files(str(directory), everything) == ["README", "a.jpg", "b.PNG",
                                                                  "clips"]
    input_types = {"required": {"image": (["stale.png"], {"image_upload": True}),
                                "video": ("COMBO", {"options": ["none"]})}}
    parts = {"required": {"image": [{"input": images}],
                          "video": ["none", {"input": dict(images, keep=["mp4"], nested=True)}]}}
    assert host_lists.filled(input_types, parts) == {"required": {
        "image": (["a.jpg", "b.PNG"], {"image_upload": True}),
        "video": ("COMBO", {"options": ["none", "clips/two.mp4"]})}}


def test_a_worker_sent_only_the_settings_key_asks_for_them_whole(monkeypatch):
    monkeypatch.setattr(comfy_env, "_prepared", None)
    with pytest.raises(comfy_env.SettingsNeeded, match="key 5e77"):
        comfy_env.prepare({"key": "5e77"})
    assert comfy_env._prepared is None  # nothing applied
    monkeypatch.setattr(comfy_env, "_prepared", {"args": {}, "folders": {}, "key": "5e77"})
    comfy_env.prepare({"key": "5e77"})  # has them: nothing to do
    comfy_env.prepare({"args": {}, "folders": {}, "key": "5e77"})
    for other in ({"key": "0bad"}, {"args": {"cpu": True}, "folders": {}, "key": "0bad"}):
        with pytest.raises(RuntimeError, match="prepared for another ComfyUI"):
            comfy_env.prepare(other)


def _fake_extras(tmp_path, monkeypatch):
    """A `nodes` module and a package of three node modules standing in for comfy_extras (a
    V1 one, a class-based one, one that fails to import), listed as the host's settings list
    ComfyUI's own nodes; returns the worker's table once installed."""
    from isohost_comfy_worker import builtin_nodes

    extras = tmp_path / "fake_extras"
    extras.mkdir()
    (extras / "__init__.py").write_text("")
    (extras / "plain.py").write_text(
        "class Solid:\n    pass\nNODE_CLASS_MAPPINGS = {'Solid': Solid, 'Other': Solid}\n"
        "NODE_DISPLAY_NAME_MAPPINGS = {'Solid': 'Solid shown'}\n")
    (extras / "class_based.py").write_text(
        "class Split:\n    @classmethod\n    def GET_SCHEMA(cls):\n"
        "        return type('S', (), {'node_id': 'Split'})\n"
        "class Extension:\n    async def get_node_list(self):\n        return [Split]\n"
        "async def comfy_entrypoint():\n    return Extension()\n")
    (extras / "broken.py").write_text("import no_such_module_isohost\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fake_extras", "fake_extras.plain", "fake_extras.class_based"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    nodes = types.ModuleType("nodes")
    nodes.NODE_CLASS_MAPPINGS = {"KSampler": object, "Other": "a pack's node"}
    nodes.NODE_DISPLAY_NAME_MAPPINGS = {}
    monkeypatch.setitem(sys.modules, "nodes", nodes)
    for name, empty in (("_failed", {}), ("_modules", {}), ("_loaded", set())):
        monkeypatch.setattr(builtin_nodes, name, empty)
    builtin_nodes.set_modules({"Solid": "fake_extras.plain", "Other": "fake_extras.plain",
                               "Split": "fake_extras.class_based", "Gone": "fake_extras.broken"})
    builtin_nodes.install(nodes)
    return nodes


def test_comfyuis_own_nodes_are_imported_as_a_pack_looks_one_up(tmp_path, monkeypatch, caplog):
    from isohost_comfy_worker import builtin_nodes

    nodes = _fake_extras(tmp_path, monkeypatch)
    table = nodes.NODE_CLASS_MAPPINGS
    assert isinstance(table, builtin_nodes.NodeClassMappings)
    assert sorted(dict.keys(table)) == ["KSampler", "Other"]  # nothing imported yet
    assert table["Solid"].RELATIVE_PYTHON_MODULE == "fake_extras.plain"
    assert sorted(dict.keys(table)) == ["KSampler", "Other", "Solid"]  # the module's every node
    assert table["Other"] is table["Solid"]  # over a pack's of its name, as in ComfyUI
    assert nodes.NODE_DISPLAY_NAME_MAPPINGS == {"Solid": "Solid shown"}

    async def look_up_in_a_running_loop():  # as an async node does: the entrypoint is async too
        return "Split" in table

    assert asyncio.run(look_up_in_a_running_loop()) and table.get("Split").__name__ == "Split"
    assert table.get("Nothing", 7) == 7 and "Nothing" not in table
    with pytest.raises(KeyError):
        table["Nothing"]
    with caplog.at_level("WARNING"):
        assert "Gone" not in table and table.get("Gone") is None
    failed = [r for r in caplog.records if "fake_extras.broken" in r.getMessage()]
    assert len(failed) == 1 and "no_such_module_isohost" in failed[0].getMessage()
    builtin_nodes.install(nodes)  # once made, kept
    assert nodes.NODE_CLASS_MAPPINGS is table


def test_a_pack_listing_the_node_table_gets_comfyuis_own_nodes_too(tmp_path, monkeypatch,
                                                                    caplog):
    nodes = _fake_extras(tmp_path, monkeypatch)
    table = nodes.NODE_CLASS_MAPPINGS
    with caplog.at_level("INFO"):
        names = []
        for name in table:  # a lookup inside the loop adds nothing: all were imported first
            names.append(name)
            assert table.get("Split") is not None and "Gone" not in table
    assert sorted(names) == ["KSampler", "Other", "Solid", "Split"]
    assert [r for r in caplog.records if "no_such_module_isohost" in r.getMessage()]
    assert [r for r in caplog.records if "imported 3 module(s)" in r.getMessage()]
    assert len(table) == 4 and sorted(table.keys()) == names and table["Other"] is table["Solid"]
    assert dict(table) == dict(table.items()) == table.copy()
    assert {cls.__name__ for cls in table.values() if cls is not object} == {"Solid", "Split"}
    caplog.clear()
    with caplog.at_level("INFO"):
        assert list(table) == list(dict.keys(table))
    assert not caplog.records  # once: nothing is imported or logged again


# --- outputs kept in the worker (isohost_comfy_worker.held) -------------------------------

def test_only_outputs_asked_for_and_holding_tensors_are_kept_and_marked():
    import os

    import torch

    from isohost_comfy_worker import held

    image, latent = torch.zeros(2), {"samples": torch.ones(3)}
    before = held.count()
    result = held.keep_outputs((image, "text", latent, [image, 7], image),
                               [held.KEEP, held.KEEP, held.KEEP, held.KEEP_EACH, held.CROSS])
    marks = [result[0], result[2], result[3][0]]
    assert all(set(m) == {held.MARK, "pid"} and m["pid"] == os.getpid() for m in marks)
    assert result[1] == "text" and result[3][1] == 7 and result[4] is image
    assert held.count() == before + 3
    # A stand-in of this environment sends the marks back; the worker puts the values in.
    assert held.put_back([("a", result[0]), ("b", [result[2], 5])]) == [
        ("a", image), ("b", [latent, 5])]
    assert held.take(result[3][0]) is image
    # {"ui", "result"} keeps its ui and marks its result.
    ui = held.keep_outputs({"ui": {"x": [1]}, "result": (image,)}, [held.KEEP])
    assert ui["ui"] == {"x": [1]} and held.MARK in ui["result"][0]
    held.drop([[m["pid"], m[held.MARK]] for m in marks + [ui["result"][0]]])
    assert held.count() == before


def test_a_mark_of_another_process_or_one_let_go_is_refused_and_others_pids_are_not_dropped():
    import os

    import torch

    from isohost_comfy_worker import held

    (mark,) = held.keep_outputs((torch.zeros(1),), [held.KEEP])
    held.drop([[os.getpid() + 1, mark[held.MARK]]])  # a replaced worker's id: not ours
    assert held.take(mark) is not None
    with pytest.raises(held.HeldValueGone, match="the worker that held it was replaced"):
        held.put_back([("image", dict(mark, pid=os.getpid() + 1))])
    held.drop([[os.getpid(), mark[held.MARK]]])
    with pytest.raises(held.HeldValueGone, match="the host had let it go"):
        held.take(mark)
    with pytest.raises(TypeError, match="not a mark"):
        held.take({"image": 1})


def test_the_host_side_keeps_an_output_only_where_every_reader_is_of_its_environment(
        monkeypatch):
    held = _adapter_module_in_package("held")
    prompt = {"1": {"class_type": "LoadImage", "inputs": {"image": "x.png"}},
              "2": {"class_type": "A", "inputs": {"image": ["1", 0]}},
              "3": {"class_type": "B", "inputs": {"image": ["2", 0], "mask": ["2", 1]}},
              "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 1]}},
              "5": {"class_type": "C", "inputs": {"image": ["2", 2]}}}
    envs = {"A": "e", "B": "e", "C": "other"}
    monkeypatch.setattr(held, "_env_of", envs.get)
    monkeypatch.setattr(held.objects, "running_prompt", lambda prompt_id: prompt)
    book = held.HeldBook(runner=None)
    # Output 0: read by B (e); 1: by B and a preview; 2: by C (another environment); 3: by none.
    assert book.keep_modes("e", "p", "2", [False, False, False, True]) == [
        held.KEEP, held.CROSS, held.CROSS, held.KEEP_EACH]
    assert book.keep_modes("e", None, "2", [False]) is None  # outside a prompt: nothing kept


def test_an_environment_holding_a_prompts_outputs_is_kept_until_the_prompt_ends(
        monkeypatch, caplog):
    held = _adapter_module_in_package("held")
    import isohost

    asked = []

    def keep(env, kept=True):
        asked.append((env, kept))
        if env == "closing":
            raise isohost.HostShuttingDown("the host is shutting down")
        return {"kept": kept}

    book = held.HeldBook(runner=types.SimpleNamespace(host=types.SimpleNamespace(keep=keep)))
    book.keep_for_prompt("e")
    assert asked == []  # no prompt's end to let it go at (install hooks none): never kept
    book.keeps_for_prompts = True
    for env in ("e", "e", "f", "closing"):
        book.keep_for_prompt(env)
    assert asked == [("e", True), ("f", True), ("closing", True)]  # once per environment
    with caplog.at_level("WARNING", logger="isohost"):
        book.prompt_ended()
        book.prompt_ended()  # nothing kept any more
    assert asked[3:] == [("closing", False), ("e", False), ("f", False)]
    assert "environment 'closing' could not be let go: the host is shutting down" in caplog.text
    # A prompt starting keeps the environments whose live workers hold values ComfyUI's cache
    # may hand it; one whose worker is gone holds nothing.
    del asked[:]
    book.wrap("g", "Node", ({held.MARK: 1, "pid": 4242},), [False])
    book.wrap("h", "Node", ({held.MARK: 1, "pid": 4343},), [False])
    monkeypatch.setattr(held, "_start_time", lambda pid: b"100" if pid == 4242 else None)
    book._holder = {"g": (4242, b"100"), "h": (4343, b"100")}
    book.prompt_starting()
    assert asked == [("g", True)]


def test_a_token_changes_once_the_worker_holding_values_is_gone(monkeypatch):
    held = _adapter_module_in_package("held")
    book = held.HeldBook(runner=types.SimpleNamespace(
        host=types.SimpleNamespace(keep=lambda env, kept=True: {"kept": kept})))
    first = book.token("e")
    marked = book.wrap("e", "Node", ({held.MARK: 1, "pid": 4242},), [False])
    assert isinstance(marked[0], held.Held) and marked[0].env == "e"
    monkeypatch.setattr(held, "_start_time", lambda pid: b"100")
    book._holder["e"] = (4242, b"100")
    assert book.token("e") == first  # alive: the same token
    monkeypatch.setattr(held, "_start_time", lambda pid: None)
    assert book.token("e") != first  # gone
    assert book.token("e") == book.token("e")
    # A Held ComfyUI drops is let go of with the environment's next call.
    del marked
    assert book.let_go_since("e") == [[4242, 1]] and book.let_go_since("e") is None
    # A call that failed (interrupted while it waited for its worker) gives its pairs back, before
    # those let go of meanwhile: the next call sends them all.
    book.let_go(types.SimpleNamespace(env="e", pid=4242, id=3))
    book.let_go_again("e", [[4242, 1], [4242, 2]])
    book.let_go_again("e", None)
    assert book.let_go_since("e") == [[4242, 1], [4242, 2], [4242, 3]]


def _adapter_module_in_package(name):
    """A module of the adapter that imports its siblings (`from . import objects`), loaded in a
    package of its own so that they resolve without the package's __init__ (ComfyUI's node)."""
    import importlib.util

    package = types.ModuleType("isohost_comfyui_units")
    package.__path__ = [str(REPO / "comfyui" / "isohost_comfyui")]
    sys.modules.setdefault(package.__name__, package)
    spec = importlib.util.spec_from_file_location(
        package.__name__ + "." + name, REPO / "comfyui" / "isohost_comfyui" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# --- an isolated pack's HTTP routes (isohost_comfy_worker.routes, pack_routes.py) ----------

def _pack(directory, lines):
    """A pack at `directory` whose __init__.py is `lines`."""
    directory.mkdir()
    write(directory / "__init__.py", "\n".join(lines) + "\n")
    return directory


def test_the_routes_a_pack_adds_at_import_are_listed_as_its_own(tmp_path):
    from isohost_comfy_worker import packs, routes

    pack = _pack(tmp_path / "isohost_routes_pack", [
        "from isohost_comfy_worker.routes import RouteTable",
        "table = RouteTable()",
        "@table.get('/routes_pack/{name}')",
        "async def named(request): pass",
        "@table.view('/routes_pack/view')",
        "class View: pass",
        "table.static('/routes_pack/files', '/srv/files', show_index=True, expect_handler=id)",
        "from aiohttp import web",
        "from isohost_comfy_worker.routes import App",
        "app = App(table)",
        "app.router.add_post('/routes_pack/post', named)",
        "app.add_routes([web.put('/routes_pack/put', named), web.static('/routes_pack/s', '/s')])",
        "NODE_CLASS_MAPPINGS = {}"])
    routes.RouteTable().post("/outside/any/pack")(lambda request: None)
    packs.load(str(pack))
    assert routes.listed(str(pack)) == [
        {"method": "GET", "path": "/routes_pack/{name}"},
        {"method": "*", "path": "/routes_pack/view"},
        {"method": "STATIC", "path": "/routes_pack/files", "directory": "/srv/files",
         "options": {"show_index": True}},
        {"method": "POST", "path": "/routes_pack/post"},
        {"method": "PUT", "path": "/routes_pack/put"},
        {"method": "STATIC", "path": "/routes_pack/s", "directory": "/s", "options": {}}]
    assert routes.find_handler(str(pack), "DELETE", "/routes_pack/view").__name__ == "View"
    assert routes.find_handler(str(pack), "HEAD", "/routes_pack/{name}").__name__ == "named"
    with pytest.raises(LookupError, match="has no route POST /routes_pack/{name}"):
        routes.find_handler(str(pack), "POST", "/routes_pack/{name}")


def _answer(handler, method="GET", body=b"", headers=(("Content-Type", "text/plain"),)):
    from isohost_comfy_worker import routes, server_loop

    message = {"method": method, "route": "/r", "path": "/r?x=1", "match_info": {},
               "headers": list(headers), "body": body}
    return server_loop.run(routes.answer(handler, message))


def test_a_handler_runs_on_the_server_loops_own_thread():
    import asyncio
    import threading

    from isohost_comfy_worker import server_loop

    async def where():
        return threading.current_thread().name, asyncio.get_running_loop()

    assert server_loop.run(where()) == ("isohost-server-loop", server_loop.loop())


class _Stop(Exception):
    pass


def test_an_interrupt_of_the_waiting_thread_cancels_the_handler_and_waits_for_its_end():
    import asyncio
    import ctypes
    import threading

    from isohost_comfy_worker import server_loop

    seen = []
    started = threading.Event()

    async def handler():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # ends its own way before the caller goes on
            seen.append("cancelled")
            raise

    def caller():
        try:
            server_loop.run(handler())
        except _Stop:
            seen.append("caller stopped")

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(60)
    # What isohost_worker's interrupt does to the call's thread.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                               ctypes.py_object(_Stop))
    thread.join(60)
    assert seen == ["cancelled", "caller stopped"]


def test_a_routes_response_comes_back_whole_or_is_refused_by_name():
    from aiohttp import web

    async def echo(request):
        response = web.Response(body=await request.read(), status=201, reason="Made",
                                headers={"X-One": "1"}, content_type="text/plain")
        response.set_cookie("k", "v")
        return response

    async def gone(request):
        raise web.HTTPGone(text="gone")

    async def streamed(request):
        return web.StreamResponse()

    def plain_function(request):
        return web.Response(text="not a coroutine")

    answer = _answer(echo, "PUT", b"payload")
    assert (answer["status"], answer["reason"], answer["body"]) == (201, "Made", b"payload")
    assert ("X-One", "1") in answer["headers"] and ("Set-Cookie", "k=v; Path=/") in answer[
        "headers"]
    assert not any(k.lower() == "content-length" for k, _ in answer["headers"])
    assert _answer(gone)["status"] == 410 and _answer(gone)["body"] == b"gone"
    assert _answer(plain_function)["body"] == b"not a coroutine"
    with pytest.raises(TypeError, match="returned StreamResponse; an isolated pack's route"):
        _answer(streamed)

    async def websocket(request):
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        return socket

    upgrade = [("Upgrade", "websocket"), ("Connection", "Upgrade"),
               ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13")]
    with pytest.raises(TypeError, match=r"a websocket \(web.WebSocketResponse\) cannot be served"):
        _answer(websocket, headers=upgrade)


def test_a_route_already_served_is_left_out_of_comfyuis_table(monkeypatch, caplog):
    from aiohttp import web

    table = web.RouteTableDef()
    table.get("/taken")(lambda request: None)
    table.static("/static_taken", "/srv")
    server = types.ModuleType("server")
    server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=table))
    monkeypatch.setitem(sys.modules, "server", server)
    pack_routes = _adapter_module_in_package("pack_routes")
    listed = [{"method": "GET", "path": "/taken"}, {"method": "*", "path": "/taken"},
              {"method": "STATIC", "path": "/static_taken", "directory": "/x", "options": {}},
              {"method": "POST", "path": "/taken"},
              {"method": "STATIC", "path": "/static_new", "directory": "/x",
               "options": {"show_index": True}}]
    with caplog.at_level("WARNING", logger="isohost"):
        assert pack_routes.PackRoutes(None, {}, 1.0).register("env", "/pack", listed) == 2
    assert caplog.text.count("is not served: that route is already taken") == 3
    added = list(table)[2:]
    assert (added[0].method, added[0].path) == ("POST", "/taken")
    assert added[1].prefix == "/static_new" and added[1].kwargs == {"show_index": True}


def test_a_route_opening_its_channel_makes_the_worker_settings_off_the_event_loop(monkeypatch):
    pack_routes = _adapter_module_in_package("pack_routes")
    made_on = []

    class Settings(dict):
        def __getitem__(self, env):
            made_on.append(threading.get_ident())
            return {"key": "5e77"}

    class Refused:
        async def result_async(self):
            raise ConnectionRefusedError("no worker here")

    started = []
    host = types.SimpleNamespace(start=lambda *args: started.append(args) or Refused())
    routes = pack_routes.PackRoutes(host, Settings(), 1.0)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(routes._forward("env", "/pack", {"kind": "request"}, b""))
    assert made_on and made_on[0] != threading.get_ident()
    assert started[0][2:] == ("/pack", {"key": "5e77"})


def test_the_route_channel_answers_a_request_and_drops_bytes_that_are_not_one(
        tmp_path, monkeypatch):
    """The host's side (pack_routes._exchange) and the worker's (route_channel) over a real
    abstract unix socket on the server loop: a request answered with its body, a handler's
    exception as its type and message, a handler cancelled when the host hangs up, connections
    of hostile bytes dropped while the channel serves on, and the on-prompt handlers."""
    import asyncio
    import json
    import socket
    import struct

    from isohost_comfy_worker import packs, route_channel, server_loop

    pack = _pack(tmp_path / "isohost_channel_pack", [
        "import asyncio, threading",
        "from aiohttp import web",
        "from isohost_comfy_worker.routes import RouteTable",
        "table = RouteTable()",
        "cancelled = threading.Event()",
        "@table.post('/channel/{name}')",
        "async def named(request):",
        "    return web.Response(text=request.match_info['name'] + ':' + await request.text())",
        "@table.get('/channel/fails')",
        "async def fails(request): raise KeyError('nope')",
        "@table.get('/channel/slow')",
        "async def slow(request):",
        "    try:",
        "        await asyncio.sleep(60)",
        "    except asyncio.CancelledError:",
        "        cancelled.set()",
        "        raise",
        "from isohost_comfy_worker.routes import record_on_prompt",
        "record_on_prompt(lambda data: dict(data, seen=True))",
        "def refuses(data): raise ValueError('this handler refuses')",
        "record_on_prompt(refuses)",
        "NODE_CLASS_MAPPINGS = {}"])
    module = packs.load(str(pack))
    address = "\0isohost-routes-test-%d" % id(pack)
    server_loop.run(asyncio.start_unix_server(route_channel._serve_connection, path=address))
    monkeypatch.setitem(sys.modules, "server", types.ModuleType("server"))
    pack_routes = _adapter_module_in_package("pack_routes")

    def exchange(method, route, path, body=b"", timeout=None):
        message = {"pack": str(pack), "method": method, "route": route, "path": path,
                   "match_info": {"name": "caf\u00e9"}, "headers": []}
        coroutine = pack_routes._exchange(address, message, body, "env")
        return asyncio.run(asyncio.wait_for(coroutine, timeout))

    def hostile(data):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(address)
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(60)
            return s.recv(1)

    answer, payload = exchange("POST", "/channel/{name}", "/channel/caf%C3%A9", b"body")
    assert (answer["status"], payload) == (200, "caf\u00e9:body".encode())
    answer, payload = exchange("GET", "/channel/fails", "/channel/fails")
    assert answer["error"]["type"] == "KeyError" and answer["error"]["message"] == "'nope'"
    with pytest.raises(asyncio.TimeoutError):
        exchange("GET", "/channel/slow", "/channel/slow", timeout=0.5)
    assert module.cancelled.wait(60)  # the host hung up: the handler was cancelled
    header = json.dumps({"pack": "x"}).encode()
    for data in (struct.pack(">I", 1 << 30), struct.pack(">I", 3) + b"{no",
                 struct.pack(">I", len(header)) + header, b"\x00\x01"):
        assert hostile(data) == b""  # closed without an answer
    answer, payload = exchange("POST", "/channel/{name}", "/channel/x", b"again")
    assert payload == "caf\u00e9:again".encode()
    # The on-prompt handlers, for a caller that cannot await: one rewrites, one that raises is
    # skipped and its traceback comes back.
    on_prompt = {"kind": "on_prompt", "pack": str(pack)}
    answer, payload = pack_routes._exchange_blocking(address, on_prompt, b'{"prompt": {}}', "env",
                                                      60)
    assert json.loads(payload) == {"prompt": {}, "seen": True}
    assert len(answer["failures"]) == 1 and "this handler refuses" in answer["failures"][0]
    answer, _ = pack_routes._exchange_blocking(address, on_prompt, b"{not json", "env", 60)
    assert answer["error"]["type"] == "ValueError"


def test_a_binary_server_message_travels_as_json_or_is_refused_by_name():
    import json

    from PIL import Image

    from isohost_comfy_worker import messages

    def round_trip(event, data):
        return messages.decode(json.loads(json.dumps(messages.encode(event, data, "sid"))))

    assert round_trip("named", {"a": [1]}) == ("named", {"a": [1]}, "sid")
    assert round_trip(3, bytearray(b"\x00\xffx")) == (3, b"\x00\xffx", "sid")
    event, (image_format, image, size), sid = round_trip(2, ("JPEG", Image.new("RGB", (80, 20)),
                                                            40))
    assert (event, image_format, image.size, size) == (2, "JPEG", (40, 10), None)
    event, (preview, metadata), _ = round_trip(4, (("PNG", Image.new("RGB", (8, 8)), None),
                                                   {"node_id": "7"}))
    assert preview[1].size == (8, 8) and metadata == {"node_id": "7"}
    with pytest.raises(TypeError, match="binary event 1 with dict data"):
        messages.encode(1, {"not": "bytes"}, None)
    with pytest.raises(ValueError, match="a preview is"):
        messages.encode(2, ("GIF", Image.new("RGB", (8, 8)), None), None)


def test_a_workers_line_is_written_whole_with_its_colours_and_other_controls_escaped(monkeypatch):
    import io

    import isohost

    worker_output = _adapter_module("worker_output")
    shown = worker_output.shown
    assert shown("\x1b[1;32mready\x1b[0m\ttab") == "\x1b[1;32mready\x1b[0m\ttab"
    assert shown("bell\x07 clear\x1b[2J nul\x00 csi\x9b lone\x1b") == \
        "bell\\x07 clear\\x1b[2J nul\\x00 csi\\x9b lone\\x1b"
    assert shown(" 10%|#\r 50%|#####\r100%|##########") == "100%|##########"
    assert shown("done\r\r") == "done"
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    worker_output.write(isohost.OutputLine("postproc", 42, "stdout", "said \\xff"))
    worker_output.write(isohost.OutputLine("postproc", 42, "stderr", "logged"))
    assert (out.getvalue(), err.getvalue()) == ("[postproc] said \\xff\n", "[postproc] logged\n")


def _adapter_over(monkeypatch, name="standins", modules=None):
    """The adapter's module `name` loaded over stand-ins of ComfyUI's modules (comfy, with its
    model_management and utils, folder_paths, and `modules`: {name: module}), and the comfy
    stand-in, whose attributes a test sets as it needs; its siblings, loaded with them, go with
    them."""
    comfy = types.ModuleType("comfy")
    comfy.model_management = types.ModuleType("comfy.model_management")
    comfy.model_management.free_memory = lambda *args, **kwargs: None
    comfy.utils = types.ModuleType("comfy.utils")
    fakes = {"comfy": comfy, "comfy.model_management": comfy.model_management,
             "comfy.utils": comfy.utils, "folder_paths": types.ModuleType("folder_paths")}
    for module_name, module in dict(fakes, **(modules or {})).items():
        monkeypatch.setitem(sys.modules, module_name, module)
    before = set(sys.modules)
    try:
        return _adapter_module_in_package(name), comfy
    finally:
        for name in set(sys.modules) - before:
            monkeypatch.delitem(sys.modules, name)


def _graph_utils(builder):
    """ComfyUI's comfy_execution.graph_utils, as far as the stand-ins read it: its GraphBuilder."""
    graph_utils = types.ModuleType("comfy_execution.graph_utils")
    graph_utils.GraphBuilder = builder
    return {"comfy_execution": types.ModuleType("comfy_execution"),
            "comfy_execution.graph_utils": graph_utils}


# --- the stand-in of an async FUNCTION (standins._awaiting) ---------------------------------

def test_an_async_stand_ins_call_keeps_its_nodes_start_and_stops_when_cancelled(monkeypatch):
    # Its call waits on a thread while ComfyUI runs other nodes: it must take ComfyUI's graph
    # prefix of its own node (ComfyUI sets the next node's meanwhile), see the cancelling of its
    # task (a prompt failing elsewhere), where the runner then interrupts the worker's call, and
    # leave ComfyUI's interrupt flag set for the node the prompt's thread runs meanwhile.
    class GraphBuilder:
        _default_prefix_root, _default_prefix_call_index, _default_prefix_graph_index = "5", 0, 0

    standins, comfy = _adapter_over(monkeypatch, modules=_graph_utils(GraphBuilder))
    cleared = []  # each time ComfyUI's interrupt flag was cleared
    comfy.model_management.throw_exception_if_processing_interrupted = lambda: cleared.append(1)
    comfy.model_management.InterruptProcessingException = type("Interrupted", (Exception,), {})
    started, moved_on, seen = threading.Event(), threading.Event(), {}

    def run(node, inputs, autograd):
        started.set()
        moved_on.wait(10)
        seen.update(node=node, inputs=inputs, prefix=standins._node_graph_prefix(),
                    autograd=autograd, thread_in_inference_mode=torch.is_inference_mode_enabled())
        with pytest.raises(comfy.model_management.InterruptProcessingException):
            standins._raise_interrupted()  # the flag left for the node the prompt runs meanwhile
        seen["cancelled"] = standins._awaited.get().cancelled.wait(10) and standins._cancelled()
        return (), {}

    async def prompt():
        stand_in = standins._awaiting(run, [])
        assert inspect.iscoroutinefunction(stand_in)  # what ComfyUI looks for
        task = asyncio.create_task(stand_in("node", image=1))
        await asyncio.to_thread(started.wait, 10)
        GraphBuilder._default_prefix_root = "6"  # ComfyUI went on to node 6
        moved_on.set()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    with torch.inference_mode():  # as ComfyUI runs a prompt: the call's thread is not
        assert asyncio.run(prompt())
    assert seen == {"node": "node", "inputs": {"image": 1}, "prefix": ["5", 0, 0],
                    "autograd": "inference", "thread_in_inference_mode": False,
                    "cancelled": True}
    assert standins._node_graph_prefix() == ["6", 0, 0] and not standins._cancelled()
    assert cleared == []
    with pytest.raises(comfy.model_management.InterruptProcessingException):
        standins._raise_interrupted()  # on the prompt's thread: as in process, cleared
    assert cleared == [1]


@pytest.mark.parametrize("awaited", [True, False])
def test_a_stand_ins_validate_inputs_waits_for_its_worker_off_comfyuis_event_loop(monkeypatch,
                                                                                  awaited):
    # ComfyUI 0.3.4x on awaits VALIDATE_INPUTS on its event loop as a prompt is posted: the
    # worker's answer, which may wait for another prompt's node, is waited for on a thread.
    execution = types.ModuleType("execution")
    if awaited:
        async def validate_inputs(prompt_id, prompt, item, validated):
            pass
    else:
        def validate_inputs(prompt, item, validated):
            pass
    execution.validate_inputs = validate_inputs
    standins, _ = _adapter_over(monkeypatch, modules={"execution": execution})
    asked = []

    class Runner:
        def call_unwatched(self, env, name, function, pack_dir, node_name, items):
            asked.append((threading.get_ident(), env, function, node_name, items))
            return True

    validate = standins._validate_inputs(Runner(), "env", "/pack", "Node", {
        "names": ["image", "input_types"], "varkw": False}).__get__(None, type)
    if awaited:
        assert inspect.iscoroutinefunction(validate)  # what ComfyUI looks for
        assert asyncio.run(validate(image=1, input_types={"image": "IMAGE"})) is True
        assert asked[0][0] != threading.get_ident()
    else:  # an older ComfyUI calls it and takes its answer as it is
        assert validate(image=1, input_types={"image": "IMAGE"}) is True
        assert asked[0][0] == threading.get_ident()
    assert asked[0][1:] == ("env", "validate_inputs", "Node",
                            [("image", 1), ("input_types", {"image": "IMAGE"})])


def test_a_workers_queue_item_is_put_in_comfyuis_queue_only_in_the_shape_its_thread_takes(
        monkeypatch):
    put = []
    server = types.ModuleType("server")
    server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(
        prompt_queue=types.SimpleNamespace(put=put.append)))
    bridge, _ = _adapter_over(monkeypatch, "bridge", {"server": server})
    good = [3, "id", {"1": {}}, {"client_id": "c"}, ["1"]]
    for bad, said in (([1], "got (int)"), ([None, "x", {}, {}, []], "got (NoneType, str, "),
                      ([True, "x", {}, {}, []], "got (bool, "), ("item", "got a str"),
                      (good + [{}, "more"], "got (int, str, dict, dict, list, dict, str)"),
                      ([3, "id", {}, {}, "1"], "got (int, str, dict, dict, str)")):
        with pytest.raises(TypeError, match=re.escape(said)):
            bridge._prompt_queue({"op": "put", "args": [bad]})
    with pytest.raises(TypeError, match="one queue item, not 2"):
        bridge._prompt_queue({"op": "put", "args": [good, good]})
    assert put == []
    bridge._prompt_queue({"op": "put", "args": [good]})
    bridge._prompt_queue({"op": "put", "args": [good + [{"token": "x"}]]})  # a newer ComfyUI's
    assert put == [tuple(good), tuple(good + [{"token": "x"}])]


def test_an_async_node_writes_back_only_what_it_changed_of_the_shared_hidden_inputs(monkeypatch):
    # The prompt's other nodes ran while it awaited: a seed node in process wrote its seed into
    # the prompt ComfyUI shares (SaveImage embeds it); the async node's own change joins it.
    standins, _ = _adapter_over(monkeypatch, modules=_graph_utils(types.SimpleNamespace(
        _default_prefix_root="1", _default_prefix_call_index=0, _default_prefix_graph_index=0)))
    prompt = {"1": {"inputs": {"seed": 0, "steps": 4}}, "2": {"inputs": {"note": "a"}},
              "3": {"inputs": {}}}
    seed_inputs = prompt["1"]["inputs"]
    main = threading.get_ident()

    def call(node, inputs, autograd):
        after = copy.deepcopy(inputs["prompt"])  # the node's changes, on its copy in the worker
        after["2"]["inputs"]["note"] = "b"
        del after["3"]
        after["4"] = {"inputs": {"added": True}}
        prompt["1"]["inputs"]["seed"] = 42  # meanwhile, on ComfyUI's thread in process
        prompt["5"] = {"inputs": {}}
        assert threading.get_ident() != main
        return ("out",), {"prompt": after}

    stand_in = standins._awaiting(call, ["prompt", "extra_pnginfo"])
    assert asyncio.run(stand_in("node", prompt=prompt, extra_pnginfo="not a dict")) == ("out",)
    assert prompt == {"1": {"inputs": {"seed": 42, "steps": 4}}, "2": {"inputs": {"note": "b"}},
                      "4": {"inputs": {"added": True}}, "5": {"inputs": {}}}
    assert prompt["1"]["inputs"] is seed_inputs  # changed in place, as other holders see it


@pytest.mark.parametrize("watched", [True, False])
def test_only_a_nodes_call_watches_comfyuis_interrupt_flag(monkeypatch, watched):
    # A VALIDATE_INPUTS that waits for a worker beside another prompt's node must leave that
    # prompt's interrupt to it: neither interrupt its own call nor clear the flag.
    standins, comfy = _adapter_over(monkeypatch)
    comfy.model_management.processing_interrupted = lambda: True  # another prompt's cancel
    interrupted = []

    class Call:
        waits = 3

        def result(self, timeout=None):
            if Call.waits:
                Call.waits -= 1
                raise TimeoutError()
            return "answer"

        def interrupt(self, grace):
            interrupted.append(grace)

    host = types.SimpleNamespace(start=lambda *args, **kwargs: Call())
    runner = standins.Runner(host, {"e": {"key": "k"}}, 5.0)
    call = runner.call if watched else runner.call_unwatched
    assert call("e", "Node", "validate_inputs", "/pack", "Node", []) == "answer"
    assert interrupted == ([5.0] if watched else [])


# --- the autograd mode a node runs in (isohost_comfy_worker/autograd_mode.py) ---------------

@pytest.mark.parametrize("enter, mode", [
    (torch.inference_mode, "inference"), (torch.no_grad, "no_grad"), (torch.enable_grad, None)])
def test_a_node_runs_in_the_autograd_mode_of_comfyuis_thread(enter, mode):
    from isohost_comfy_worker import autograd_mode

    with enter():
        assert autograd_mode.current() == mode
    with autograd_mode.entered(mode):
        seen = (torch.is_inference_mode_enabled(), torch.is_grad_enabled())
    assert seen == {"inference": (True, False), "no_grad": (False, False),
                    None: (False, True)}[mode]
    with pytest.raises(ValueError, match="unknown autograd mode 'training'"):
        autograd_mode.entered("training")


def test_a_stand_in_asks_its_worker_in_the_mode_of_comfyuis_thread(monkeypatch):
    # IS_CHANGED (asked as a prompt starts), check_lazy_status and an async node run in
    # ComfyUI's inference mode in process: the stand-in sends the mode of the thread that asks,
    # and an async node's call, on a thread of its own, answers its worker's asks in that mode.
    standins, _ = _adapter_over(monkeypatch, modules=_graph_utils(types.SimpleNamespace(
        _default_prefix_root="1", _default_prefix_call_index=0, _default_prefix_graph_index=0)))
    asked = []

    class Runner:
        keep_outputs = False
        live_nodes = types.SimpleNamespace(for_call=lambda env, prompt_id: None)
        held = types.SimpleNamespace(token=lambda env: "token",
                                     inputs_for=lambda env, items: items,
                                     let_go_since=lambda env: [],
                                     wrap=lambda env, name, result, output_is_list: result)

        def call(self, env, name, function, *args, **kwargs):
            asked.append((function, kwargs.get("autograd"), torch.is_inference_mode_enabled()))
            return {"is_changed": 1, "check_lazy_status": []}.get(function, ())

    description = {"input_types": {"required": {"x": ["INT", {}]}}, "RETURN_TYPES": [],
                   "is_changed": True, "check_lazy_status": True}
    stand_in = standins.make(Runner(), "env", "/pack", "Node", description)
    async_stand_in = standins.make(Runner(), "env", "/pack", "Node", dict(description, **{
        "async": True}))
    with torch.inference_mode():
        assert stand_in.IS_CHANGED(x=1) == (1, "token")
        assert stand_in().check_lazy_status(x=1) == []
        assert asyncio.run(async_stand_in().run_isolated(x=1)) == ()
    stand_in.IS_CHANGED(x=1)
    assert asked == [("is_changed", "inference", True), ("check_lazy_status", "inference", True),
                     ("run", "inference", True), ("is_changed", None, False)]


def test_a_worker_imports_the_pack_outside_comfyuis_mode_and_runs_its_code_in_it(monkeypatch):
    # A new worker's first call may be IS_CHANGED: the pack's import (its module-level
    # tensors) must not happen in inference mode, as ComfyUI imports packs as it starts.
    from isohost_comfy_worker import nodes

    seen = []

    class Node:
        @classmethod
        def IS_CHANGED(cls, x):
            seen.append(("IS_CHANGED", torch.is_inference_mode_enabled()))
            return x

        def check_lazy_status(self, x):
            seen.append(("check_lazy_status", torch.is_inference_mode_enabled()))
            return []

    def imported(pack_dir, class_name):
        seen.append(("import", torch.is_inference_mode_enabled()))
        return Node

    monkeypatch.setattr(nodes.comfy_env, "prepare",
                        lambda settings: seen.append(("prepare", torch.is_inference_mode_enabled())))
    monkeypatch.setattr(nodes, "_class", imported)
    monkeypatch.setattr(nodes, "_instances", {})
    assert nodes.is_changed("/pack", "Node", [("x", 7)], {}, autograd="inference") == 7
    assert nodes.check_lazy_status("/pack", "Node", "1", [("x", 7)], {}, autograd="inference") == []
    assert seen == [("prepare", False), ("import", False), ("IS_CHANGED", True),
                    ("prepare", False), ("import", False), ("check_lazy_status", True)]
