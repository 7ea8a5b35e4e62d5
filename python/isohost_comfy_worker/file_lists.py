"""Combo inputs that list files of ComfyUI's model folders (docs/comfyui.md, "Scan").

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
(isohost_comfyui.model_folders)."""

_MARKER = "\0isohost-folder:"


def parts_of(input_types_function):
    """{category: {input name: parts}} of the combos that `input_types_function()` fills from
    folder_paths.get_filename_list; {} if it cannot be called so."""
    import folder_paths

    original = folder_paths.get_filename_list
    folder_paths.get_filename_list = lambda folder_name: [_MARKER + folder_name]
    try:
        probed = input_types_function()
    except Exception:
        return {}
    finally:
        folder_paths.get_filename_list = original
    found = {}
    for category, inputs in (probed or {}).items():
        if not isinstance(inputs, dict):
            continue
        for name, spec in inputs.items():
            options = _options(spec)
            if options and any(_is_marker(o) for o in options):
                found.setdefault(category, {})[name] = [
                    {"folder": o[len(_MARKER):]} if _is_marker(o) else o for o in options]
    return found


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
            for parts in inputs.values() for part in parts if isinstance(part, dict)}


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
