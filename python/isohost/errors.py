"""The exceptions the host API raises: one class per error kind of the C++ core
(src/error/error.hpp), all under isohost.Error."""

import json


class Error(Exception):
    """Anything isohost reports. `kind` is the stable name ("WorkerCrashed", ...), `detail`
    the worker's own account where there is one. `type_name` and `traceback_text` are the
    worker's exception type and traceback when the error came from the worker, else None."""

    kind = "Error"

    def __init__(self, message, detail=None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        worker = detail if isinstance(detail, dict) else {}
        self.type_name = worker.get("type")
        self.traceback_text = worker.get("traceback")


class SpawnFailed(Error):
    """The environment's interpreter could not be started."""


class StartTimeout(Error):
    """The worker did not say hello in time; it was killed."""


class ProtocolError(Error):
    """The worker broke the wire protocol; it was killed."""


class WorkerCrashed(Error):
    """The worker died on its own during the call (detail["exit"] says how)."""


class CallTimeout(Error):
    """The call ran past its timeout; the worker was killed."""


class WorkerException(Error):
    """The called function raised; the worker lives on."""


class TargetNotFound(Error):
    """The module or function does not exist in the worker's environment."""


class BadRequest(Error):
    """The request itself is malformed."""


class CrashLoop(Error):
    """The environment failed repeatedly and is backing off."""


class UnknownEnvironment(Error):
    """No environment of that name is configured."""


class HostShuttingDown(Error):
    """The host is closing or closed and takes no more work."""


class ConfigError(Error):
    """The configuration is missing or invalid."""


class ControlError(Error):
    """A control socket could not be reached or answered badly."""


class EncodeError(Error):
    """A value could not be pickled: the call's arguments here, or its result in the worker."""


class DecodeError(Error):
    """A pickled value could not be unpickled, or its buffers did not match their description:
    the arguments in the worker, or the result here."""


class HibernateFailed(Error):
    """The driver failed part-way through hibernating an idle worker; it was retired."""


class WakeFailed(Error):
    """A hibernated worker could not be woken (no room on the card, or the driver failed)."""


class Interrupted(Error):
    """The call was interrupted (Call.interrupt): dropped before it ran, or its worker did not
    stop within the grace period and was killed. A call that stopped in time raises what the
    worker raised instead (a WorkerException)."""


_BY_KIND = {cls.__name__: cls for cls in Error.__subclasses__()}
for _name, _cls in _BY_KIND.items():
    _cls.kind = _name


def from_core(text):
    """The exception for an isohost::Error as the core sends it: {"kind", "message", "detail"}."""
    error = json.loads(text)
    cls = _BY_KIND.get(error.get("kind"), Error)
    return cls(error.get("message", "unknown error"), error.get("detail"))
