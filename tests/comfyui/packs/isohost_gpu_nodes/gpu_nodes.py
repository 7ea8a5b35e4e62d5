"""GPU nodes for tests/gpu/check_comfyui_gpu.py: CUDA tensors that cross, and models loaded
through ComfyUI's own memory manager (comfy.model_management.load_models_gpu), so that an
isolated load and the host's own make room for each other."""

import os

import torch

import comfy.model_management as mm
import comfy.model_patcher

ALWAYS = float("nan")
GIB = 1 << 30
# Models stay loaded while something holds them, as a checkpoint loader's output does.
_held = {}


class ToCuda:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "to_cuda"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)},
                "optional": {"channels_first": ("BOOLEAN", {"default": False})}}

    def to_cuda(self, image, channels_first=False):
        """On the card; with `channels_first`, still (B, H, W, C) but a permuted view of
        (B, C, H, W) memory, as a model's output handed on by `movedim`."""
        if channels_first:
            return (image.movedim(-1, 1).contiguous().to("cuda").movedim(1, -1),)
        return (image.to("cuda"),)


class DeviceOf:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "device"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def device(self, image):
        return {"ui": {"device": [str(image.device)], "pid": [os.getpid()],
                       "strides": list(image.stride())}, "result": ()}


class LoadBigModel:
    """A model of `gib` GiB loaded the way ComfyUI loads a checkpoint's."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"gib": ("INT", {"default": 12}), "tag": ("STRING", {"default": "m"})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return ALWAYS

    def load(self, gib, tag):
        patcher = _held.get(tag)
        if patcher is None:
            model = torch.nn.Module()
            model.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.empty(GIB // 2, dtype=torch.float16), requires_grad=False)
                for _ in range(gib))
            patcher = _held[tag] = comfy.model_patcher.ModelPatcher(
                model, load_device=mm.get_torch_device(), offload_device=torch.device("cpu"))
        mm.load_models_gpu([patcher])
        return {"ui": _state(tag), "result": ()}


class ModelState:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "state"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tag": ("STRING", {"default": "m"})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return ALWAYS

    def state(self, tag):
        return {"ui": _state(tag), "result": ()}


def _state(tag):
    patcher = _held.get(tag)
    loaded = patcher.loaded_size() if patcher is not None else 0
    free, total = torch.cuda.mem_get_info()
    return {"loaded_gib": [round(loaded / GIB, 2)], "pid": [os.getpid()],
            "free_gib": [round(free / GIB, 2)], "tag": [tag]}


def mappings(suffix):
    return {cls.__name__ + suffix: cls for cls in (ToCuda, DeviceOf, LoadBigModel, ModelState)}
