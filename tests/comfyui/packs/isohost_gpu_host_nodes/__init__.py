"""The same GPU test nodes in ComfyUI's own process (names end in "Host")."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    __name__ + ".gpu_nodes",
    os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "isohost_gpu_nodes",
                 "gpu_nodes.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

NODE_CLASS_MAPPINGS = _module.mappings("Host")
