"""The autograd mode of ComfyUI's thread, which a node's worker runs it in (docs/comfyui.md,
"Stand-ins"). ComfyUI runs every prompt under torch.inference_mode(): in process a node's
tensors carry no autograd history, even where a model's parameters require grad. A worker
running the node without it built that history, kept alive what a backward pass would need for
as long as the output lived, and sent such an output inside the pickle stream (torch's own
pickling, a copy into the stream and one out), not as a memfd."""

import torch


def current():
    """"inference", "no_grad", or None where gradients are on (a worker's own default). Read
    on the thread that runs the node in ComfyUI: the mode is a thread's, and an async node's
    call waits on another thread."""
    if torch.is_inference_mode_enabled():
        return "inference"
    return None if torch.is_grad_enabled() else "no_grad"
