"""Call targets for tests/python/test_freeze.py: a worker imports a stand-in `torch` from the
path the test gives it."""

import gc
import sys


def import_torch():
    import torch  # noqa: F401 (the stand-in on the worker's path)

    return gc.get_freeze_count()


def forget_path(entry):
    sys.path.remove(entry)
    sys.path_importer_cache.clear()


def state():
    from isohost_worker import sleep

    return {"frozen": gc.get_freeze_count(),
            "remembered": sorted(type(ref()).__name__ for ref in sleep._frozen),
            "finders": [type(f).__name__ for f in sys.meta_path]}
