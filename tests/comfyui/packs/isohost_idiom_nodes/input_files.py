"""Nodes that list ComfyUI's input directory each time ComfyUI asks for their inputs
(test_idioms_input_files.py): one as ComfyUI's LoadImage does (its files, images only, sorted),
one as video loaders do (an extension list of its own, files in subfolders too, after a "none"),
neither with a VALIDATE_INPUTS, so that ComfyUI checks the chosen name against the list."""

import os

import folder_paths

VIDEO_EXTENSIONS = ("webm", "mp4", "mkv", "gif", "mov")


class LoadImageIdiomIsohost:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        input_dir = folder_paths.get_input_directory()
        files = [f for f in os.listdir(input_dir) if os.path.isfile(os.path.join(input_dir, f))]
        files = folder_paths.filter_files_content_types(files, ["image"])
        return {"required": {"image": (sorted(files), {"image_upload": True})}}

    def load(self, image):
        return _found(image)


class LoadVideoIdiomIsohost:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        input_dir = folder_paths.get_input_directory()
        files = []
        for root, _, names in os.walk(input_dir):
            for name in names:
                if name.split(".")[-1].lower() in VIDEO_EXTENSIONS:
                    files.append(os.path.relpath(os.path.join(root, name), input_dir))
        return {"required": {"video": (["none"] + sorted(files),)}}

    def load(self, video):
        return _found(video)


def _found(name):
    """The chosen file's size, as the process running the node finds it."""
    path = os.path.join(folder_paths.get_input_directory(), name)
    return {"ui": {"size": [os.path.getsize(path) if os.path.isfile(path) else -1]}}


NODE_CLASS_MAPPINGS = {
    "LoadImageIdiomIsohost": LoadImageIdiomIsohost,
    "LoadVideoIdiomIsohost": LoadVideoIdiomIsohost,
}
