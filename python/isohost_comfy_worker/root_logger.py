"""The worker's root logger, as ComfyUI's app/logger.py sets up the host's: at the host's level
(--verbose), each record as its message alone, on stderr (with --log-stdout, those below ERROR
on stdout). The host writes the worker's lines into its own log (isohost_comfyui.worker_output),
so a pack's `logging.getLogger(...).info(...)` reaches ComfyUI's log, and its front end's log
panel, as in process; without this the root logger's default (WARNING, through
logging.lastResort) dropped everything below a warning."""

import logging
import sys

_configured = False


def configure(args):
    """Once per worker, after the host's settings are applied to comfy.cli_args' `args` and
    before the pack is imported (ComfyUI's own modules, imported before, said what they say at
    import in the host already); later calls do nothing."""
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger()
    # A module-level logging call before this one (ComfyUI's modules make some as they are
    # imported) called logging.basicConfig, whose handler would say each record a second time,
    # as "INFO:name:message". In the host ComfyUI's handlers come first and it adds none.
    for handler in list(root.handlers):
        root.removeHandler(handler)
    try:
        root.setLevel(getattr(args, "verbose", None) or "INFO")
    except (TypeError, ValueError):
        root.setLevel(logging.INFO)
    errors = _handler(sys.stderr)
    if getattr(args, "log_stdout", False):
        errors.addFilter(lambda record: record.levelno >= logging.ERROR)
        lesser = _handler(sys.stdout)
        lesser.addFilter(lambda record: record.levelno < logging.ERROR)
        root.addHandler(lesser)
    root.addHandler(errors)


def _handler(stream):
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler
