"""Combos of a stand-in that list files (isohost_comfy_worker.file_lists): a model folder's, or
the input directory's, filled from this process's folder_paths each time ComfyUI asks, as the
real INPUT_TYPES fills them in process."""

import os

import folder_paths


def filled(input_types, file_lists):
    """`input_types` with each combo that `file_lists` describes listing the files there now."""
    for category, inputs in file_lists.items():
        for name, parts in inputs.items():
            spec = input_types.get(category, {}).get(name)
            options = None if spec is None else _options(parts)
            if options is None:
                continue
            if isinstance(spec[0], (list, tuple)):
                spec = (options,) + tuple(spec[1:])
            else:  # ("COMBO", {"options": [...]})
                spec = (spec[0], dict(spec[1], options=options)) + tuple(spec[2:])
            input_types[category][name] = spec
    return input_types


def _options(parts):
    """The options of a combo of file lists (its parts: options, {"folder": name} and
    {"input": rule}); None where this process lacks a folder (the pack's own, whose
    description the adapter could not read: model_folders.register), and the combo keeps the
    files the scan saw rather than the node failing."""
    options = []
    for part in parts:
        if not isinstance(part, dict):
            options.append(part)
        elif "input" in part:
            options += input_files(folder_paths.get_input_directory(), part["input"])
        else:
            try:
                options += folder_paths.get_filename_list(part["folder"])
            except KeyError:
                return None
    return options


def input_files(directory, rule):
    """The names under `directory` that a listing by `rule` (isohost_comfy_worker.file_lists.
    InputProbe.rule) gives, sorted: its files of the extensions it keeps, the names of its
    folders where it lists them, and their files ("folder/file") where it lists those."""
    names = []
    for root, folders, files in os.walk(directory):
        relative = os.path.relpath(root, directory)
        if relative == ".":
            names += [f for f in folders if rule.get("folders")]
            names += [f for f in files if _keeps(rule, f)]
            if not rule.get("nested"):
                break
        else:
            prefix = relative.replace(os.sep, "/") + "/"
            names += [prefix + f for f in files if _keeps(rule, f)]
    return sorted(names)


def _keeps(rule, name):
    extension = os.path.splitext(name)[1][1:].lower()
    if not extension:
        return bool(rule.get("bare"))
    if "keep" in rule:
        return extension in rule["keep"]
    return extension not in rule.get("drop", ())
