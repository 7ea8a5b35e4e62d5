"""Idioms of popular packs, each in a module of its own (tests/comfyui/test_idioms_*.py): run
isolated and in process side by side, they must behave alike."""

import importlib

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}

for _name in ("mappings", "server_module", "held_objects", "model_folders", "interrupting"):
    try:
        _module = importlib.import_module("." + _name, __name__)
    except ModuleNotFoundError as e:
        if e.name != __name__ + "." + _name:
            raise
        continue
    NODE_CLASS_MAPPINGS.update(_module.NODE_CLASS_MAPPINGS)
    NODE_DISPLAY_NAME_MAPPINGS.update(getattr(_module, "NODE_DISPLAY_NAME_MAPPINGS", {}))
