"""ComfyUI's own nodes outside nodes.py (comfy_extras, comfy_api_nodes) in a worker's
`nodes.NODE_CLASS_MAPPINGS`. In the host's ComfyUI they are all there, and packs look them up
(loop and switch nodes by the prompt's class types, a node calling SolidMask); a worker imports
ComfyUI's `nodes` alone, since importing all of them would add seconds to each start. So the
worker's table looks a missing name up in the host's list of them ({node name: module},
comfy_env settings "builtin_node_modules") and imports that one module then, registering its
nodes as ComfyUI does. A pack that lists the whole table (iterates it, its keys, values or
items, or takes its length) gets every node as in ComfyUI: the modules not loaded yet are all
imported first, once (seconds), so nothing is added to the table while it is iterated."""

import importlib
import logging
import sys
import time

_modules = {}  # node name -> module, as the host's settings listed them
_failed = {}  # module -> why it could not be imported here (logged once)
_loaded = set()  # modules imported and registered


def set_modules(table):
    """The host's {node name: module} of its nodes outside nodes.py."""
    _modules.clear()
    _modules.update(table or {})
    _loaded.clear()


class NodeClassMappings(dict):
    """`nodes.NODE_CLASS_MAPPINGS` in a worker: a lookup (`[]`, `in`, `get`) of a built-in node
    that is not loaded yet imports its module first."""

    def __missing__(self, name):
        if _load_module_of(self, name):
            return dict.__getitem__(self, name)
        raise KeyError(name)

    def __contains__(self, name):
        return dict.__contains__(self, name) or _load_module_of(self, name)

    def get(self, name, default=None):
        return self[name] if name in self else default

    def __iter__(self):
        _load_all(self)
        return dict.__iter__(self)

    def __len__(self):
        _load_all(self)
        return dict.__len__(self)

    def keys(self):
        _load_all(self)
        return dict.keys(self)

    def values(self):
        _load_all(self)
        return dict.values(self)

    def items(self):
        _load_all(self)
        return dict.items(self)

    def copy(self):
        _load_all(self)
        return dict(dict.items(self))


def install(nodes):
    """Makes `nodes.NODE_CLASS_MAPPINGS` a NodeClassMappings (with what it holds), before any
    pack takes the table from the module."""
    table = nodes.NODE_CLASS_MAPPINGS
    if type(table) is dict:
        nodes.NODE_CLASS_MAPPINGS = NodeClassMappings(table)


def _load_all(table):
    """Imports every listed module not imported yet into `table` (each tried once)."""
    waiting = {}  # module -> one of its node names
    for name, module_name in _modules.items():
        if module_name not in _failed and module_name not in _loaded:
            waiting.setdefault(module_name, name)
    if not waiting:
        return
    start = time.monotonic()
    for name in waiting.values():
        _load_module_of(table, name)
    logging.info("isohost: a pack lists ComfyUI's node table: imported %d module(s) of ComfyUI's "
                 "own nodes in %.1f s", len(waiting), time.monotonic() - start)


def _load_module_of(table, name):
    """Imports the module of built-in node `name` and registers its nodes in `table`; whether
    `name` is there now."""
    module_name = _modules.get(name)
    if module_name is None or module_name in _failed:
        return False
    if module_name in _loaded:
        return dict.__contains__(table, name)
    try:
        classes = _classes(importlib.import_module(module_name))
    except Exception as e:
        _failed[module_name] = "%s: %s" % (type(e).__name__, e)
        logging.warning("isohost: ComfyUI's node %s (module %s) is not available in this "
                        "environment: %s", name, module_name, _failed[module_name])
        return False
    nodes = sys.modules.get("nodes")
    for node_name, cls in classes.items():
        # Over a pack's node of the same name: ComfyUI loads its own nodes first and skips a
        # custom node that takes one's name.
        dict.__setitem__(table, node_name, cls)
        try:
            cls.RELATIVE_PYTHON_MODULE = module_name  # as ComfyUI's load_custom_node sets it
        except (AttributeError, TypeError):
            pass
    _loaded.add(module_name)
    names = getattr(sys.modules.get(module_name), "NODE_DISPLAY_NAME_MAPPINGS", None)
    if nodes is not None and isinstance(names, dict):
        nodes.NODE_DISPLAY_NAME_MAPPINGS.update(names)
    return dict.__contains__(table, name)


def _classes(module):
    from isohost_comfy_worker import packs  # it imports this module

    return packs.module_node_classes(module)
