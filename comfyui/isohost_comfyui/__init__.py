"""isohost for ComfyUI: custom node packs that run isolated, each in its environment's own
interpreter, registered in ComfyUI under their own names (docs/comfyui.md).

Link this directory into ComfyUI/custom_nodes/ and write isohost.toml in ComfyUI's directory
(or point $ISOHOST_COMFYUI_CONFIG at it):

    [env.postproc]
    python = "/opt/venvs/postproc/bin/python"
    packs = ["/opt/isolated_nodes/ComfyUI-post-processing-nodes"]

Each pack's nodes are described by its worker once (then cached), and run there on an instance
kept per node id; progress, messages, interrupts and memory go between the two as they would in
one process. A pack that cannot be loaded is reported alone; the others load.
"""

import atexit
import json
import logging
import os
import re
import shutil
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))


def _find_isohost():
    """The isohost package: $ISOHOST_PYTHONPATH, else the build tree beside this adapter's real
    location (<repo>/build/python when linked from the repository)."""
    path = os.environ.get("ISOHOST_PYTHONPATH") or os.path.join(os.path.dirname(os.path.dirname(
        _HERE)), "build", "python")
    if path not in sys.path:
        sys.path.insert(0, path)
    return path


_ISOHOST_PATH = _find_isohost()

import folder_paths  # noqa: E402
import nodes  # noqa: E402

import isohost  # noqa: E402

from . import bridge, catalog, held, pack_routes, standins, status_route  # noqa: E402
from . import model_folders  # noqa: E402
from . import torch_threads  # noqa: E402
from . import worker_output  # noqa: E402
from . import settings as settings_module  # noqa: E402
from .worker_settings import WorkerSettings  # noqa: E402

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
# The side panel (web/isohost_panel.js), which ComfyUI's front end loads from here.
WEB_DIRECTORY = "./web"

_log = logging.getLogger("isohost")
# ComfyUI's code (comfy, folder_paths, node_helpers, comfy_extras), which every worker imports
# too; its --base-directory, where isohost.toml is looked for, may be elsewhere.
_COMFYUI_ROOT = os.path.dirname(os.path.abspath(folder_paths.__file__))
host = None


class PackProblem(Exception):
    """Why a pack is not loaded, found before any worker starts."""


def _check_pack(pack_dir, env, env_config):
    """Raises PackProblem for what the host can see without a worker: a pack directory that is
    not there or is no node pack, an interpreter that does not exist (which a cached scan
    would otherwise hide until the first prompt)."""
    if not os.path.isdir(pack_dir):
        raise PackProblem("it is not a directory (a pack is a directory with an __init__.py)"
                          if os.path.exists(pack_dir) else "the directory does not exist")
    if not os.path.isfile(os.path.join(pack_dir, "__init__.py")):
        raise PackProblem("it has no __init__.py: not a ComfyUI node pack")
    python = env_config.get("python") or "python3"
    if os.sep in python:
        found = os.access(python, os.X_OK) and not os.path.isdir(python)
    else:
        found = shutil.which(python) is not None
    if not found:
        raise PackProblem("the interpreter of environment '%s', %s, %s" % (
            env, python, "is not an executable file" if os.sep in python else "is not on PATH"))


def _load_pack(runner, routes, cache, env, pack_dir, env_config):
    """Registers the stand-ins of one pack; returns how many nodes."""
    _check_pack(pack_dir, env, env_config)
    key = catalog.fingerprint(pack_dir, env_config)
    description = cache.get(pack_dir, key)
    if description is None:
        description = json.loads(host.call(env, "isohost_comfy_worker.scan:describe_json",
                                           pack_dir, runner.worker_settings[env]))
        cache.put(pack_dir, key, description)
    replaced = [name for name in description["nodes"]
                if name in nodes.NODE_CLASS_MAPPINGS or name in NODE_CLASS_MAPPINGS]
    if replaced:
        # One line for the pack, where there was one per node: 23 of them when the pack was
        # also left in custom_nodes/, the likeliest cause, which the line names.
        _log.warning("isohost: nodes of %s replace those of the same name already loaded: %s%s",
                     pack_dir, ", ".join(replaced[:5]) + (
                         ", ... (%d in all)" % len(replaced) if len(replaced) > 5 else ""),
                     "; is the pack also in custom_nodes/? There it runs in ComfyUI's process "
                     "too: move it out" if len(replaced) > 1 else "")
    # Before its stand-ins: the folders the pack registered in its worker, which they list.
    model_folders.register(description.get("model_folders"), pack_dir)
    for name, node in description["nodes"].items():
        NODE_CLASS_MAPPINGS[name] = standins.make(runner, env, pack_dir, name, node)
    NODE_DISPLAY_NAME_MAPPINGS.update(description.get("display_names") or {})
    web = description.get("web_directory")
    if web and os.path.isdir(web):
        nodes.EXTENSION_WEB_DIRS[os.path.basename(pack_dir)] = web
    routes.register(env, pack_dir, description.get("routes") or [])
    if description.get("on_prompt_handlers"):
        routes.register_on_prompt(env, pack_dir)
    return len(description["nodes"])


def _count(n, noun):
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def _describe_failure(error):
    if isinstance(error, isohost.WorkerException) and error.traceback_text:
        return "%s: %s\n%s" % (error.type_name, error.detail.get("message", ""),
                               error.traceback_text.rstrip())
    return "%s: %s" % (getattr(error, "kind", type(error).__name__), error)


def _config_error(settings, error):
    # isohost names the TOML it was given, which the adapter wrote from the user's file.
    return "%s: %s" % (settings.path, re.sub(r"^\(dict\):\d+:\d+: ", "", str(error)))


def _new_host(config):
    # The workers' output goes to ComfyUI's own log, as a pack's does in process.
    return isohost.Host(config, on_output=worker_output.write)


def _make_host(settings):
    """isohost.Host of the settings; an environment that isohost refuses is logged and left
    out with its packs, and the others load. None if [host] itself is refused."""
    try:
        return _new_host(settings.host_config)
    except isohost.ConfigError:
        pass
    host_only = {k: v for k, v in settings.host_config.items() if k != "env"}
    try:
        _new_host(host_only).close()
    except isohost.Error as e:
        _log.error("isohost: no isolated packs loaded: %s", _config_error(settings, e))
        return None
    accepted = {}
    for name, env in settings.host_config.get("env", {}).items():
        alone = dict(env)
        if alone.get("prestart") is True and alone.get("preload"):
            alone["prestart"] = False  # checked, not started
        try:
            _new_host(dict(host_only, env={name: alone})).close()
        except isohost.Error as e:
            packs = [p for n, p in settings.packs if n == name]
            reason = _config_error(settings, e)
            _log.error("isohost: environment '%s' not loaded (%s): %s", name,
                       ", ".join(packs) or "no packs", reason)
            status_route.SOURCE.not_loaded(name, None, reason)
            continue
        accepted[name] = env
    settings.host_config = dict(host_only, env=accepted)
    settings.packs = [(n, p) for n, p in settings.packs if n in accepted]
    try:
        return _new_host(settings.host_config)
    except isohost.Error as e:
        _log.error("isohost: no isolated packs loaded: %s", _config_error(settings, e))
        return None


def _start():
    global host
    path = settings_module.config_path(folder_paths.base_path)
    try:
        settings = settings_module.load(path, _COMFYUI_ROOT)
    except settings_module.SettingsError as e:
        _log.error("isohost: no isolated packs loaded: %s", e)
        status_route.SOURCE.unavailable("no isolated packs loaded: %s" % e)
        return
    host = _make_host(settings)
    if host is None:
        status_route.SOURCE.unavailable("no isolated packs loaded: isohost refused %s (ComfyUI's "
                                        "log says why)" % path)
        return
    status_route.SOURCE.started(host, list(settings.host_config.get("env", {})), settings.packs)
    atexit.register(host.close)
    runner = standins.Runner(host, WorkerSettings(settings.host_config.get("env", {})),
                             settings.interrupt_grace_seconds)
    if settings.keep_outputs_in_workers:
        held.install(runner)
    bridge.serve(host)
    bridge.join_memory_managers(host)
    routes = pack_routes.PackRoutes(host, runner.worker_settings,
                                    settings.route_timeout_seconds,
                                    settings.on_prompt_timeout_seconds)
    cache = catalog.Catalog(settings.scan_cache)
    loaded = 0
    for env, pack_dir in settings.packs:
        env_config = settings.host_config["env"][env]
        try:
            count = _load_pack(runner, routes, cache, env, pack_dir, env_config)
            _log.info("isohost: %s of %s run%s isolated in environment '%s'",
                      _count(count, "node"), pack_dir, "s" if count == 1 else "", env)
            loaded += count
        except (PackProblem, isohost.Error) as e:
            reason = str(e) if isinstance(e, PackProblem) else _describe_failure(e)
            _log.error("isohost: pack %s (environment '%s') not loaded: %s", pack_dir, env, reason)
            status_route.SOURCE.not_loaded(env, pack_dir, reason)
    cache.save()
    if loaded and torch_threads.spin_long():
        _log.warning(torch_threads.ADVICE)


_start()
status_route.serve()
