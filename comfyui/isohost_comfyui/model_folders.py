"""Model folders an isolated pack registers at import (docs/comfyui.md, "Scan").

A pack may add a folder of its own to folder_paths as it is imported (Impact Pack's "sams" and
"ultralytics"), and its loaders list that folder's files. Isolated, the import runs in the
worker, so the host's folder_paths would lack the folder: the stand-ins' combos could not be
filled (KeyError), and ComfyUI's /models, other packs and the stand-ins' validation would not
see it. The scan describes each folder the pack's file lists name as the worker holds it, and
the host registers those it does not know, as the import would have in process."""

import logging

import folder_paths

_log = logging.getLogger("isohost")


def register(described, pack_dir):
    """Adds to the host's folder_paths each folder of `described` (the scan's "model_folders":
    {folder: [paths, extensions]}) that it lacks. A folder the host knows stays as the host has
    it (its own, or registered by a pack loaded earlier, as in process); an entry that is not
    in the scan's shape (a cache edited by hand) is logged and left out, and the stand-ins
    then offer the files the scan saw."""
    if not isinstance(described, dict):
        if described is not None:
            _log.warning("isohost: the scan's model folders of %s are unreadable", pack_dir)
        return
    for name, held in described.items():
        if _known(name):
            continue
        entry = _entry(held)
        if entry is None:
            _log.warning("isohost: model folder '%s' of %s is described in a shape the adapter "
                         "cannot read; its loaders offer the files the scan saw", name, pack_dir)
            continue
        folder_paths.folder_names_and_paths[_mapped(name)] = entry


def _known(name):
    return _mapped(name) in folder_paths.folder_names_and_paths


def _mapped(name):
    # The name folder_paths keeps it under ("clip" is "text_encoders"), where it maps names.
    return getattr(folder_paths, "map_legacy", lambda n: n)(name)


def _entry(held):
    """(paths, extensions) as folder_paths keeps a folder, from the scan's [paths, extensions];
    None where it is not in that shape."""
    if not (isinstance(held, list) and len(held) == 2
            and all(isinstance(part, list) for part in held)
            and all(isinstance(item, str) for part in held for item in part)):
        return None
    return list(held[0]), set(held[1])
