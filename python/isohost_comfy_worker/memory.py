"""ComfyUI's memory manager in a worker, joined to the host's (docs/comfyui.md, "One view of
the card").

ComfyUI makes room before a model load with `comfy.model_management.free_memory(bytes,
device)`: it unloads its own models until the device has `bytes` free. In a worker that sees
only the worker's models. So after it has unloaded its own, a worker still short asks the host:
first its ComfyUI, to unload the host's models (the host runs its own free_memory), then
isohost's admission, to release, hibernate or reap other idle workers
(isohost_worker.reserve_vram). What is left short is ComfyUI's own business, as in process.
"""

import logging

import isohost_worker

_original_free_memory = None
# The GPU index as the host numbers it (the worker may see it as cuda:0 through
# CUDA_VISIBLE_DEVICES).
_host_device = None


def install(host_device):
    global _original_free_memory, _host_device
    import comfy.model_management as mm

    if _original_free_memory is not None:
        return
    _host_device = host_device
    _original_free_memory = mm.free_memory
    mm.free_memory = free_memory


def free_memory(memory_required, device, keep_loaded=[]):  # noqa: B006 (ComfyUI's signature)
    import comfy.model_management as mm

    unloaded = _original_free_memory(memory_required, device, keep_loaded)
    if getattr(device, "type", None) != "cuda":
        return unloaded
    short = int(memory_required - mm.get_free_memory(device))
    if short <= 0:
        return unloaded
    index = _host_device if _host_device is not None else (device.index or 0)
    try:
        isohost_worker.ask("comfy.free_memory", {"bytes": int(memory_required), "device": index})
    except isohost_worker.AskFailed as e:
        logging.warning("isohost: the host's ComfyUI could not free memory: %s", e)
    short = int(memory_required - mm.get_free_memory(device))
    if short > 0:
        # Admission makes `memory_required` free on the card, counting what is free now.
        reservation = isohost_worker.reserve_vram(int(memory_required), device=index)
        # The grant holds the bytes back from other workers until this call ends.
        logging.info("isohost: asked the host for %d MiB on GPU %d: %s", short >> 20, index,
                     reservation.outcome)
    return unloaded
