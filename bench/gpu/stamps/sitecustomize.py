"""Times values.encode and values.decode in every Python process that starts with this
directory on PYTHONPATH and ISOHOST_STAMPS set (a directory): each such process appends
'encode MS' and 'decode MS' lines to ISOHOST_STAMPS/PID.log. For bench/gpu/node_ab.py only:
it splits an isolated node's time into both sides' encoding and decoding."""

import importlib.abc
import importlib.util
import os
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
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _lines.append("%s %.4f\n" % (name, (time.perf_counter() - start) * 1e3))
            if len(_lines) >= 20:
                _flush()

    setattr(module, name, timed)


class _Loader(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        _timed(module, "encode")
        _timed(module, "decode")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "isohost_worker.values":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        spec.loader = _Loader(spec.loader)
        return spec


if os.environ.get("ISOHOST_STAMPS"):
    sys.meta_path.insert(0, _Finder())
