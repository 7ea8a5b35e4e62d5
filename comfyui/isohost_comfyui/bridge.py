"""What the workers ask of the host's ComfyUI while a node runs, and what the host's ComfyUI
asks of isohost (docs/comfyui.md, "Progress, messages and memory").

The handlers run on the thread that waits for the node's call: ComfyUI's prompt thread, inside
the node's executing context, where the same code runs for a node in process. So the progress
hook finds the executing node and prompt itself, and raises ComfyUI's interrupt there."""

import logging

import comfy.model_management
import comfy.utils

_original_free_memory = comfy.model_management.free_memory


def serve(host):
    """Registers the handlers of the workers' asks on `host`."""
    host.on_ask("comfy.progress", _progress)
    host.on_ask("comfy.send_sync", _send_sync)
    host.on_ask("comfy.send_progress_text", _send_progress_text)
    host.on_ask("comfy.free_memory", _free_memory_for_worker)


def _progress(value):
    hook = comfy.utils.PROGRESS_BAR_HOOK
    if hook is not None:
        preview = value.get("preview")
        if preview is not None:
            from isohost_comfy_worker import previews

            preview = previews.decode(preview)
        hook(value["value"], value["total"], preview, value.get("prompt_id"),
             value.get("node_id"))


def _send_sync(value):
    from isohost_comfy_worker import messages
    from server import PromptServer

    PromptServer.instance.send_sync(*messages.decode(value))


def _send_progress_text(value):
    from server import PromptServer

    PromptServer.instance.send_progress_text(value["text"], value["node_id"], value.get("sid"))


def _free_memory_for_worker(value):
    """A worker is about to load a model: unload the host's own models to make room, as ComfyUI
    does for a load in process. The original free_memory: the worker asks isohost for the room
    idle workers hold itself (and is itself busy, so making room for it here would wait for it)."""
    import torch

    device = torch.device("cuda", value.get("device") or 0)
    _original_free_memory(value["bytes"], device)


def join_memory_managers(host):
    """ComfyUI's own loads make room with idle isolated workers too: after ComfyUI has unloaded
    its own models, whatever is still short goes to isohost's admission (release, hibernate or
    reap idle workers)."""

    def free_memory(memory_required, device, keep_loaded=[]):  # noqa: B006 (ComfyUI's signature)
        unloaded = _original_free_memory(memory_required, device, keep_loaded)
        if getattr(device, "type", None) == "cuda":
            short = int(memory_required - comfy.model_management.get_free_memory(device))
            if short > 0:
                # Admission makes `memory_required` free on the card, counting what is free now.
                answer = host.make_room(int(memory_required), device.index or 0)
                logging.info("isohost: made room for ComfyUI's own load: %s",
                             answer.get("explanation"))
        return unloaded

    comfy.model_management.free_memory = free_memory
