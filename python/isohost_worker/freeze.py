"""Import-time objects out of the collector's lists (docs/sleep.md, "The walk").

Importing torch leaves some 150,000 objects (functions, classes, dicts) that live as long as
the process. Sleep walks every object the collector tracks to find the storages, and that walk
over torch's own objects took 24 ms on the H100, more than copying a GiB over the bus. So once
torch's import has finished, the worker collects, remembers the tensors and storages alive then
(sleep.remember_frozen: the walk still sees them) and calls gc.freeze(): gc.get_objects() no
longer returns what was frozen, and the collector no longer visits it. No card memory is among
it: torch initialises CUDA lazily, after its import. What is frozen is never collected as cyclic
garbage, which is why it happens at that moment, when what is alive is import-time state, as
in a zygote after its preload (zygote.py freezes the same way).

Standard library only; torch is never imported here.
"""

import gc
import sys

from isohost_worker import sleep


def after_torch_import():
    """Freeze once torch's import completes, in this process; nothing if torch is already
    imported (a zygote's child: its zygote froze)."""
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchFinder())


def freeze_imported():
    """Collect, remember the tensors and storages among the live objects, freeze them all."""
    gc.collect()
    # No other thread may make an object between the list and the freeze: one it made would be
    # frozen without being remembered. Neither call lets the GIL go; the interval keeps the
    # interpreter from switching between them.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        objects = gc.get_objects()
        gc.freeze()
    finally:
        sys.setswitchinterval(interval)
    torch = sys.modules.get("torch")
    if torch is not None:
        sleep.remember_frozen(torch, objects)


class _TorchFinder:
    """A meta path finder that finds nothing itself: asked for torch, it gets torch's spec from
    the finders after it and has the spec's loader call freeze_imported() once torch's module
    has run. Then it leaves sys.meta_path."""

    def __init__(self):
        self._looking = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._looking:
            return None
        self._looking = True
        try:
            spec = _spec_from_the_others(self, name, path, target)
        finally:
            self._looking = False
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            try:
                run(module)
            finally:
                vars(loader).pop("exec_module", None)
            # Imported: once is enough. A failed import leaves this finder for the next try.
            _leave(self)
            freeze_imported()

        try:
            loader.exec_module = exec_module
        except AttributeError:
            pass  # a loader that takes no attribute: torch is imported, nothing is frozen
        return spec


def _spec_from_the_others(me, name, path, target):
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is me or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            return spec
    return None


def _leave(finder):
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass
