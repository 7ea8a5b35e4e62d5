"""What the workers ask of the host's ComfyUI while a node runs, and what the host's ComfyUI
asks of isohost (docs/comfyui.md, "Progress, messages and memory").

The handlers run on the thread that waits for the node's call: ComfyUI's prompt thread, inside
the node's executing context, where the same code runs for a node in process (an async node's
call waits on a thread of its own, in the same context: standins._awaiting). So the progress
hook finds the executing node and prompt itself, and raises ComfyUI's interrupt there."""

import contextlib
import logging
import threading

import comfy.model_management
import comfy.utils

_original_free_memory = comfy.model_management.free_memory


def serve(host):
    """Registers the handlers of the workers' asks on `host`."""
    host.on_ask("comfy.progress", _progress)
    host.on_ask("comfy.progress_state", _progress_state)
    host.on_ask("comfy.send_sync", _send_sync)
    host.on_ask("comfy.send_progress_text", _send_progress_text)
    host.on_ask("comfy.free_memory", _free_memory_for_worker)
    host.on_ask("comfy.prompt_queue", _prompt_queue)
    host.on_ask("comfy.interrupt", _node_interrupt)


# What a running node asked of ComfyUI's interrupt flag (True, False), or None: set once a
# node has returned (node_call), where in process the next node sees it. One prompt runs at a
# time; an async node's call may end beside another node's, so the swap is locked.
_node_interrupt_value = None
_node_interrupt_lock = threading.Lock()
# Whether this thread waits for a node's call (node_call), whose asks it runs.
_waiting_for_node = threading.local()


@contextlib.contextmanager
def node_call():
    """Around a node's call to its worker: an interrupt the node asks for is set in ComfyUI as
    the call ends."""
    outer = getattr(_waiting_for_node, "active", False)
    _waiting_for_node.active = True
    try:
        yield
    finally:
        _waiting_for_node.active = outer
        _apply_node_interrupt()


def _node_interrupt(asked):
    global _node_interrupt_value
    value = bool(asked["value"])
    if not (getattr(_waiting_for_node, "active", False) and asked.get("in_node", True)):
        # Asked outside a node (a pack's route or thread, of the running node's worker or
        # another's): set at once, as in process, where the running node sees it (and the next
        # prompt clears it as it starts).
        comfy.model_management.interrupt_current_processing(value)
        return
    with _node_interrupt_lock:
        _node_interrupt_value = value


def _apply_node_interrupt():
    """Sets ComfyUI's interrupt flag as the node that just ran asked, if it did."""
    global _node_interrupt_value
    with _node_interrupt_lock:
        value, _node_interrupt_value = _node_interrupt_value, None
    if value is not None:
        comfy.model_management.interrupt_current_processing(value)


def _progress(value):
    hook = comfy.utils.PROGRESS_BAR_HOOK
    if hook is not None:
        preview = value.get("preview")
        if preview is not None:
            from isohost_comfy_worker import previews

            preview = previews.decode(preview)
        hook(value["value"], value["total"], preview, value.get("prompt_id"),
             value.get("node_id"))


def _progress_state(value):
    """A class-based node's set_progress in a worker (isohost_comfy_worker/progress_state.py):
    the host's registry updated as in process, whose handlers tell the client."""
    from comfy_execution.progress import get_progress_state

    preview = value.get("preview")
    if preview is not None:
        from isohost_comfy_worker import previews

        preview = previews.decode(preview)
    get_progress_state().update_progress(value["node_id"], value["value"], value["max_value"],
                                         preview)


def _send_sync(value):
    from isohost_comfy_worker import messages
    from server import PromptServer

    PromptServer.instance.send_sync(*messages.decode(value))


def _send_progress_text(value):
    from server import PromptServer

    PromptServer.instance.send_progress_text(value["text"], value["node_id"], value.get("sid"))


# What a worker may do with the host's PromptQueue (isohost_comfy_worker/prompt_queue.py):
# methods it calls with JSON arguments, and attributes it reads a copy of; and the server's
# prompt counter, which numbers what is put in the queue ("number", "set_number").
_QUEUE_METHODS = {"get_current_queue", "get_current_queue_volatile", "get_tasks_remaining",
                  "get_history", "put", "set_flag", "wipe_queue", "wipe_history",
                  "delete_history_item"}
_QUEUE_ATTRIBUTES = {"queue", "currently_running", "history"}


def _prompt_queue(value):
    """A worker's use of ComfyUI's queue, answered as JSON (tuples as lists, keys as strings)."""
    import copy

    from server import PromptServer

    queue = PromptServer.instance.prompt_queue
    op, args = value.get("op"), value.get("args")
    if not isinstance(args, list):
        raise TypeError("prompt_queue.%s: the arguments must be a list" % (op,))
    if op == "number":
        return PromptServer.instance.number
    if op == "set_number":
        if len(args) != 1 or isinstance(args[0], bool) or not isinstance(args[0], (int, float)):
            raise TypeError("PromptServer.instance.number must be a number")
        PromptServer.instance.number = args[0]
        return None
    if op in _QUEUE_ATTRIBUTES:
        with queue.mutex:
            return copy.deepcopy(getattr(queue, op))
    if op not in _QUEUE_METHODS:
        raise ValueError("prompt_queue has no %r for an isolated worker" % (op,))
    if op == "put":
        if len(args) != 1:
            raise TypeError("prompt_queue.put takes one queue item, not %d" % len(args))
        args = [_queue_item(args[0])]
    return getattr(queue, op)(*args)


def _queue_item(item):
    """A worker's queue item as ComfyUI's prompt thread takes it: (number, prompt id, prompt,
    extra data, outputs to execute), and a newer ComfyUI's sensitive data after them. Anything
    else is refused: ComfyUI's heap would hold it, and its prompt thread would end on it."""
    shape = ((int, float), str, dict, dict, list, dict)
    if (not isinstance(item, list) or not 5 <= len(item) <= len(shape) or isinstance(item[0], bool)
            or not all(isinstance(part, kind) for part, kind in zip(item, shape))):
        raise TypeError("prompt_queue.put takes (number, prompt id, prompt, extra data, outputs "
                        "to execute): a number, a string, a dict, a dict and a list; got %s"
                        % _described(item))
    return tuple(item)


def _described(item):
    if not isinstance(item, list):
        return "a %s" % type(item).__name__
    return "(%s)" % ", ".join(type(part).__name__ for part in item)


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
