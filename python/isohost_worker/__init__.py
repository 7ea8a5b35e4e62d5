"""isohost worker runtime: runs the host's calls inside this environment's interpreter.

Code running in a worker may use:

    import isohost_worker
    isohost_worker.on_release(my_cache.clear)   # run when the host asks for memory back
"""

from isohost_worker.frames import VERSION as PROTOCOL_VERSION
from isohost_worker.memory import on_release

__all__ = ["PROTOCOL_VERSION", "on_release"]
