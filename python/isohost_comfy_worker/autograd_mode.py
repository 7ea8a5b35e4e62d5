"""The autograd mode a node runs in: the one ComfyUI's thread is in as it calls the stand-in,
which the worker enters around the node (and ComfyUI's adapter around the call's asks).
ComfyUI runs every prompt under torch.inference_mode(): in process a node's tensors carry no
autograd history, even where a model's parameters require grad. A worker running the node
without it built that history, kept alive what a backward pass would need for as long as the
output lived, and sent such an output inside the pickle stream (torch's own pickling, a copy
into the stream and one out), not as a memfd. torch is imported only where a mode is asked."""

import contextlib


def current():
    """"inference", "no_grad", or None where gradients are on (a worker's own default). Read
    on the thread that runs the node in ComfyUI: the mode is a thread's, and an async node's
    call waits on another thread."""
    import torch

    if torch.is_inference_mode_enabled():
        return "inference"
    return None if torch.is_grad_enabled() else "no_grad"


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
