"""Importing a pack in a worker the way ComfyUI imports a custom node directory (nodes.py,
load_custom_node): its __init__.py as a module named after the directory, registered in
sys.modules first, relative imports resolved inside it. Imported once per worker."""

import importlib.util
import os
import sys

from isohost_comfy_worker import server_loop

_loaded = {}
# The packs being imported, innermost last: what a pack registers at import (an HTTP route,
# routes.py) is its own.
_importing = []


def importing():
    """The directory of the pack being imported now, or None."""
    return _importing[-1] if _importing else None


def load(pack_dir):
    """The pack's module, imported at most once per worker."""
    pack_dir = os.path.abspath(pack_dir)
    module = _loaded.get(pack_dir)
    if module is not None:
        return module
    if os.path.isfile(pack_dir):
        name = os.path.splitext(os.path.basename(pack_dir))[0]
        spec = importlib.util.spec_from_file_location(name, pack_dir)
    else:
        name = pack_dir.replace(".", "_x_")
        init = os.path.join(pack_dir, "__init__.py")
        if not os.path.isfile(init):
            raise ImportError("%s has no __init__.py: not a ComfyUI node pack" % pack_dir)
        spec = importlib.util.spec_from_file_location(name, init,
                                                      submodule_search_locations=[pack_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _importing.append(pack_dir)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        _importing.pop()
        if not _importing:  # what the pack scheduled on the server loop at import runs now
            server_loop.start()
    _loaded[pack_dir] = module
    return module


def node_classes(pack_dir):
    """{node name: class} of the pack: NODE_CLASS_MAPPINGS (ComfyUI's V1 nodes), or the nodes
    of its comfy_entrypoint() extension (the class-based comfy_api schema)."""
    module = load(pack_dir)
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    if mappings is not None:
        return dict(mappings)
    entrypoint = getattr(module, "comfy_entrypoint", None)
    if entrypoint is None:
        return {}
    import asyncio
    import inspect

    extension = entrypoint()
    if inspect.isawaitable(extension):
        extension = asyncio.run(extension)
    node_list = extension.get_node_list()
    if inspect.isawaitable(node_list):
        node_list = asyncio.run(node_list)
    return {cls.GET_SCHEMA().node_id: cls for cls in node_list}
