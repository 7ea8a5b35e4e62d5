"""Running a pack's node in its worker, for the host's stand-in (docs/comfyui.md, "Stand-ins").

ComfyUI keeps one object per node id between prompts, and nodes keep state on `self` (a loaded
model, a counter, a cache), so the worker does too: one instance per (node class, node id),
made at the first run and kept while the worker lives. Each entry point prepares the worker
first (comfy_env.prepare), so a fresh worker after a crash or reap serves the next prompt."""

from isohost_comfy_worker import autograd_mode, comfy_env, held, packs, progress_state, values

# (pack_dir, class name, node id) -> the node object ComfyUI would hold.
_instances = {}


def run(pack_dir, class_name, node_id, kwargs, settings, live=None, keep=None, drop=None,
        prompt=None, graph_prefix=None, hidden_back=None, autograd=None):
    """The node's FUNCTION on its kept instance, with ComfyUI's keyword arguments (a dict, or
    its items in order: a node that takes **kwargs may read them in order); returns what it
    returned (a tuple, or {"ui": ..., "result": ...}). `live`: the running prompt's [node id,
    class] pairs, at the first node of a new prompt; the objects of other nodes are dropped, as
    ComfyUI drops its own; `prompt` comes with it: {"prompt_id", "client_id"}. `keep`: per
    output, whether it stays here, marked, where it holds a tensor (held.py); `drop`: the
    [pid, id] of held values the host let go of. `graph_prefix`: ComfyUI's GraphBuilder prefix
    for this node, [root, call index, graph index]. `hidden_back`: names of hidden inputs (the
    prompt, its PNG info) that the host's nodes share; their values after the node ran come back
    beside its result: {"result": ..., "hidden": {name: value}}. `autograd`: the mode ComfyUI's
    thread was in (autograd_mode.py), which the node runs in."""
    comfy_env.prepare(settings)
    comfy_env.enter_node(node_id, prompt)
    held.drop(drop)
    if live is not None:
        keep_only(live)
    if graph_prefix is not None:
        from comfy_execution.graph_utils import GraphBuilder

        GraphBuilder.set_default_prefix(*graph_prefix)
    kwargs = dict(held.put_back(kwargs.items() if isinstance(kwargs, dict) else kwargs))
    shared = {name: kwargs.get(name) for name in hidden_back or ()}  # a class-based node pops them
    cls = _class(pack_dir, class_name)
    with autograd_mode.entered(autograd), progress_state.executing(node_id):
        if _is_class_based(cls):
            result = _node_output(_run_class_based(cls, cls.FUNCTION, kwargs))
        else:
            node = _instance(pack_dir, class_name, node_id, cls)
            result = packs.resolved(getattr(node, cls.FUNCTION)(**kwargs))
    values.refuse_models(result, class_name, getattr(cls, "RETURN_NAMES", None)
                         or getattr(cls, "RETURN_TYPES", ()))
    # Without the host's word (keep_outputs_in_workers off, a node run outside a prompt) every
    # output crosses, and a pack's own object is refused by name (held.keep_outputs).
    result = held.keep_outputs(result, keep if keep is not None else ())
    return result if hidden_back is None else {"result": result, "hidden": shared}


def take_held(mark, settings):
    """The value a held mark stands for, for a node that does not run in this worker."""
    return held.take(mark)


def is_changed(pack_dir, class_name, kwargs, settings, autograd=None):
    """IS_CHANGED of a V1 node, fingerprint_inputs of a class-based one, in ComfyUI's
    `autograd` mode (ComfyUI asks it as a prompt starts, under inference mode)."""
    return _class_method(pack_dir, class_name, "IS_CHANGED", "fingerprint_inputs", kwargs,
                         settings, autograd)


def validate_inputs(pack_dir, class_name, kwargs, settings):
    """VALIDATE_INPUTS of a V1 node, validate_inputs of a class-based one. Its `input_types`
    come as names, a wildcard as {WILDCARD: name} (values.type_name)."""
    kwargs = [(key, {k: values.wildcard_again(v) for k, v in value.items()}
               if key == "input_types" and isinstance(value, dict) else value)
              for key, value in (kwargs.items() if isinstance(kwargs, dict) else kwargs)]
    return _class_method(pack_dir, class_name, "VALIDATE_INPUTS", "validate_inputs", kwargs,
                         settings)


def _class_method(pack_dir, class_name, v1_name, class_based_name, kwargs, settings,
                  autograd=None):
    # The worker is prepared and the pack imported (on a new worker's first call) outside the
    # mode, as ComfyUI imports packs as it starts: a tensor a pack makes at import is not an
    # inference tensor, whichever call reaches a new worker first.
    comfy_env.prepare(settings)
    cls = _class(pack_dir, class_name)
    with autograd_mode.entered(autograd):
        if _is_class_based(cls):
            return _run_class_based(cls, class_based_name, dict(kwargs))
        return packs.resolved(getattr(cls, v1_name)(**dict(kwargs)))


def check_lazy_status(pack_dir, class_name, node_id, kwargs, settings, autograd=None):
    """The names of the lazy inputs the node needs evaluated before it runs (its
    check_lazy_status, on the instance kept for `node_id`; unevaluated inputs are None)."""
    comfy_env.prepare(settings)
    kwargs = dict(held.put_back(kwargs.items() if isinstance(kwargs, dict) else kwargs))
    cls = _class(pack_dir, class_name)
    with autograd_mode.entered(autograd):
        if _is_class_based(cls):
            return _run_class_based(cls, "check_lazy_status", kwargs)
        node = _instance(pack_dir, class_name, node_id, cls)
        return packs.resolved(node.check_lazy_status(**kwargs))


def keep_only(live):
    """Drops the objects of every node but the (node id, class) pairs in `live`."""
    keep = {(str(node_id), class_name) for node_id, class_name in live}
    for key in [k for k in _instances if (k[2], k[1]) not in keep]:
        del _instances[key]


def _class(pack_dir, class_name):
    classes = packs.node_classes(pack_dir)
    if class_name not in classes:
        raise LookupError("pack %s has no node %r (it has %s)"
                          % (pack_dir, class_name, ", ".join(sorted(classes)) or "none"))
    return classes[class_name]


def _instance(pack_dir, class_name, node_id, cls):
    key = (pack_dir, class_name, str(node_id))
    node = _instances.get(key)
    if node is None:
        node = _instances[key] = cls()
    return node


def _is_class_based(cls):
    try:
        from comfy_api.internal import _ComfyNodeInternal
    except ImportError:
        return False
    return issubclass(cls, _ComfyNodeInternal)


def _run_class_based(cls, method, kwargs):
    """A comfy_api node, run as ComfyUI's execution.py runs one: on a locked clone of its class,
    whose `hidden` holds the hidden inputs (PROMPT, UNIQUE_ID, ...) that the host's stand-in
    received as keyword arguments."""
    from comfy_api.internal import make_locked_method_func
    from comfy_api.latest import io

    cls.VALIDATE_CLASS()
    hidden = {}
    for name, spec in cls.INPUT_TYPES(include_hidden=True).get("hidden", {}).items():
        if name in kwargs:
            hidden[io.Hidden(spec[0])] = kwargs.pop(name)
    clone = cls.PREPARE_CLASS_CLONE(hidden)
    return packs.resolved(make_locked_method_func(cls, method, clone)(**kwargs))


def _node_output(result):
    """A class-based node's NodeOutput as a V1 node returns it: its result tuple and ui."""
    if isinstance(result, (tuple, list, dict)) or not hasattr(result, "result"):
        return result  # what a V1 node returns, which ComfyUI also takes from one
    ui = getattr(result, "ui", None)
    if ui is not None and not isinstance(ui, dict):
        ui = ui.as_dict()
    out = {"result": tuple(result.result) if result.result is not None else ()}
    if ui is not None:
        out["ui"] = ui
    return out
