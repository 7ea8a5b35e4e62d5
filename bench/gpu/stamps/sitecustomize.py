"""Times a few functions of the worker's runtime and the Python host in every Python process that
starts with this directory on PYTHONPATH and ISOHOST_STAMPS set (a directory): values.encode
and values.decode (either side), calls.call (a worker's call, its arguments decoded and the
function run), a large buffer's way into its memfd (values._memfd_with) and the copy itself
(parallel_copy.copy, into a spare's kept mapping), the ComfyUI worker's nodes.run (the node
with ComfyUI's state around it), and the steps of a call's two hops (_TIMED). Each process appends
'NAME MS MINOR_FAULTS START END' lines (START and END on CLOCK_MONOTONIC, in seconds, one clock
for every process) to ISOHOST_STAMPS/PID.log. For bench/gpu/node_ab.py only: it
splits an isolated node's time."""

import importlib.abc
import importlib.util
import os
import resource
import sys
import threading
import time

_lines = []
_flushing = threading.Lock()  # the worker's side lane stamps its reads too


def _flush():
    with _flushing:
        taken = _lines[:]
        del _lines[:len(taken)]
        with open(os.path.join(os.environ["ISOHOST_STAMPS"], "%d.log" % os.getpid()), "a") as f:
            f.write("".join(taken))


def _timed(module, path, stamp):
    """Wraps module.PATH (a function, or Class.method) so that each call appends a STAMP line;
    where the module has no such thing (an older runtime, timed beside a newer one), nothing."""
    owner_path, _, name = path.rpartition(".")
    owner = module
    for part in filter(None, owner_path.split(".")):
        owner = getattr(owner, part, None)
    if not hasattr(owner, name):
        return
    static = isinstance(owner.__dict__.get(name), staticmethod)
    function = getattr(owner, name)

    def timed(*args, **kwargs):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            end = time.monotonic()
            _lines.append("%s %.4f %d %.6f %.6f\n" % (
                stamp, (end - start) * 1e3,
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults, start, end))
            if len(_lines) >= 20:
                _flush()

    setattr(owner, name, staticmethod(timed) if static else timed)


# What is timed, by module: {function or Class.method: its stamp's name}. A hop between the two
# processes is split by the host's submit (Host._core_call: the call's request handed to the
# core), the worker's read of it (frames.Reader.read, whose end is the request read and
# parsed), the worker's reply (replies.encode, frames.send) and the host's wait for it
# (Host._wait, whose end is the caller back in Python with the outcome; Host._finish).
_TIMED = {"isohost_worker.values": {"encode": "encode", "decode": "decode",
                                    "_memfd_with": "memfd", "_wait_ready": "ready"},
          "isohost_worker.parallel_copy": {"copy": "copy", "start": "copy_start",
                                           "Started.finish": "copy_finish"},
          "isohost_worker.calls": {"call": "call"},
          "isohost_comfy_worker.nodes": {"run": "run"},
          "isohost_worker.frames": {"send": "send", "Reader.read": "read"},
          "isohost_worker.replies": {"encode": "reply"},
          "isohost": {"Host._core_call": "submit", "Host._wait": "wait", "Host._finish": "finish"}}


class _Loader(importlib.abc.Loader):
    def __init__(self, real, names):
        self.real = real
        self.names = names

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        for path, stamp in self.names.items():
            _timed(module, path, stamp)


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
