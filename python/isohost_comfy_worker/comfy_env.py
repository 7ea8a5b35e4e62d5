"""ComfyUI inside a worker, as the host's ComfyUI sees itself (docs/comfyui.md, "Inside the
worker").

The host sends its settings whole to a worker that has not had them, and their key alone after
that (`prepare`): its command-line state that changes behaviour (--cpu, the VRAM modes), its
model, input, output and temp directories, and the GPU this worker is pinned to. Before any
pack is imported, the worker applies them to `comfy.cli_args.args` (so comfy.model_management
starts as the host's did) and to `folder_paths`, installs a stand-in `server` module whose
PromptServer passes messages and HTTP routes to the host, sends ComfyUI's progress bar to the host
(isohost_worker.ask: the host's own hook sends the websocket event and says when the prompt was
interrupted), and asks the host before a model load (memory.py). The settings also list the
modules the host can import, so that an object of a library of this environment alone stays
here (values.worker_only_class), and the modules of ComfyUI's own nodes outside nodes.py, which
the worker's node table imports as a pack looks one up (builtin_nodes).
"""

import logging
import sys
import types

import isohost_worker
from isohost_worker import interrupts

_prepared = None
_host_modules = frozenset()


class SettingsNeeded(RuntimeError):
    """The host sent its settings' key alone, and this worker has not had them (it is new since
    the host last sent them whole): the host sends the call again with them."""


def prepare(settings):
    """Apply the host's `settings` once per worker process; a second call with the same
    settings, or with their key alone ({"key": ...}), does nothing, one with others is refused
    (one worker serves one ComfyUI)."""
    global _prepared
    reference = set(settings) == {"key"}
    if _prepared is not None:
        same = (settings["key"] == _prepared.get("key")) if reference else _prepared == settings
        if not same:
            raise RuntimeError("this worker was prepared for another ComfyUI")
        return
    if reference:
        raise SettingsNeeded("this worker has not had the host's settings yet (key %s)"
                             % settings["key"])
    _apply_args(settings.get("args") or {})
    _apply_folders(settings.get("folders") or {})
    _install_server()
    _install_progress()
    _install_interrupt()
    from isohost_comfy_worker import memory

    memory.install(settings.get("device"))
    _configure_logging()
    global _host_modules
    _host_modules = frozenset(settings.get("host_modules") or ())
    from isohost_comfy_worker import builtin_nodes, packs

    builtin_nodes.set_modules(settings.get("builtin_node_modules"))
    packs.register_in_nodes()
    _prepared = settings


def host_modules():
    """The top-level modules the host's ComfyUI process can import, as its settings listed them
    (isohost_comfyui.worker_settings); empty before they came."""
    return _host_modules


def enter_node(node_id, prompt=None):
    """What ComfyUI's server says while a node runs, said here too: `prompt` ({"prompt_id",
    "client_id"}, sent with a prompt's first node in this worker) sets `client_id` (packs send
    their messages to that client) and `last_prompt_id`; `last_node_id` is the node's id where
    the prompt has a client, as ComfyUI sets it."""
    instance = sys.modules["server"].PromptServer.instance
    if prompt is not None:
        instance.client_id = prompt.get("client_id")
        instance.last_prompt_id = prompt.get("prompt_id")
    if instance.client_id is not None:
        instance.last_node_id = node_id


def _apply_args(values):
    import comfy.cli_args

    args = comfy.cli_args.args
    for name, value in values.items():
        if hasattr(args, name):
            current = getattr(args, name)
            if hasattr(current, "value") and not isinstance(value, type(current)):
                value = type(current)(value)  # an Enum travels as its value
            setattr(args, name, value)


def _configure_logging():
    import comfy.cli_args

    from isohost_comfy_worker import root_logger

    root_logger.configure(comfy.cli_args.args)


def _apply_folders(folders):
    import folder_paths

    for name in ("output_directory", "input_directory", "temp_directory", "user_directory",
                 "models_dir"):
        if folders.get(name):
            setattr(folder_paths, name, folders[name])
    for name, (paths, extensions) in (folders.get("folder_names_and_paths") or {}).items():
        folder_paths.folder_names_and_paths[name] = (list(paths), set(extensions))


class _PromptServer:
    """What packs use of ComfyUI's PromptServer.instance, in a worker: messages go to the host's
    server (isohost_worker.tell("comfy.send_sync")), which sends them to its websocket clients;
    the HTTP routes a pack adds are served by the host's server through this worker
    (routes.py); the queue is the host's, asked while a node runs (prompt_queue.py)."""

    def __init__(self):
        from isohost_comfy_worker import prompt_queue, routes

        self.routes = routes.RouteTable()
        self.app = routes.App(self.routes)
        self.prompt_queue = prompt_queue.PromptQueue()
        self.client_id = None
        self.last_node_id = None
        self.last_prompt_id = None
        # Where the host's ComfyUI listens, as its server says once it serves (a pack calling
        # ComfyUI's own HTTP API reads them), and what its front end is told it supports.
        import comfy.cli_args

        self.address = str(comfy.cli_args.args.listen).split(",")[0]
        self.port = comfy.cli_args.args.port
        self.supports = ["custom_nodes_from_web"]

    @property
    def number(self):
        from isohost_comfy_worker import prompt_queue

        return prompt_queue.server_number()

    @number.setter
    def number(self, value):
        from isohost_comfy_worker import prompt_queue

        prompt_queue.set_server_number(value)

    @property
    def loop(self):
        # Running on its own thread once no pack is being imported (server_loop.py).
        from isohost_comfy_worker import packs, server_loop

        if packs.importing() is None:
            server_loop.start()
        return server_loop.loop()

    def send_sync(self, event, data, sid=None):
        from isohost_comfy_worker import messages

        try:
            isohost_worker.tell("comfy.send_sync", messages.encode(event, data, sid))
        except (TypeError, ValueError) as e:
            logging.warning("isohost: send_sync(%r) from a worker dropped: %s", event, e)

    # The server's coroutines that send at once: through the host's send_sync, in order with it.
    async def send(self, event, data, sid=None):
        self.send_sync(event, data, sid)

    async def send_json(self, event, data, sid=None):
        self.send_sync(event, data, sid)

    async def send_bytes(self, event, data, sid=None):
        self.send_sync(event, data, sid)

    def send_progress_text(self, text, node_id, sid=None):
        # The host's own, which packs it as ComfyUI's front end expects.
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        isohost_worker.tell("comfy.send_progress_text",
                            {"text": text, "node_id": node_id, "sid": sid})

    def add_on_prompt_handler(self, handler):
        from isohost_comfy_worker import routes

        routes.record_on_prompt(handler)


def _install_server():
    if "server" in sys.modules and hasattr(sys.modules["server"], "PromptServer"):
        sys.modules["server"].PromptServer.instance = _PromptServer()
        return
    module = types.ModuleType("server", "isohost's stand-in for ComfyUI's server in a worker")

    class PromptServer:
        instance = _PromptServer()

    module.PromptServer = PromptServer
    try:  # packs import it from `server`, which imports it from ComfyUI's protocol module
        from protocol import BinaryEventTypes

        module.BinaryEventTypes = BinaryEventTypes
    except ImportError:  # a ComfyUI older than its protocol module
        pass
    sys.modules["server"] = module


def _progress_hook(value, total, preview_image=None, prompt_id=None, node_id=None):
    # A preview image travels shrunk and lossless (previews.py).
    from isohost_comfy_worker import previews

    preview = previews.encode(preview_image) if preview_image is not None else None
    try:
        isohost_worker.ask("comfy.progress", {"value": value, "total": total,
                                             "prompt_id": prompt_id, "node_id": node_id,
                                             "preview": preview})
    except isohost_worker.AskFailed as e:
        if e.type_name.endswith("InterruptProcessingException"):
            import comfy.model_management

            raise comfy.model_management.InterruptProcessingException() from None
        raise


def _install_progress():
    import comfy.utils

    comfy.utils.set_progress_bar_global_hook(_progress_hook)


def _install_interrupt():
    """ComfyUI's interrupt raises InterruptProcessingException in the node's thread at its next
    bytecode, and ComfyUI's own checks see it: a node (or comfy's samplers) polling
    processing_interrupted() or calling throw_exception_if_processing_interrupted() in the worker
    sees the host's interrupt of the call in flight, as it would see the flag in process (a node
    that swallows the raised exception still stops where it polls)."""
    import comfy.model_management as mm

    isohost_worker.on_interrupt(mm.InterruptProcessingException)
    original_flag = mm.processing_interrupted
    original_throw = mm.throw_exception_if_processing_interrupted

    def processing_interrupted():
        return isohost_worker.interrupted() or original_flag()

    def throw_exception_if_processing_interrupted():
        if isohost_worker.interrupted():
            raise mm.InterruptProcessingException()
        original_throw()

    def interrupt_current_processing(value=True):
        # A node that interrupts its own prompt (ImpactInterrupt, an image chooser's cancel,
        # through nodes.interrupt_processing) interrupts the host's: the host sets ComfyUI's flag
        # once the node has returned, as its next node then sees it in process; asked from
        # another thread (a pack's route), at once. Asked, not told, so that the host has it
        # before the node's reply. The worker's own flag stays clear: set, it would interrupt
        # the worker's next call, in another prompt.
        isohost_worker.ask("comfy.interrupt", {"value": bool(value),
                                               "in_node": interrupts.on_call_thread()})

    mm.processing_interrupted = processing_interrupted
    mm.throw_exception_if_processing_interrupted = throw_exception_if_processing_interrupted
    mm.interrupt_current_processing = interrupt_current_processing
