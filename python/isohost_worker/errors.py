"""How a failed request is described to the host (`error` in a reply, docs/protocol.md)."""

import sys
import traceback

ARGUMENTS = "arguments"
IMPORT = "import"
LOOKUP = "lookup"
CALL = "call"
RESULT = "result"
INTERNAL = "internal"
DECODE = "decode"  # pickled arguments that could not be unpickled, or buffers that do not match
ENCODE = "encode"  # a result that could not be pickled
FORK = "fork"  # a zygote could not or would not fork


class Failure(Exception):
    """A request failed at a known step. `tb` is the part of the traceback worth showing;
    None shows the exception alone, for failures whose frames are the runtime's own."""

    def __init__(self, where, error, tb=None):
        super().__init__(where, error)
        self.where = where
        self.error = error
        self.tb = tb


class AskFailed(RuntimeError):
    """The host did not answer a worker's ask with a value: its handler raised (`type_name` is
    that exception's type, qualified as type_name() qualifies), or it has none ("Unsupported")."""

    def __init__(self, name, type_name, message):
        super().__init__("the host's answer to %r: %s: %s" % (name, type_name, message))
        self.name = name
        self.type_name = type_name
        self.message = message


def type_name(cls):
    """`ValueError` for builtins, `package.module.Class` otherwise, so the host can tell a
    user's `errors.TimeoutError` from the builtin one."""
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or cls.__name__
    if module in (None, "builtins"):
        return name
    return "%s.%s" % (module, name)


def describe(where, error, tb=None):
    """The `error` object of a failed reply."""
    try:
        message = str(error)
    except Exception:
        message = "<str() of the %s failed>" % type_name(type(error))
    if tb is None:
        lines = traceback.format_exception_only(type(error), error)
    else:
        lines = traceback.format_exception(type(error), error, tb)
    return {
        "type": _text(type_name(type(error))),
        "message": _text(message),
        "where": where,
        "traceback": _text("".join(lines)),
    }


def _text(s):
    # Lone surrogates (from os.fsdecode of odd file names, say) cannot be sent as UTF-8.
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def say(message, who="isohost_worker"):
    """A line on stderr, which the host logs with the environment's name; never raises."""
    try:
        sys.stderr.write("%s: %s\n" % (who, message))
        sys.stderr.flush()
    except Exception:
        pass
