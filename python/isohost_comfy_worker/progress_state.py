"""ComfyUI's executing node and progress registry in the worker (comfy_execution.utils and
.progress), as ComfyUI's execution sets them in process: a class-based node's
`ComfyAPI.Execution().set_progress` (comfy_api) reads the executing node's id, and updates the
registry, whose handlers send the prompt's `progress_state` and the preview to the client.
The worker runs no prompt of its own, so its registry hands each update to the host's, as an
ask (bridge.py)."""

import contextlib
import sys

import isohost_worker


# The registry module whose registry this process points at the host's, once one is imported.
_installed = None


def executing(node_id):
    """A context in which ComfyUI's get_executing_context() names `node_id` of the running
    prompt (a ComfyUI without it: none). Points the progress registry at the host's first, where
    a pack has imported it: its import (PIL, comfy_api) is left to the packs that use it."""
    progress = sys.modules.get("comfy_execution.progress")
    if progress is not None and progress is not _installed:
        _install(progress)
    try:
        from comfy_execution.utils import CurrentNodeContext
    except ImportError:
        return contextlib.nullcontext()
    return CurrentNodeContext(sys.modules["server"].PromptServer.instance.last_prompt_id,
                              node_id, None)


def _install(progress):
    global _installed
    progress.get_progress_state().update_progress = _update_on_the_host
    _installed = progress


def _update_on_the_host(node_id, value, max_value, image=None):
    from isohost_comfy_worker import previews

    isohost_worker.ask("comfy.progress_state", {
        "node_id": node_id, "value": value, "max_value": max_value,
        "preview": previews.encode(image) if image is not None else None})
