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


def held_checksum():
    """A checksum of every tensor hold_tensor kept, computed on the card: the same number
    before and after a hibernation shows the data came back intact."""
    import torch

    total = 0
    for t in _held:
        total += int(t.view(torch.int64).sum().item()) if t.numel() % 8 == 0 else int(t.sum().item())
    return {"tensors": len(_held), "bytes": sum(t.numel() for t in _held), "checksum": total}


def fill_held(seed):
    """Fill the held tensors with a pattern that depends on `seed`, so a checksum can tell."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(int(seed))
    for t in _held:
        t.random_(0, 256, generator=generator)
    torch.cuda.synchronize()
    return held_checksum()


def pinned_copy_ms_per_gib(nbytes, rounds=5):
    """The bus's own speed for what hibernation moves: median ms per GiB of a copy between a
    pinned host buffer and the card, each way. The limit `isohost bench hibernate` sets beside
    the driver's checkpoint (device to host) and restore (host to device)."""
    import statistics

    import torch

    nbytes = int(nbytes)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    device.fill_(1)
    host.copy_(device)  # warm up both directions
    device.copy_(host)
    torch.cuda.synchronize()
    gib = nbytes / float(1 << 30)

    def timed(dst, src):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / gib

    d2h = [timed(host, device) for _ in range(int(rounds))]
    h2d = [timed(device, host) for _ in range(int(rounds))]
    del host, device
    torch.cuda.empty_cache()
    return {"d2h": statistics.median(d2h), "h2d": statistics.median(h2d)}


def copy_in(nbytes):
    """What a fresh worker does to reach a warm state: copy `nbytes` from host RAM to the card.
    The host tensor is made first and not counted; the answer is the copy's own time."""
    import time

    import torch

    host = torch.ones(int(nbytes), dtype=torch.uint8)
    torch.cuda.synchronize()
    start = time.perf_counter()
    _held.append(host.to("cuda"))
    torch.cuda.synchronize()
    return {"copy_ms": (time.perf_counter() - start) * 1000.0}


# The model hold_model made: (module, the tensors held outside it), kept until drop_model.
_model = None


def hold_model(nbytes, pieces=40, device="cuda", seed=0):
    """Build a torch.nn.Module of about `nbytes` of random float32 on `device`, spread the way a
    real model's bytes are, and keep it: parameters, buffers, a view (a slice of a parameter,
    sharing its storage), tensors in a dict and a list, and one held only by a closure. What
    sleep must bring back intact, each kind of holder at least once."""
    import torch

    global _model
    pieces = max(int(pieces), 5)
    # Sizes a little apart, so that storages do not all line up with the staging chunks.
    base = max(int(nbytes) // (4 * pieces) - pieces, 1)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    tensors = [torch.randn(base + i, generator=generator, device=device) for i in range(pieces)]
    parameters, buffers = pieces // 2, pieces // 4
    module = torch.nn.Module()
    for i in range(parameters):
        module.register_parameter("p%d" % i, torch.nn.Parameter(tensors[i]))
    for i in range(parameters, parameters + buffers):
        module.register_buffer("b%d" % i, tensors[i])
    rest = tensors[parameters + buffers:]
    closure_tensor = rest.pop()
    extras = {
        "view": module.p0[1:],
        "dict": {"t%d" % i: t for i, t in enumerate(rest[::2])},
        "list": rest[1::2],
        "closure": (lambda: closure_tensor),
    }
    _model = (module, extras)
    if device == "cuda":
        torch.cuda.synchronize()
    return {"bytes": sum(t.numel() * t.element_size() for t in tensors), "tensors": pieces}


def drop_model():
    """Forget the model hold_model made."""
    global _model
    _model = None
    return {"held": False}


def _model_tensors():
    if _model is None:
        raise RuntimeError("no model is held: call hold_model first")
    module, extras = _model
    tensors = [t.detach() for t in module.parameters()] + list(module.buffers())
    tensors.append(extras["view"].detach())
    tensors += list(extras["dict"].values()) + list(extras["list"])
    tensors.append(extras["closure"]())
    return tensors


def model_checksum():
    """A float64 sum of every tensor of the held model, computed on its device: a quick check
    that the data came back (model_fingerprint is the exact one)."""
    import torch

    tensors = _model_tensors()
    total = torch.zeros((), dtype=torch.float64, device=tensors[0].device)
    for t in tensors:
        total += t.sum(dtype=torch.float64)
    return {"tensors": len(tensors), "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "checksum": total.item()}


def model_fingerprint():
    """The sha256 of the bytes of every tensor of the held model, in order, each copied to
    host memory: equal fingerprints mean every byte is the same."""
    import ctypes
    import hashlib

    digest = hashlib.sha256()
    tensors = _model_tensors()
    for t in tensors:
        host = t.contiguous().cpu()
        nbytes = host.numel() * host.element_size()
        if nbytes:
            # A ctypes array over the tensor's memory hands hashlib its bytes without a copy.
            digest.update((ctypes.c_ubyte * nbytes).from_address(host.data_ptr()))
    return {"tensors": len(tensors), "sha256": digest.hexdigest()}
