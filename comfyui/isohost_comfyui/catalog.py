"""Each isolated pack's nodes as its worker describes them, cached on disk (docs/comfyui.md,
"Scan").

Describing a pack means importing it in its worker, which costs that worker's start. So the
description is kept in a file, keyed by what could change it: the pack's Python files (path,
size, modification time), its environment's interpreter and settings, the scan's own code (the
worker side's files, likewise) and this file's format. A ComfyUI start whose packs have not
changed starts no worker at all. What the key does not see: packages upgraded in the pack's
environment (touch a pack file, or delete the cache file, to scan again).
"""

import hashlib
import json
import logging
import os

FORMAT = 10


def fingerprint(pack_dir, env_config):
    """A digest of everything a pack's description depends on."""
    digest = hashlib.sha256()
    digest.update(json.dumps([FORMAT, env_config], sort_keys=True, default=str).encode())
    _add_files(digest, pack_dir)
    import isohost_comfy_worker  # the scan's code, beside the isohost package

    _add_files(digest, os.path.dirname(os.path.abspath(isohost_comfy_worker.__file__)))
    return digest.hexdigest()


def _add_files(digest, top):
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".toml", ".json")):
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                digest.update(("%s %d %d\n" % (os.path.relpath(path, top), st.st_size,
                                               st.st_mtime_ns)).encode())


def _well_formed(packs, path):
    """The entries of a cache file that have the shape this module writes; a file edited by
    hand or cut short is logged, and its other entries scanned again."""
    if not isinstance(packs, dict):
        logging.warning("isohost: the scan cache %s holds no table of packs; scanning again", path)
        return {}
    kept = {pack: entry for pack, entry in packs.items()
            if isinstance(entry, dict) and isinstance(entry.get("fingerprint"), str)
            and isinstance(entry.get("description"), dict)
            and isinstance(entry["description"].get("nodes"), dict)}
    if len(kept) < len(packs):
        logging.warning("isohost: the scan cache %s has %d malformed entr%s; scanning those "
                        "packs again", path, len(packs) - len(kept),
                        "y" if len(packs) - len(kept) == 1 else "ies")
    return kept


class Catalog:
    """The cache file: {pack_dir: {"fingerprint", "description"}}."""

    def __init__(self, path):
        self.path = path
        self._entries = {}
        try:
            with open(path) as f:
                entries = json.load(f)
            if isinstance(entries, dict) and entries.get("format") == FORMAT:
                self._entries = _well_formed(entries.get("packs"), path)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            logging.warning("isohost: the scan cache %s is unreadable (%s); scanning again",
                            path, e)

    def get(self, pack_dir, fingerprint_):
        entry = self._entries.get(pack_dir)
        if entry and entry.get("fingerprint") == fingerprint_:
            return entry["description"]
        return None

    def put(self, pack_dir, fingerprint_, description):
        self._entries[pack_dir] = {"fingerprint": fingerprint_, "description": description}

    def save(self):
        temporary = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            with open(temporary, "w") as f:
                json.dump({"format": FORMAT, "packs": self._entries}, f)
            os.replace(temporary, self.path)
        except OSError as e:
            logging.warning("isohost: cannot write the scan cache %s: %s", self.path, e)
            try:
                os.unlink(temporary)
            except OSError:
                pass
