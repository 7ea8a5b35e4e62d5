"""The `call` op: resolve "module:qualified.name", call it, hand back what it returns."""

import importlib
import sys

from isohost_worker import frames, interrupts, sleep
from isohost_worker.errors import ARGUMENTS, CALL, DECODE, IMPORT, LOOKUP, Failure


def call(request):
    _wake_first()
    module_name, path, args, kwargs = _parse(request)
    function = _resolve(module_name, path)
    try:
        with interrupts.armed(request.get("id")):
            return function(*args, **kwargs)
    except BaseException as e:  # SystemExit too: a call must not end the worker
        raise Failure(CALL, e, _beyond_here(e)) from None


def _wake_first():
    # A sleeping worker's tensors have no memory behind them; the host wakes it before a call,
    # and this covers a host that did not.
    try:
        sleep.wake_before("a call")
    except BaseException as e:
        raise Failure(CALL, e) from None


def _parse(request):
    target = request.get("target")
    args = request.get("args", [])
    kwargs = request.get("kwargs", {})
    if "pickle" in request:
        args, kwargs = _unpickle_arguments(request)
    if not isinstance(target, str):
        raise Failure(ARGUMENTS, TypeError("target must be a string, not %s" % _json_type(target)))
    module_name, colon, qualname = target.partition(":")
    path = qualname.split(".")
    if not colon or not module_name or module_name.startswith(".") or not all(path):
        raise Failure(ARGUMENTS, ValueError(
            "target %r is not of the form 'module:name' or 'module:Class.method'" % target))
    if not isinstance(args, list):
        raise Failure(ARGUMENTS, TypeError("args must be an array, not %s" % _json_type(args)))
    if not isinstance(kwargs, dict):
        raise Failure(ARGUMENTS, TypeError("kwargs must be an object, not %s" % _json_type(kwargs)))
    return module_name, path, args, kwargs


def _unpickle_arguments(request):
    """(args, kwargs) from a pickled call: the value is the pair, args a tuple."""
    from isohost_worker import values  # only a pickled call pays for importing it

    try:
        pair = values.decode(request["pickle"], frames.take_descriptors(request), values.HOST)
    except BaseException as e:
        raise Failure(DECODE, e, _beyond_here(e)) from None
    if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], dict)
            and all(type(k) is str for k in pair[1])):
        raise Failure(DECODE, TypeError("pickled arguments must be a pair (args, kwargs)"))
    return list(pair[0]), pair[1]


def _resolve(module_name, path):
    obj = sys.modules.get(module_name)
    try:
        # import_module's own first step, without its cost on every call: a module that is
        # there and not still being imported (by another thread) is the one it would return.
        if obj is None or getattr(getattr(obj, "__spec__", None), "_initializing", False):
            obj = importlib.import_module(module_name)
    except BaseException as e:
        raise Failure(IMPORT, e, _beyond_here(e)) from None
    for name in path:
        try:
            obj = getattr(obj, name)
        except BaseException as e:  # a module __getattr__ or a property may raise anything
            raise Failure(LOOKUP, e, _beyond_here(e)) from None
    if not callable(obj):
        raise Failure(LOOKUP, TypeError("%s:%s is a %s, not callable"
                                        % (module_name, ".".join(path), type(obj).__name__)))
    return obj


def _beyond_here(error):
    # The first frame is the runtime's own; what raised is after it, if anywhere.
    return error.__traceback__.tb_next


def _json_type(value):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")
