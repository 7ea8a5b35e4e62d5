"""Running a node in the autograd mode ComfyUI's thread was in when it called it
(comfyui/isohost_comfyui/autograd_mode.py): under torch.inference_mode() in a prompt, as in
process."""

import contextlib


def entered(mode):
    """A context manager for `mode` ("inference", "no_grad", or None: leave it as it is)."""
    if mode is None:
        return contextlib.nullcontext()
    import torch

    if mode == "inference":
        return torch.inference_mode()
    if mode == "no_grad":
        return torch.no_grad()
    raise ValueError("unknown autograd mode %r (inference, no_grad or None)" % (mode,))
