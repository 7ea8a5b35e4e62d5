"""A pack that needs numpy 1 (as packs pinned to `numpy<2` do): it cannot import in an
environment with numpy 2, such as ComfyUI's own here."""

import numpy

if not numpy.__version__.startswith("1."):
    raise ImportError("isohost_numpy1_pack needs numpy 1.x, found %s" % numpy.__version__)


class NumpyVersion:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "version"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def version(self):
        return {"ui": {"numpy": [numpy.__version__]}, "result": ()}


NODE_CLASS_MAPPINGS = {"NumpyVersionIsohost": NumpyVersion}
