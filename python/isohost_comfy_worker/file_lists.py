"""Combo inputs that list files of ComfyUI's model folders or input directory (docs/comfyui.md,
"Scan").

A loader's INPUT_TYPES lists the files in a model folder each time ComfyUI asks
(`folder_paths.get_filename_list("checkpoints")`, often after a "None"), so a file added to the
folder shows up at the next /object_info. A stand-in's INPUT_TYPES is the scan's, cached across
starts, so the scan finds which combo inputs are such a list: it calls INPUT_TYPES once more with
get_filename_list answering a marker per folder, and a combo whose options hold markers is
described as its parts (["None", {"folder": "checkpoints"}]). The host's stand-in fills those
combos from its own folder_paths each time it is asked; the worker's folder_paths has the host's
folders (comfy_env), so both list the same files. A list the node filters or transforms loses
its markers, and stays as the scan saw it. A folder the pack registered at import (Impact Pack's
"sams") is only in the worker's folder_paths: `folders` describes it, and the host registers it
(isohost_comfyui.model_folders).

A LoadImage-like node lists ComfyUI's input directory (`os.listdir(folder_paths.
get_input_directory())`, often filtered by kind of file): the same call runs with the input
directory a probe, a folder holding an empty file of each extension the worker's mimetypes knows
(and of one it does not, one without any; and a subfolder holding the same), and a combo whose
options hold probe entries is described with {"input": the rule its entries tell}: which
extensions it keeps, whether it lists folders and the files inside them. The host's stand-in
lists its own input directory by that rule each time it is asked, so an image uploaded after the
scan is offered and passes validation, as in process."""

import contextlib
import mimetypes
import os
import shutil
import tempfile

_MARKER = "\0isohost-folder:"
# The probe's entries: "isohost-probe.<extension>", and these.
_STEM = "isohost-probe"
_UNKNOWN = "isohost-unknown-extension"
_FOLDER = "isohost-probe-folder"
# Extensions ComfyUI's packs filter for that Python's mimetypes may not know.
_MORE_EXTENSIONS = ("avif", "ckpt", "fbx", "flac", "glb", "gltf", "heic", "jxl", "latent", "m4a",
                    "mkv", "npy", "npz", "obj", "opus", "pt", "pth", "safetensors", "webm",
                    "webp")


def parts_of(input_types_function, input_probe=None):
    """{category: {input name: parts}} of the combos that `input_types_function()` fills from
    folder_paths.get_filename_list, or from the input directory where `input_probe` (an
    InputProbe) is given; {} if it cannot be called so."""
    try:
        with _probing(input_probe):
            probed = input_types_function()
    except Exception:
        return {}
    found = {}
    for category, inputs in (probed or {}).items():
        if not isinstance(inputs, dict):
            continue
        for name, spec in inputs.items():
            parts = _parts(_options(spec), input_probe)
            if parts is not None:
                found.setdefault(category, {})[name] = parts
    return found


@contextlib.contextmanager
def _probing(input_probe):
    """folder_paths answering markers for its folders' files, and with the probe for its input
    directory where there is one, put back as they were after."""
    import folder_paths

    get_filename_list = folder_paths.get_filename_list
    folder_paths.get_filename_list = lambda folder_name: [_MARKER + folder_name]
    input_directory = None if input_probe is None else folder_paths.get_input_directory()
    if input_probe is not None:
        folder_paths.set_input_directory(input_probe.path)
    try:
        yield
    finally:
        folder_paths.get_filename_list = get_filename_list
        if input_probe is not None:
            folder_paths.set_input_directory(input_directory)


def _parts(options, input_probe):
    """A combo's options as parts: a marker as {"folder"}, the probe's entries as one {"input"}
    where the first of them stood; None where it holds neither."""
    if not options:
        return None
    listed = input_probe.listed(options) if input_probe is not None else set()
    if not listed and not any(_is_marker(o) for o in options):
        return None
    parts = []
    for option in options:
        if _is_marker(option):
            parts.append({"folder": option[len(_MARKER):]})
        elif option not in listed:
            parts.append(option)
        elif not any(isinstance(p, dict) and "input" in p for p in parts):
            parts.append({"input": input_probe.rule(listed)})
    return parts


class InputProbe:
    """A folder that stands for ComfyUI's input directory while the scan asks a node for its
    inputs: an empty file of each extension, and a folder holding the same. Made in ComfyUI's
    temp directory, which ComfyUI empties as it starts and ends, so that none outlives a worker
    killed during the scan."""

    def __init__(self, parent):
        os.makedirs(parent, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix="isohost-input-probe-", dir=parent)
        self.extensions = sorted({e.lstrip(".").lower() for e in mimetypes.types_map}
                                 | {e.lstrip(".").lower() for e in mimetypes.common_types}
                                 | set(_MORE_EXTENSIONS))
        files = {"%s.%s" % (_STEM, e): e for e in self.extensions + [_UNKNOWN]}
        files[_STEM] = ""
        os.mkdir(os.path.join(self.path, _FOLDER))
        for name in files:
            open(os.path.join(self.path, name), "wb").close()
            open(os.path.join(self.path, _FOLDER, name), "wb").close()
        # {entry as a listing names it: its extension ("" none)}, the folder's files included.
        self.entries = dict(files, **{_FOLDER + "/" + n: e for n, e in files.items()})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)

    def listed(self, options):
        """The options that are this probe's entries."""
        return {o for o in options if isinstance(o, str) and (o in self.entries or o == _FOLDER)}

    def rule(self, listed):
        """What a listing that kept `listed` of the probe's entries keeps of a directory:
        {"keep": extensions} (those alone) or {"drop": extensions} (all others, where it kept
        the unknown one), "bare" (a file with no extension), "folders" (folders' names),
        "nested" (files inside folders, as "folder/file")."""
        kept = {self.entries[name] for name in listed if name in self.entries}
        rule = {"bare": "" in kept, "folders": _FOLDER in listed,
                "nested": any(name.startswith(_FOLDER + "/") for name in listed)}
        if _UNKNOWN in kept:
            rule["drop"] = [e for e in self.extensions if e not in kept]
        else:
            rule["keep"] = sorted(kept - {""})
        return rule


def _is_marker(option):
    return isinstance(option, str) and option.startswith(_MARKER)


def _options(spec):
    """The option list of a combo input's spec: ([options], {...}) or ("COMBO", {"options"})."""
    if not isinstance(spec, (list, tuple)) or not spec:
        return None
    if isinstance(spec[0], (list, tuple)):
        return list(spec[0])
    if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict):
        options = spec[1].get("options")
        return list(options) if isinstance(options, (list, tuple)) else None
    return None


def folders(nodes):
    """{folder: [paths, extensions]} as this worker's folder_paths holds it, for each folder the
    file lists of `nodes` (the scan's descriptions) name: one the pack registered at import
    exists here alone, and the host needs it to fill the stand-ins' combos."""
    import folder_paths

    held = {}
    for name in sorted(_named(nodes)):
        entry = _held(folder_paths, name)
        if entry is not None:
            held[name] = entry
    return held


def _named(nodes):
    """The folders the file lists of `nodes` name."""
    return {part["folder"] for node in nodes.values()
            for inputs in (node.get("file_lists") or {}).values()
            for parts in inputs.values() for part in parts
            if isinstance(part, dict) and "folder" in part}


def _held(folder_paths, name):
    """[paths, sorted extensions] of `name` in folder_paths (under the name get_filename_list
    maps it to: "clip" is "text_encoders"); None where a pack left it in another shape."""
    mapped = getattr(folder_paths, "map_legacy", lambda n: n)(name)
    try:
        paths, extensions = folder_paths.folder_names_and_paths[mapped]
    except (KeyError, TypeError, ValueError):
        return None
    if isinstance(paths, (list, tuple)) and isinstance(extensions, (set, frozenset, list, tuple)):
        return [[str(p) for p in paths], sorted(str(e) for e in extensions)]
    return None
