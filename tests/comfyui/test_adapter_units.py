"""The adapter's pieces that need no ComfyUI server: the settings file, the scan cache's key,
model detection, and the combos of model files. Fast; run with the ComfyUI tests."""

import sys
import types

import pytest

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
path = ["lib"]
packs = ["packs/one", "/abs/two"]
""")
    loaded = settings.load(str(path), "/opt/ComfyUI")
    assert loaded.host_config == {"host": {"idle_reap_seconds": 60}, "env": {"a": {
        "python": str(tmp_path / "venvs/a/bin/python"),
        "path": [str(tmp_path / "lib"), "/opt/ComfyUI"]}}}
    assert loaded.packs == [("a", str(tmp_path / "packs/one")), ("a", "/abs/two")]
    assert loaded.interrupt_grace_seconds == 1.5
    assert loaded.scan_cache == str(tmp_path / "isohost-scan-cache.json")


@pytest.mark.parametrize("text, words", [
    ("[comfyui]\ngrace = 1\n", "unknown key 'grace' in [comfyui]"),
    ("[comfyui]\ninterrupt_grace_seconds = -1\n", "interrupt_grace_seconds must be a number"),
    ("[env.a]\npacks = \"/one\"\n", "[env.a] packs must be a list of directories"),
    ("[env.a\n", ""),
])
def test_a_bad_settings_file_is_named_with_its_key(tmp_path, text, words):
    path = write(tmp_path / "isohost.toml", text)
    with pytest.raises(settings.SettingsError) as refused:
        settings.load(str(path), "/opt/ComfyUI")
    assert str(refused.value).startswith(str(path)) and words in str(refused.value)


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
