"""Importing a pack in a worker the way ComfyUI imports a custom node directory (nodes.py,
load_custom_node): its __init__.py as a module named after the directory, registered in
sys.modules first, relative imports resolved inside it. Imported once per worker."""

import asyncio
import concurrent.futures
import importlib.util
import inspect
import logging
import os
import sys

from isohost_comfy_worker import builtin_nodes, server_loop

_loaded = {}
# The packs being imported, innermost last: what a pack registers at import (an HTTP route,
# routes.py) is its own.
_importing = []


def importing():
    """The directory of the pack being imported now, or None."""
    return _importing[-1] if _importing else None


def loaded():
    """{pack directory: its module} of the packs this worker has imported."""
    return dict(_loaded)


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
    register_in_nodes()
    return module


def register_in_nodes():
    """The loaded packs' nodes in ComfyUI's `nodes.NODE_CLASS_MAPPINGS` (and their display names
    in NODE_DISPLAY_NAME_MAPPINGS), as ComfyUI's load_custom_node puts every pack's: loop and
    switch nodes look up the classes of the prompt's nodes there; the table made one that finds
    ComfyUI's other built-in nodes too (builtin_nodes). Where nothing has imported `nodes` yet,
    once something does (_NodesImported): called before the first pack is imported, so that a
    pack taking the table from `nodes` as it imports gets that one."""
    nodes = sys.modules.get("nodes")
    if nodes is None or not hasattr(nodes, "NODE_CLASS_MAPPINGS"):
        _NodesImported.install()
        return
    builtin_nodes.install(nodes)
    for pack_dir, module in _loaded.items():
        if pack_dir in _registered:
            continue
        _registered.add(pack_dir)
        try:
            classes = node_classes(pack_dir)
        except Exception as e:  # the pack's own calls fail where it is used, with their cause
            logging.warning("isohost: the nodes of %s are not in ComfyUI's `nodes` module in "
                            "this worker: %s: %s", pack_dir, type(e).__name__, e)
            continue
        for name, cls in classes.items():  # a built-in node keeps its name, as in ComfyUI
            nodes.NODE_CLASS_MAPPINGS.setdefault(name, cls)
        nodes.NODE_DISPLAY_NAME_MAPPINGS.update(
            getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {})


_registered = set()  # the packs whose nodes are in `nodes` already


class _NodesImported:
    """An import hook that registers the loaded packs' nodes once ComfyUI's `nodes` module is
    imported (a pack may import it in a node's function), then removes itself."""

    @classmethod
    def install(cls):
        if not any(isinstance(finder, cls) for finder in sys.meta_path):
            sys.meta_path.insert(0, cls())

    def find_spec(self, name, path=None, target=None):
        if name != "nodes":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        register_in_nodes()


def node_classes(pack_dir):
    """{node name: class} of the pack (module_node_classes)."""
    return module_node_classes(load(pack_dir))


def module_node_classes(module):
    """{node name: class} of a pack's or ComfyUI's module: NODE_CLASS_MAPPINGS (ComfyUI's V1
    nodes), or the nodes of its comfy_entrypoint() extension (the class-based comfy_api
    schema)."""
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    if mappings is not None:
        return dict(mappings)
    entrypoint = getattr(module, "comfy_entrypoint", None)
    if entrypoint is None:
        return {}
    node_list = resolved(resolved(entrypoint()).get_node_list())
    return {cls.GET_SCHEMA().node_id: cls for cls in node_list}


def resolved(value):
    """`value`, awaited where it is awaitable (an async node's result, a comfy_entrypoint's): on
    a loop of its own, in a thread of its own where this thread runs one already (a lookup inside
    an async node's run)."""
    if not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(value))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _awaited(value)).result()


async def _awaited(awaitable):
    return await awaitable
