"""The stages `isohost footprint` walks a worker through, as ordinary call targets.

Each function changes what the process holds and returns a small JSON answer; the host measures
the process from outside after each one. torch is imported only by the stages that need it.
"""

import importlib
import importlib.metadata

_held = []


def import_module(name):
    """Import `name` and return its version (or None)."""
    module = importlib.import_module(name)
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
    return {"module": name, "version": str(version) if version is not None else None}


def cuda_status():
    """Whether torch can reach a GPU, without creating a context."""
    import torch

    available = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "available": available,
        "devices": torch.cuda.device_count() if available else 0,
        "initialized": torch.cuda.is_initialized(),
    }


def open_cuda_context():
    """The first tensor on the card: creates the process's CUDA context."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    return {"device": torch.cuda.current_device(), "name": torch.cuda.get_device_name()}


def hold_tensor(nbytes):
    """Allocate and fill `nbytes` on the card, and keep it."""
    import torch

    tensor = torch.ones(int(nbytes), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    _held.append(tensor)
    return {"held": sum(t.numel() for t in _held)}


def drop_tensors():
    """`del` what hold_tensor kept, then empty the allocator's cache."""
    import torch

    _held.clear()
    torch.cuda.empty_cache()
    return {"reserved": torch.cuda.memory_reserved()}
