"""The node that bench/comfyui/peers.py runs through each peer (pyisolate, comfy-env).

A ComfyUI node in the classic (V1) shape: INPUT_TYPES, RETURN_TYPES, FUNCTION and
NODE_CLASS_MAPPINGS, so each peer can load it through its own node machinery. IMAGE in, IMAGE
out: a [batch, height, width, channels] float32 tensor in 0..1, inverted as ComfyUI's own
ImageInvert does (1 - image). One full read and one full write of the image, so the node's own
work is small beside what isolation adds.

PeerNodeExtension is what pyisolate runs in its child: pyisolate loads an extension class by
its dotted name, so it must live in an importable module, and ComfyUI's own pyisolate wrapper
(comfy/isolation/extension_wrapper.py, ComfyNodeExtension) needs comfy_api, which this bench
does not have. It does what that wrapper's execute_node does for a V1 node: one instance per
node name, kept between calls, FUNCTION called with keyword arguments on an executor thread
under torch.inference_mode, the result as a tuple with tensors inline.
"""

from __future__ import annotations


class PeerImageInvert:
    """IMAGE in, IMAGE out: 1 - image."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "invert"
    CATEGORY = "isohost/bench"

    def invert(self, image):
        return (1.0 - image,)


NODE_CLASS_MAPPINGS = {"IsohostPeerImageInvert": PeerImageInvert}
NODE_DISPLAY_NAME_MAPPINGS = {"IsohostPeerImageInvert": "Invert Image (isohost peer bench)"}

try:  # only where pyisolate is installed (the peers' host venv, pyisolate's child venvs)
    from pyisolate import ExtensionBase as _ExtensionBase
except ImportError:  # comfy-env's worker venv has no pyisolate, and needs none
    _ExtensionBase = None

if _ExtensionBase is not None:

    class PeerNodeExtension(_ExtensionBase):
        """pyisolate's child side: NODE_CLASS_MAPPINGS of the loaded pack, run by name."""

        def __init__(self) -> None:
            super().__init__()
            self.node_classes: dict = {}
            self.node_instances: dict = {}

        async def on_module_loaded(self, module) -> None:
            self.node_classes = dict(getattr(module, "NODE_CLASS_MAPPINGS", {}) or {})
            self.node_instances = {}

        async def list_nodes(self) -> list:
            return sorted(self.node_classes)

        async def child_info(self) -> dict:
            import os
            import sys

            return {"pid": os.getpid(), "executable": sys.executable, "prefix": sys.prefix}

        async def execute_node(self, node_name: str, **inputs):
            import asyncio
            import functools

            import torch

            cls = self.node_classes[node_name]
            instance = self.node_instances.get(node_name)
            if instance is None:
                instance = self.node_instances[node_name] = cls()
            handler = getattr(instance, getattr(cls, "FUNCTION", "execute"))

            def run(**kwargs):
                with torch.inference_mode():
                    return handler(**kwargs)

            result = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(run, **inputs)
            )
            return result if isinstance(result, tuple) else (result,)
