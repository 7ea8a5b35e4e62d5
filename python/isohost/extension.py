"""Why the isohost package's compiled part (_isohost) would not import, in words a user can act
on. Python's own message for an extension built for another interpreter is "cannot import name
'_isohost' from partially initialized module 'isohost' (most likely due to a circular import)",
which names neither the interpreter it was built for nor the fix."""

import glob
import importlib.machinery
import os
import sys


def import_error(error):
    """An ImportError that says which interpreter the extension beside this file was built for
    (or that there is none) and how to build it for this one; `error` is Python's own."""
    here = os.path.dirname(os.path.abspath(__file__))
    built = sorted(os.path.basename(p) for p in glob.glob(os.path.join(here, "_isohost*.so")))
    this = "Python %d.%d (%s)" % (sys.version_info[0], sys.version_info[1], sys.executable)
    rebuild = ("build it for this one: make build CMAKE_FLAGS=-DISOHOST_PYTHON=%s"
               % (sys.executable or "/path/to/python"))
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    if not built:
        return ImportError("the isohost package in %s has no compiled extension (_isohost): %s"
                           % (here, rebuild))
    if not set(built) & {"_isohost" + suffix for suffix in suffixes}:
        return ImportError("the isohost package in %s was built for another Python (%s), not %s, "
                           "which loads %s: %s" % (here, ", ".join(built), this,
                                                    " or ".join(suffixes), rebuild))
    return ImportError("the isohost package's extension in %s (%s) would not load in %s: %s"
                       % (here, ", ".join(built), this, error))
