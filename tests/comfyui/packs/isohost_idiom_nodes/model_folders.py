"""A pack's own model folders, registered at import as Impact Pack registers "sams" and
"ultralytics", and loaders that list their files each time ComfyUI asks
(test_idioms_model_folders.py).
Both folders are under ComfyUI's models directory (the base directory's, which the worker
shares), each made at import with a first model file; one registered through
folder_paths.add_model_folder_path (every file), one written into folder_names_and_paths with
its extensions (.pt files only)."""

import os

import folder_paths

ADDED = "isohost_idiom_models"
OWN = "isohost_idiom_pt_models"


def _make(name):
    """The folder `name` under models/, holding m1.pt (a few bytes)."""
    directory = os.path.join(folder_paths.models_dir, name)
    os.makedirs(directory, exist_ok=True)
    first = os.path.join(directory, "m1.pt")
    if not os.path.exists(first):
        with open(first, "wb") as f:
            f.write(b"isohost")
    return directory


folder_paths.add_model_folder_path(ADDED, _make(ADDED))
folder_paths.folder_names_and_paths[OWN] = ([_make(OWN)], {".pt"})


def _loader(folder):
    """A loader of `folder`'s files: reports the full path and size of the chosen one, as the
    process running it finds them."""

    class Loader:
        CATEGORY = "isohost_idioms"
        RETURN_TYPES = ()
        OUTPUT_NODE = True
        FUNCTION = "load"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"name": (folder_paths.get_filename_list(folder),)}}

        def load(self, name):
            path = folder_paths.get_full_path(folder, name) or ""
            size = os.path.getsize(path) if path else -1
            return {"ui": {"path": [path], "size": [size]}}

    return Loader


NODE_CLASS_MAPPINGS = {
    "AddedFolderLoaderIdiomIsohost": _loader(ADDED),
    "OwnFolderLoaderIdiomIsohost": _loader(OWN),
}
