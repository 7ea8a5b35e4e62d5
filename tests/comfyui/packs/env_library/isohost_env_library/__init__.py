"""A library installed in an isolated pack's environment alone (the idiom pack's
env_library_objects module; conftest.idiom_servers puts this folder on that environment's
path, not on ComfyUI's), as insightface is for a face-swap pack: ComfyUI's process cannot
import it, so it cannot unpickle its objects."""


class Detector:
    """A stand-in for a library's model object that a pack's nodes pass between them."""

    def __init__(self, label):
        self.label = label
