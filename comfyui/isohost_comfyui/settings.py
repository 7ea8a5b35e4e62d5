"""The adapter's one TOML file (docs/comfyui.md, "Configuration").

It is isohost's own configuration format (README, "Usage") with two additions: `packs`, in an
environment, lists the pack directories that run isolated in that environment's worker, and an
optional `[comfyui]` table holds the adapter's own settings. Both are taken out here; the rest
goes to isohost.Host as it is, so every `[host]` and `[env.NAME]` key means what it means
elsewhere.
"""

import os
import sys

# [comfyui] keys and their defaults.
DEFAULTS = {
    # How long an interrupted node may take to stop before its worker is killed and replaced.
    "interrupt_grace_seconds": 5.0,
    # Where scans of the packs are cached; relative to the TOML file.
    "scan_cache": "isohost-scan-cache.json",
    # How long an isolated pack's HTTP route may take before its handler is cancelled and it is
    # answered 504 (pack_routes.py).
    "route_timeout_seconds": 120.0,
    # How long POST /prompt may wait for an isolated pack's on-prompt handlers (its worker
    # started and the pack imported first, if need be) before the prompt goes on without them,
    # logged (pack_routes.py). ComfyUI serves nothing else meanwhile.
    "on_prompt_timeout_seconds": 10.0,
    # Whether an isolated node's outputs that only nodes of its own environment read stay in its
    # worker (held.py); false sends every output back to ComfyUI after each node.
    "keep_outputs_in_workers": True,
}


class SettingsError(Exception):
    """The configuration file cannot be used; the message names the file and the key."""


class Settings:
    def __init__(self, path, host_config, packs, options):
        self.path = path
        # What isohost.Host takes: {"host": {...}, "env": {...}}.
        self.host_config = host_config
        # [(env name, absolute pack directory)], in the file's order.
        self.packs = packs
        self.interrupt_grace_seconds = options["interrupt_grace_seconds"]
        self.scan_cache = options["scan_cache"]
        self.keep_outputs_in_workers = options["keep_outputs_in_workers"]
        self.route_timeout_seconds = options["route_timeout_seconds"]
        self.on_prompt_timeout_seconds = options["on_prompt_timeout_seconds"]


def config_path(comfyui_base):
    """$ISOHOST_COMFYUI_CONFIG, else isohost.toml in ComfyUI's base directory."""
    return os.environ.get("ISOHOST_COMFYUI_CONFIG") or os.path.join(comfyui_base, "isohost.toml")


def load(path, comfyui_root):
    """The settings in `path`; every environment's worker also gets ComfyUI's code directory on
    its path, so that `comfy`, `folder_paths`, `node_helpers` and `comfy_extras` import there."""
    data = _read_toml(path)
    base = os.path.dirname(os.path.abspath(path))
    unknown = sorted(set(data) - {"comfyui", "env", "host"})
    if unknown:  # before isohost's own check, whose list of tables leaves out [comfyui]
        raise SettingsError("%s: unknown table [%s] (known: comfyui, env, host)"
                            % (path, unknown[0]))
    options = dict(DEFAULTS)
    comfyui = data.pop("comfyui", {})
    if not isinstance(comfyui, dict):
        raise SettingsError("%s: [comfyui] must be a table" % path)
    for key, value in comfyui.items():
        if key not in DEFAULTS:
            raise SettingsError("%s: unknown key '%s' in [comfyui] (known: %s)"
                                % (path, key, ", ".join(sorted(DEFAULTS))))
        options[key] = value
    _check_seconds(path, options, "interrupt_grace_seconds", 0, 3600)
    _check_seconds(path, options, "route_timeout_seconds", 0.001, 86400)
    _check_seconds(path, options, "on_prompt_timeout_seconds", 0.001, 3600)
    if not isinstance(options["keep_outputs_in_workers"], bool):
        raise SettingsError("%s: [comfyui] keep_outputs_in_workers must be true or false, not %r"
                            % (path, options["keep_outputs_in_workers"]))
    if not isinstance(options["scan_cache"], str):
        raise SettingsError("%s: [comfyui] scan_cache must be a path" % path)
    options["scan_cache"] = os.path.join(base, options["scan_cache"])
    packs = []
    listed = {}  # pack directory -> the environment that lists it
    envs = data.get("env", {})
    if not isinstance(envs, dict):
        raise SettingsError("%s: [env] must hold tables [env.NAME]" % path)
    for name, env in envs.items():
        if not isinstance(env, dict):
            raise SettingsError("%s: [env.%s] must be a table" % (path, name))
        for d in _directories(path, name, env, "packs"):
            pack = _resolve(base, d)
            if pack in listed:
                raise SettingsError("%s: the pack %s is listed in [env.%s] and in [env.%s]; a "
                                    "pack runs in one environment" % (path, pack, listed[pack],
                                                                      name))
            listed[pack] = name
            packs.append((name, pack))
        del env["packs"]
        env["path"] = [_resolve(base, d) for d in _directories(path, name, env, "path")]
        env["path"].append(comfyui_root)
        _default_variables(env)
        if isinstance(env.get("python"), str) and os.sep in env["python"]:
            env["python"] = _resolve(base, env["python"])
        if isinstance(env.get("cwd"), str) and env["cwd"]:
            env["cwd"] = _resolve(base, env["cwd"])
    host = data.get("host")
    if isinstance(host, dict) and isinstance(host.get("simulated_gpu"), str):
        host["simulated_gpu"] = _resolve(base, host["simulated_gpu"])
    return Settings(path, data, packs, options)


def _directories(path, name, env, key):
    """[env.NAME]'s `key`, a list of directories: checked here, since the adapter rewrites
    them (relative to the file) before isohost sees them."""
    dirs = env.setdefault(key, [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
        raise SettingsError("%s: [env.%s] %s must be a list of directories, not %r"
                            % (path, name, key, dirs))
    return dirs


def _resolve(base, given):
    """A path of the file, absolute: `~` expanded, relative to the file's directory."""
    return os.path.normpath(os.path.join(base, os.path.expanduser(given)))


def _default_variables(env):
    """Variables a ComfyUI worker gets unless its [env.NAME] env table or ComfyUI's own
    environment sets them: OMP_WAIT_POLICY=PASSIVE, so that torch's threads in a worker sleep
    once a node's operation is done instead of spinning for the next; spinning, they held the
    cores that the host's and the worker's threads needed to carry each node's call and reply
    (on the 16-core GPU machine each hop took about twice as long: bench/results/
    h100-2026-12-06-comfyui)."""
    variables = env.setdefault("env", {})
    if isinstance(variables, dict) and "OMP_WAIT_POLICY" not in os.environ:
        variables.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _check_seconds(path, options, key, low, high):
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise SettingsError("%s: [comfyui] %s must be a number of seconds from %g to %g, not %r"
                            % (path, key, low, high, value))


def _read_toml(path):
    try:
        import tomllib
    except ImportError:  # Python 3.9 and 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise SettingsError("reading %s needs Python 3.11's tomllib or the tomli package "
                                "(pip install tomli) on %s" % (path, sys.version.split()[0]))
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SettingsError("%s does not exist: write it (docs/comfyui.md) or point "
                            "ISOHOST_COMFYUI_CONFIG at yours" % path) from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SettingsError("%s: %s" % (path, e)) from None
    except UnicodeDecodeError as e:  # tomllib decodes the whole file first
        raise SettingsError("%s is not UTF-8 text (byte %d: %s)" % (path, e.start, e.reason)) \
            from None
