"""Times a few functions of the worker's runtime in every Python process that starts with this
directory on PYTHONPATH and ISOHOST_STAMPS set (a directory): values.encode and values.decode
(either side), calls.call (a worker's call, its arguments decoded and the function run) and
the ComfyUI worker's nodes.run (the node with ComfyUI's state around it). Each process appends
'NAME MS MINOR_FAULTS START END' lines (START and END on CLOCK_MONOTONIC, in seconds, one clock
for every process) to ISOHOST_STAMPS/PID.log. For bench/gpu/node_ab.py only: it
splits an isolated node's time."""

import importlib.abc
import importlib.util
import os
import resource
import sys
import time

_lines = []


def _flush():
    with open(os.path.join(os.environ["ISOHOST_STAMPS"], "%d.log" % os.getpid()), "a") as f:
        f.write("".join(_lines))
    _lines.clear()


def _timed(module, name):
    function = getattr(module, name)

    def timed(*args, **kwargs):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            end = time.monotonic()
            _lines.append("%s %.4f %d %.6f %.6f\n" % (
                name, (end - start) * 1e3,
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults, start, end))
            if len(_lines) >= 20:
                _flush()

    setattr(module, name, timed)


# The functions timed, by module.
_TIMED = {"isohost_worker.values": ("encode", "decode"), "isohost_worker.calls": ("call",),
          "isohost_comfy_worker.nodes": ("run",)}


class _Loader(importlib.abc.Loader):
    def __init__(self, real, names):
        self.real = real
        self.names = names

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        for name in self.names:
            _timed(module, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _TIMED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        spec.loader = _Loader(spec.loader, _TIMED[fullname])
        return spec


if os.environ.get("ISOHOST_STAMPS"):
    sys.meta_path.insert(0, _Finder())
