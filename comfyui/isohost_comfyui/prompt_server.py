"""ComfyUI's PromptServer where one runs in this process."""

import sys


def running():
    """ComfyUI's PromptServer, or None where the adapter's nodes are loaded without one (a
    script importing ComfyUI's nodes alone, as bench comfyui does). Never imports ComfyUI's
    server module: ComfyUI's main.py has made its one instance before custom nodes load, and
    importing it after ComfyUI's nodes.py (which puts comfy/ first on sys.path) finds
    comfy/utils.py for ComfyUI's utils package."""
    server = sys.modules.get("server")
    return getattr(getattr(server, "PromptServer", None), "instance", None)
