"""The worker side of isohost's ComfyUI adapter (docs/comfyui.md): inside an isolated pack's
worker, make the host's ComfyUI tree usable (comfy_env), describe a pack's nodes (scan), and run
them on instances kept per ComfyUI node id (nodes).

Standard library at import, Python 3.9+; ComfyUI's own modules and torch are imported when a
pack is prepared, from the host's ComfyUI tree on the worker's path.
"""
