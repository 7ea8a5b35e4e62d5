"""Idioms of popular packs, each in a module of its own (tests/comfyui/test_idioms*.py): run
isolated and in process side by side, they must behave alike."""

from . import (async_nodes, env_library_objects, held_objects, input_files, interrupting,
               mappings, model_folders, output, server_module)

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
for _module in (mappings, server_module, held_objects, model_folders, interrupting, input_files,
                env_library_objects, output, async_nodes):
    NODE_CLASS_MAPPINGS.update(_module.NODE_CLASS_MAPPINGS)
    NODE_DISPLAY_NAME_MAPPINGS.update(getattr(_module, "NODE_DISPLAY_NAME_MAPPINGS", {}))
