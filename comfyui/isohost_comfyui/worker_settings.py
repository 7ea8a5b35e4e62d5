"""What a worker needs of the host's ComfyUI to behave like it (isohost_comfy_worker.comfy_env):
its command-line state, its directories, the GPU the worker is pinned to, the modules this
process can import, and the modules of ComfyUI's own nodes outside nodes.py. A worker applies
them once; the stand-ins send them whole to a worker that has not had them and their `key` alone
after that (standins.Runner)."""

import collections.abc
import hashlib
import json
import os
import sys
import threading

import folder_paths

# Command-line settings that concern this process only, not how a node behaves. Its address and
# port go to the workers: a pack that calls ComfyUI's own HTTP API reads them; so do --verbose
# and --log-stdout, which set up a worker's logging as ComfyUI's (root_logger.py).
_HOST_ONLY = {"enable_cors_header", "max_upload_size", "extra_model_paths_config",
              "cuda_device", "front_end_version", "front_end_root", "user_directory",
              "output_directory", "temp_directory", "input_directory", "tls_keyfile",
              "tls_certfile", "auto_launch", "disable_auto_launch", "quick_test_for_ci",
              "windows_standalone_build", "multi_user"}


class WorkerSettings(collections.abc.Mapping):
    """{env name: its settings}, made at their first use (a pack's scan, a call, a route) rather
    than as the adapter loads: listing the host's modules takes 63 ms with ComfyUI's path, which a
    start that finds every scan cached and runs no isolated node need not pay, and then the
    packs ComfyUI loads after the adapter are among them (unless a scan made them as the adapter
    loaded). Made once: the first thread to need them makes them, others wait."""

    def __init__(self, envs):
        self._envs = envs
        self._made = None
        self._making = threading.Lock()

    def __getitem__(self, env):
        return self._all()[env]

    def __iter__(self):
        return iter(self._envs)

    def __len__(self):
        return len(self._envs)

    def _all(self):
        if self._made is None:
            with self._making:
                if self._made is None:
                    self._made = _make(self._envs)
        return self._made


def _make(envs):
    """{env name: its settings}: the same for every environment but the GPU it is pinned to."""
    from comfy.cli_args import args

    values = {}
    for name, value in vars(args).items():
        if name not in _HOST_ONLY and _is_plain(value):
            values[name] = value.value if hasattr(value, "value") else value
    folders = {name: getattr(folder_paths, name, None)
               for name in ("output_directory", "input_directory", "temp_directory",
                            "user_directory", "models_dir")}
    folders["folder_names_and_paths"] = {
        name: [list(paths), sorted(extensions)]
        for name, (paths, extensions) in folder_paths.folder_names_and_paths.items()}
    modules = host_modules()
    builtin = builtin_node_modules()
    return {name: _keyed({"args": values, "folders": folders, "device": env.get("device"),
                          "host_modules": modules, "builtin_node_modules": builtin})
            for name, env in envs.items()}


def builtin_node_modules():
    """{node name: its module} of the nodes ComfyUI loads from its own tree outside nodes.py
    (comfy_extras, comfy_api_nodes): a worker imports one such module when a pack looks up one
    of its nodes in `nodes.NODE_CLASS_MAPPINGS` (isohost_comfy_worker.builtin_nodes)."""
    import nodes

    table = {}
    for name, cls in nodes.NODE_CLASS_MAPPINGS.items():
        module = getattr(cls, "RELATIVE_PYTHON_MODULE", None)
        if isinstance(module, str) and module.startswith(_BUILTIN_PACKAGES):
            table[name] = module
    return table


_BUILTIN_PACKAGES = ("comfy_extras.", "comfy_api_nodes.")


def host_modules():
    """The top-level modules this process can import, sorted: those on its sys.path (namespace
    packages too: any folder there), built in, or loaded (ComfyUI's packs, by their path). An
    object a worker makes of a class of another module cannot be unpickled here: the worker
    keeps it (isohost_comfy_worker.values)."""
    import pkgutil

    names = {module.name for module in pkgutil.iter_modules()}
    names.update(sys.builtin_module_names)
    names.update(name.partition(".")[0] for name in list(sys.modules))
    for entry in sys.path:
        try:
            names.update(e.name for e in os.scandir(entry or ".")
                         if e.is_dir() and e.name.isidentifier())
        except OSError:
            pass  # not a folder (a zip file's modules are iter_modules')
    return sorted(names)


def reference(settings):
    """What a call carries in place of `settings` once the worker has them: their key."""
    return {"key": settings["key"]}


def _keyed(settings):
    # The digest of what they say: a worker tells a reference to its own settings from one to
    # another ComfyUI's, and a new worker from one that has them.
    text = json.dumps(settings, sort_keys=True, default=str)
    return dict(settings, key=hashlib.sha256(text.encode("utf-8")).hexdigest()[:32])


def _is_plain(value):
    if hasattr(value, "value") and isinstance(value.value, (str, int, float, bool)):
        return True  # an Enum
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)
