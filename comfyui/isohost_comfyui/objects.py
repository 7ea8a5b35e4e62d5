"""The node objects a worker keeps, dropped as ComfyUI drops its own (docs/comfyui.md,
"Stand-ins").

ComfyUI keeps one object per node id and class between prompts, and drops the objects of the
nodes that the next prompt lacks (its object cache is cleaned when each prompt starts): a node
removed from the graph loses its state, and whatever it held (a model, say) is freed. The worker
keeps one object per node id in the same way; at the first isolated node that runs in a new
prompt, the stand-in sends the prompt's (node id, class) pairs with the call, and the worker
drops the objects of every other node (isohost_comfy_worker.nodes). A prompt that runs no node of
an environment is not seen there: its objects live on until the next prompt that does."""


def executing():
    """(prompt id, node id) of the node ComfyUI is executing, or (None, None) outside one."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return None, None
    context = get_executing_context()
    if context is None:
        return None, None
    return context.prompt_id, context.node_id


def prompt_state(prompt_id):
    """{"prompt_id", "client_id"} of the running prompt, as ComfyUI's server has them (a worker
    sets them on its own PromptServer.instance, comfy_env.enter_node)."""
    from .prompt_server import running

    return {"prompt_id": prompt_id, "client_id": getattr(running(), "client_id", None)}


class LiveNodes:
    """Per environment, the last prompt its worker was told of."""

    def __init__(self):
        self._told = {}

    def for_call(self, env, prompt_id):
        """The running prompt's [[node id, class type]] if `env`'s worker has not been told of
        `prompt_id` yet, else None (nothing to drop)."""
        if prompt_id is None or self._told.get(env) == prompt_id:
            return None
        nodes = _prompt_nodes(prompt_id)
        if nodes is not None:
            self._told[env] = prompt_id
        return nodes

    def forget(self, env):
        """`env`'s worker may be a new one (after a failure): tell it again."""
        self._told.pop(env, None)


def _prompt_nodes(prompt_id):
    prompt = running_prompt(prompt_id)
    if prompt is None:  # not ComfyUI's server (a test harness, another host): keep everything
        return None
    return [[str(node_id), node.get("class_type")] for node_id, node in prompt.items()
            if isinstance(node, dict)]


def running_prompt(prompt_id):
    """The prompt `prompt_id` as ComfyUI's queue runs it ({node id: {"class_type", "inputs"}}),
    or None where there is no such server or prompt."""
    try:
        from server import PromptServer

        running = list(PromptServer.instance.prompt_queue.currently_running.values())
    except Exception:
        return None
    for item in running:
        if len(item) > 2 and item[1] == prompt_id and isinstance(item[2], dict):
            return item[2]
    return None
