"""A worker's failure as ComfyUI reports a node's (docs/comfyui.md, "Errors").

ComfyUI's execution_error names the exception's class (module and qualified name), its message
and the host's traceback. So a worker's exception becomes an exception here whose class has the
worker's module and name, and whose message carries the worker's message and traceback (the
host's own frames would say nothing about where the node failed). Classes are made once per
name."""

import isohost

_classes = {}


class IsolatedNodeError(Exception):
    """Raised in ComfyUI for a failure of a node that runs in an isolated worker."""


def _class_for(type_name, extra_base=None):
    key = (type_name, extra_base)
    cls = _classes.get(key)
    if cls is None:
        module, dot, qualname = type_name.rpartition(".")
        bases = (IsolatedNodeError,) + ((extra_base,) if extra_base else ())
        cls = type(qualname, bases, {"__module__": module if dot else "builtins",
                                     "__qualname__": qualname})
        _classes[key] = cls
    return cls


def node_error(error, node, env):
    """The exception to raise in ComfyUI for isohost `error` from `node` in `env`'s worker."""
    if isinstance(error, isohost.WorkerException) and error.type_name:
        type_name, message = error.type_name, error.detail.get("message", "")
        where = "\n\nIn isolated environment '%s':\n%s" % (env, error.traceback_text or "")
    else:
        # The worker died, timed out, or could not be started: isohost's own error kind.
        type_name, message, where = "isohost." + error.kind, error.message, ""
    oom = None
    if type_name.endswith("OutOfMemoryError"):
        import comfy.model_management

        oom = comfy.model_management.OOM_EXCEPTION  # ComfyUI then unloads its models, as in process
    return _class_for(type_name, oom)("%s%s" % (message, where))
