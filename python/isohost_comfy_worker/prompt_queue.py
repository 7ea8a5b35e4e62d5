"""ComfyUI's `PromptServer.instance.prompt_queue` in a worker (docs/comfyui.md, "Progress,
messages and memory").

Packs read ComfyUI's queue (the prompt running, what waits, a past prompt's history) and a few
change it (a prompt put back in, the flags that unload models). The queue lives in the host's
ComfyUI: each method here asks it there (ask "comfy.prompt_queue", answered by bridge.py), on
ComfyUI's prompt thread while one of this worker's nodes runs, and on the host's thread
"isohost-tells" between nodes (a route handler, a pack's own thread). A host that serves no asks
between calls has a method raise QueueUnavailable saying so. Values cross as JSON: queue items
come back as tuples and `currently_running`'s keys as ints, as ComfyUI has them; the attributes
(`queue`, `currently_running`, `history`) are copies, read-only here.
"""

import isohost_worker


class QueueUnavailable(RuntimeError):
    """The host's ComfyUI queue cannot be reached: its host serves no such asks."""


class PromptQueue:
    """The methods and attributes of ComfyUI's PromptQueue that packs use."""

    def get_current_queue(self):
        return _queue_lists(_ask("get_current_queue"))

    def get_current_queue_volatile(self):
        return _queue_lists(_ask("get_current_queue_volatile"))

    def get_tasks_remaining(self):
        return _ask("get_tasks_remaining")

    def get_history(self, prompt_id=None, max_items=None, offset=-1, map_function=None):
        if map_function is not None:
            raise TypeError("prompt_queue.get_history(map_function=...) in an isolated worker: "
                            "the history is the host's, and a function cannot be sent there; "
                            "map the history this returns instead")
        return _ask("get_history", prompt_id, max_items, offset)

    def put(self, item):
        _ask("put", list(item))

    def set_flag(self, name, data):
        _ask("set_flag", name, data)

    def wipe_queue(self):
        _ask("wipe_queue")

    def wipe_history(self):
        _ask("wipe_history")

    def delete_history_item(self, id_to_delete):
        _ask("delete_history_item", id_to_delete)

    def delete_queue_item(self, function):
        raise TypeError("prompt_queue.delete_queue_item(function) in an isolated worker: the "
                        "queue is the host's, and a function cannot be sent there")

    @property
    def queue(self):
        return [tuple(item) for item in _ask("queue")]

    @property
    def currently_running(self):
        return {int(key): tuple(item) for key, item in _ask("currently_running").items()}

    @property
    def history(self):
        return _ask("history")

    def __setattr__(self, name, value):
        raise AttributeError("prompt_queue.%s cannot be replaced in an isolated worker: the queue "
                             "is the host's ComfyUI's, and this worker reads copies of it" % name)


def server_number():
    """ComfyUI's prompt counter (PromptServer.instance.number), which packs read and raise to
    number a prompt they put in the queue: the host's."""
    return _ask("number")


def set_server_number(value):
    _ask("set_number", value)


def _ask(op, *args):
    try:
        return isohost_worker.ask("comfy.prompt_queue", {"op": op, "args": list(args)})
    except isohost_worker.AskFailed as e:
        if e.type_name == "Unsupported":
            raise QueueUnavailable("prompt_queue.%s in an isolated worker asks the host's "
                                   "ComfyUI, and its host did not serve it (%s)"
                                   % (op, e.message)) from None
        raise


def _queue_lists(answer):
    running, queued = answer
    return [tuple(item) for item in running], [tuple(item) for item in queued]
