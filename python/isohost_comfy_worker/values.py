"""What may cross between the host's ComfyUI and a worker (docs/comfyui.md, "Values").

IMAGE, MASK and LATENT are CPU tensors (memfds, no copy on the receiving side) or CUDA tensors
(through host memory), CONDITIONING a list of [tensor, dict], and lists, dicts, strings and
numbers travel as they are. A model (MODEL, CLIP, VAE, CONTROL_NET, an nn.Module, anything that
holds one) never crosses: copying gigabytes of weights into another process unasked is worse
than failing, so it fails with ModelCannotCross, naming the input or output. An object of a
class of a pack's own (Impact Pack's SEGS, a pack's PIPE), or of a library installed in the
pack's environment alone (insightface's FaceAnalysis), cannot cross to the host either: the
host's ComfyUI cannot import its module to unpickle it (worker_only_class)."""

import os
import sys
import types

# Classes whose objects are models, by module and name: no import needed to recognise them.
_MODEL_CLASSES = {
    ("comfy.model_patcher", "ModelPatcher"), ("comfy.sd", "CLIP"), ("comfy.sd", "VAE"),
    ("comfy.controlnet", "ControlBase"), ("comfy.controlnet", "ControlNet"),
    ("comfy.controlnet", "ControlLora"), ("comfy.controlnet", "T2IAdapter"),
    ("comfy.clip_vision", "ClipVisionModel"), ("comfy.sd", "StyleModel"),
    ("torch.nn.modules.module", "Module"),
}


class ModelCannotCross(TypeError):
    """A model was about to be copied between the host's ComfyUI and an isolated worker."""


class ObjectCannotCross(TypeError):
    """An object of a class of a pack's own was to reach a node outside the pack's environment,
    which cannot import the pack's modules to unpickle it. Raised in the host
    (isohost_comfyui.held) for the refusal the worker sends in its place (held.py)."""


# A type that matches every other (the "*" of the many packs that define `class AnyType(str)`
# with a `__ne__` that is never true, comfy_api's io.AnyType): its class may be a pack's, which
# the other side cannot import, so it crosses as {WILDCARD: its name} and is a Wildcard there.
WILDCARD = "isohost_wildcard"
_TYPE_PROBE = "isohost-type-probe"  # a type name no pack declares


class Wildcard(str):
    """A type that matches every other, as ComfyUI compares types: `received != expected`, and
    Python asks a str subclass on either side."""

    def __ne__(self, other):
        return False

    __hash__ = str.__hash__


def type_name(value):
    """A type (a str) as it crosses: its plain name, or {WILDCARD: name} where it matches every
    other (a pack's str subclass may raise anything when compared: then it does not)."""
    if type(value) is not str:
        try:
            if not (value != _TYPE_PROBE):
                return {WILDCARD: str.__str__(value)}
        except Exception:
            pass
    return str.__str__(value)


def wildcard_again(value):
    """`value` with {WILDCARD: name} a Wildcard again."""
    if isinstance(value, dict) and len(value) == 1 and WILDCARD in value:
        return Wildcard(value[WILDCARD])
    return value


class _Found(Exception):
    pass


def model_kind(value):
    """The name of the model class `value` is (or derives from), or None."""
    for cls in type(value).__mro__:
        if (cls.__module__, cls.__name__) in _MODEL_CLASSES:
            return "%s.%s" % (cls.__module__, cls.__name__)
    return None


def find_model(value):
    """(where, class name) of the first model in `value`, or None. `where` is "" for the value
    itself, a path such as "[0]['model']" inside lists, tuples and dicts, or "held by a
    spandrel.ImageModelDescriptor" for a model that an object of another class holds (an upscale
    model's descriptor, a pack's wrapper): anything pickling would reach and copy."""
    if isinstance(value, (str, int, float, bool, bytes, type(None))) or _is_array(value):
        return None  # the common inputs, at once
    found = _find_in_containers(value, 0)
    if found is None:
        found = _find_held(value)
    return found


def _is_array(value):
    """A torch tensor or a numpy array, whose contents hold no model."""
    return hasattr(value, "shape") and type(value).__module__.split(".")[0] in ("torch", "numpy")


def _find_held(value):
    """The first model pickling `value` would meet (a dry run), and the class holding it."""
    found, holders = _dry_run(value, _raise_if_model)
    if found is None:
        return None
    return "held by a %s" % (holders[0] if holders else type(value).__name__), found


def _raise_if_model(obj):
    kind = model_kind(obj)
    if kind is not None:
        raise _Found(kind)


class _Nowhere:
    def write(self, data):
        return len(data)


_NOWHERE = _Nowhere()
_dry_run_class = None


def _out_of_band(buffer):
    return False


def _dry_run(value, check):
    """Pickles `value` to nowhere, copying nothing: `check` sees each object pickling reduces
    and raises _Found to stop; arrays and tensors are then passed over, their contents unread.
    Returns (what `check` found, or None; the class of the first object of a class not
    built in, the holder, for a message). A value that cannot be pickled at all is left to
    isohost's own error."""
    global _dry_run_class
    if _dry_run_class is None:
        import pickle

        class DryRun(pickle.Pickler):
            def __init__(self, check):
                super().__init__(_NOWHERE, protocol=5, buffer_callback=_out_of_band)
                self.check = check
                self.holders = []

            def reducer_override(self, obj):
                self.check(obj)
                if _is_array(obj):
                    return int, ()  # passed over, its contents unread
                cls = type(obj)
                if not self.holders and cls.__module__ != "builtins":
                    self.holders.append("%s.%s" % (cls.__module__, cls.__qualname__))
                return NotImplemented

        _dry_run_class = DryRun
    pickler = _dry_run_class(check)
    try:
        pickler.dump(value)
    except _Found as found:
        return str(found), pickler.holders
    except Exception:
        pass
    return None, pickler.holders


def worker_only_class(value):
    """The name of the first class or function that pickling `value` refers to and that only
    this worker can import (_only_here): of a pack's own module (a namedtuple of the pack's, its
    PIPE object, a plain class of its utils module) or of a library the host lacks; None if
    none. The host's ComfyUI could not unpickle such a value. A dry run of pickling, as for
    models."""
    if isinstance(value, (str, int, float, bool, bytes, type(None))) or _is_array(value):
        return None  # the common outputs, at once
    return _dry_run(value, _raise_if_only_here)[0]


def _raise_if_only_here(obj):
    # What pickling refers to by module and name, for the other side to import: classes (an
    # object's own, through its reduction) and functions.
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        module = getattr(obj, "__module__", None) or ""
        if _in_a_pack(module) or _not_in_host(module):
            raise _Found("%s.%s" % (_readable(module), obj.__qualname__))


def _in_a_pack(module):
    """Whether module `module` is a pack's own, which only its worker can import: the pack's
    module or a submodule (named after the pack's path, as ComfyUI names it), or a module loaded
    from a file in the pack's directory (a pack that puts a directory of its own on sys.path, as
    Impact Pack does for `impact.core`)."""
    from isohost_comfy_worker import packs  # the worker's: the host never asks

    loaded = packs.loaded()
    if not loaded or not module:
        return False
    path = getattr(sys.modules.get(module), "__file__", None) or ""
    for pack_dir, pack in loaded.items():
        root = pack.__name__
        if (module == root or module.startswith(root + ".") or path == pack_dir
                or path.startswith(pack_dir + os.sep)):
            return True
    return False


def _not_in_host(module):
    """Whether the top-level package of module `module` is none that the host's process can
    import (comfy_env.host_modules): a library of the pack's environment alone."""
    from isohost_comfy_worker import comfy_env

    importable = comfy_env.host_modules()
    return bool(importable and module) and module.partition(".")[0] not in importable


def _readable(module):
    """A module named after its pack's path as the pack's directory name and the rest
    ("/x/custom_nodes/impact_pack.utils" -> "impact_pack.utils")."""
    root, dot, rest = module.partition(".")
    return os.path.basename(root) + dot + rest


def _find_in_containers(value, depth):
    kind = model_kind(value)
    if kind is not None:
        return "", kind
    if depth > 8:
        return None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _find_in_containers(item, depth + 1)
        if found is not None:
            return "[%r]%s" % (key, found[0]), found[1]
    return None


def refuse_models(result, node, names):
    """Raises ModelCannotCross if the node's result holds a model."""
    outputs = result.get("result", ()) if isinstance(result, dict) else result
    if not isinstance(outputs, (list, tuple)):
        outputs = (outputs,)
    for index, output in enumerate(outputs):
        found = find_model(output)
        if found is not None:
            name = names[index] if index < len(names) else "#%d" % index
            raise ModelCannotCross(
                "output %d (%s) of %s is a %s%s: a model stays in the process that holds it, "
                "and this node runs in an isolated worker; run the nodes that use it in the "
                "same environment" % (index, name, node, found[1], where(found[0])))


def where(path):
    """The words for find_model's `where`, for a message."""
    if not path:
        return ""
    return " (%s)" % path if path.startswith("held by") else " (at %s)" % path
