"""Stand-in node classes: what ComfyUI registers for an isolated pack's node (docs/comfyui.md,
"Stand-ins").

A stand-in has everything ComfyUI reads from the real class (INPUT_TYPES, RETURN_TYPES, ...,
as the worker described them), and its FUNCTION runs the real node in the pack's worker, on an
instance kept there for this node id; its outputs that hold tensors stay there (held.py).
VALIDATE_INPUTS exists only where the real class has it, and the worker answers it, with the
real one's parameter names, since ComfyUI passes only the inputs it names. IS_CHANGED is the
worker's answer where the real class has one, with held.py's token beside it, and the token
alone where not. A stand-in of an async FUNCTION is async too: its call waits on a thread of
its own, so that ComfyUI runs other nodes meanwhile, as it does while the real node awaits."""

import asyncio
import contextvars
import copy
import functools
import inspect
import keyword
import logging
import os
import sys
import threading

import comfy.model_management

import isohost
from isohost_comfy_worker import autograd_mode
from isohost_comfy_worker import values as worker_values

from . import bridge, errors, file_lists, held, objects
from .models import refuse_model_inputs
from .worker_settings import reference as settings_reference

# Attributes copied from the description as they are, and those ComfyUI expects as tuples.
_PLAIN = ("CATEGORY", "DESCRIPTION", "OUTPUT_NODE", "INPUT_IS_LIST", "DEPRECATED",
          "EXPERIMENTAL", "API_NODE", "SEARCH_ALIASES", "NOT_IDEMPOTENT")
_TUPLES = ("RETURN_TYPES", "RETURN_NAMES", "OUTPUT_IS_LIST", "OUTPUT_TOOLTIPS")
_WORKER = "isohost_comfy_worker.nodes:"
_log = logging.getLogger("isohost")


class Runner:
    """Runs calls in the workers the way ComfyUI runs a node: interruptible, with the worker's
    failure raised as ComfyUI reports a node's."""

    def __init__(self, host, worker_settings, interrupt_grace_seconds):
        self.host = host
        # {env: what its worker applies once (isohost_comfy_worker.comfy_env.prepare)}.
        self.worker_settings = worker_settings
        self.grace = interrupt_grace_seconds
        self.live_nodes = objects.LiveNodes()
        # The environments whose worker answered a call that carried the settings whole: calls
        # then carry their key alone (the whole settings cost a 2-core machine 0.2 ms a call
        # to check and encode). A worker that lacks them (a new one, after a reap the runner
        # did not see) raises SettingsNeeded, and the call goes again with them.
        self._settled = set()
        self.held = held.HeldBook(self)
        # Whether outputs stay in their workers: only with ComfyUI's inputs hooked, so that a
        # node in process never meets a Held (held.install).
        self.keep_outputs = False

    def call(self, env, node, function, *args, **kwargs):
        return self._called(env, node, function, args, kwargs, True)

    def call_unwatched(self, env, node, function, *args, **kwargs):
        """`call` that neither watches nor clears ComfyUI's interrupt flag: a VALIDATE_INPUTS
        that ComfyUI awaits on its event loop as a prompt is posted, while another prompt may
        run, whose interrupt is that prompt's (in process, validation is not interrupted)."""
        return self._called(env, node, function, args, kwargs, False)

    def _called(self, env, node, function, args, kwargs, watched):
        with bridge.node_call():
            try:
                return self._call(env, node, function, args, kwargs, watched)
            except BaseException:
                self.live_nodes.forget(env)  # its worker may be replaced: tell the next one
                self._settled.discard(env)
                raise

    def _call(self, env, node, function, args, kwargs, watched):
        settings = self.worker_settings[env]
        sent = settings_reference(settings) if env in self._settled else settings
        try:
            result = self._run(env, node, function, args, kwargs, sent, watched)
        except _SettingsNeeded:
            _log.info("isohost: environment '%s' has a new worker; its settings go again", env)
            result = self._run(env, node, function, args, kwargs, settings, watched)
        self._settled.add(env)
        return result

    def _run(self, env, node, function, args, kwargs, settings, watched):
        call = self.host.start(env, _WORKER + function, *args, settings, **kwargs)
        interrupted = False
        while True:
            try:
                return call.result(timeout=0.02)
            except TimeoutError:
                # ComfyUI's interrupt (POST /interrupt) sets this flag; a node in process sees
                # it at its next progress tick. The worker's call sees it at its next bytecode.
                if watched and not interrupted and (comfy.model_management.processing_interrupted()
                                                    or _cancelled()):
                    interrupted = True
                    call.interrupt(self.grace)
            except isohost.Interrupted as e:
                if not watched:
                    raise errors.node_error(e, node, env) from None
                _raise_interrupted()
            except isohost.WorkerException as e:
                if watched and _is_interrupt(e.type_name):
                    _raise_interrupted()
                if e.type_name == _SETTINGS_NEEDED:
                    raise _SettingsNeeded() from None
                raise errors.node_error(e, node, env) from None
            except isohost.Error as e:
                raise errors.node_error(e, node, env) from None


_SETTINGS_NEEDED = "isohost_comfy_worker.comfy_env.SettingsNeeded"

# Set while an async stand-in's call waits on its thread (_awaiting): what the call takes from
# the moment its node started, where the thread runs on while ComfyUI runs other nodes.
_awaited = contextvars.ContextVar("isohost_awaited", default=None)


class _Awaited:
    """`cancelled`: set when ComfyUI cancels the node's task (a prompt ending on another node's
    error cancels the tasks it leaves), and the call is then interrupted as for ComfyUI's
    interrupt, where it would run on to its end. `graph_prefix`: ComfyUI's prefix for the node's
    expansions as it started (ComfyUI sets the next node's before the thread reads it)."""

    __slots__ = ("cancelled", "graph_prefix")

    def __init__(self, graph_prefix):
        self.cancelled = threading.Event()
        self.graph_prefix = graph_prefix


def _cancelled():
    awaited = _awaited.get()
    return awaited is not None and awaited.cancelled.is_set()


class _SettingsNeeded(Exception):
    """The worker had only the settings' key and has not applied them."""


def _is_interrupt(type_name):
    return bool(type_name) and type_name.endswith(("InterruptProcessingException", ".Interrupted"))


def _raise_interrupted():
    # As in process: the exception that ends the prompt as interrupted, with the flag cleared;
    # but not by an async node's thread, where the node the prompt's thread runs meanwhile must
    # see the flag too, as it would in process (ComfyUI clears it there, or as the next prompt
    # starts).
    if _awaited.get() is None:
        comfy.model_management.throw_exception_if_processing_interrupted()
    raise comfy.model_management.InterruptProcessingException()


class _StandInType(type):
    """The stand-ins' type. ComfyUI names the module of each class a custom node module
    registers (RELATIVE_PYTHON_MODULE, /object_info's `python_module`: the frontend's badge and
    the node library's grouping by pack) by assigning it as it loads the module, here the
    adapter; a stand-in keeps the name ComfyUI gives its pack loaded in process instead."""

    @property
    def RELATIVE_PYTHON_MODULE(cls):
        return cls.ISOHOST_PYTHON_MODULE

    @RELATIVE_PYTHON_MODULE.setter
    def RELATIVE_PYTHON_MODULE(cls, adapter_module):
        pass  # the adapter's name: not the pack's


@functools.lru_cache(maxsize=None)  # once per pack, not once per node: it stats the pack
def _pack_module(pack_dir):
    """What ComfyUI names a custom node pack's module (nodes.load_custom_node): its directory's
    name, or its file's without the suffix, under custom_nodes."""
    base = os.path.basename(os.path.normpath(str(pack_dir)))
    if os.path.isfile(pack_dir):
        base = os.path.splitext(base)[0]
    return "custom_nodes." + base


def make(runner, env, pack_dir, name, description):
    """The stand-in class for node `name` of the pack at `pack_dir`."""
    description = _with_wildcards(description)
    input_types = _input_types(description["input_types"], description.get("schema") == "v3",
                               description.get("open_inputs") or {})
    lists = description.get("file_lists") or {}
    attrs = {
        "INPUT_TYPES": classmethod(lambda cls: file_lists.filled(_copy(input_types), lists)),
        "FUNCTION": "run_isolated",
        "ISOHOST_ENV": env,
        "ISOHOST_PACK": pack_dir,
        "ISOHOST_PYTHON_MODULE": _pack_module(pack_dir),
        "__doc__": "%s, run in isohost environment '%s'" % (name, env),
    }
    for key in _PLAIN:
        if key in description:
            attrs[key] = description[key]
    for key in _TUPLES:
        if key in description:
            attrs[key] = tuple(description[key])

    outputs = len(attrs.get("RETURN_TYPES", ()))
    output_is_list = [bool(flag) for flag in attrs.get("OUTPUT_IS_LIST", ())][:outputs]
    output_is_list += [False] * (outputs - len(output_is_list))

    # The hidden inputs a node may change for the nodes after it (a seed node writing the seed
    # it used into the prompt that SaveImage embeds): they come back from the worker.
    written_back = [key for key, spec in (input_types.get("hidden") or {}).items()
                    if spec in _SHARED_HIDDEN]

    def call(self, inputs, autograd):
        """The node run in its worker, in ComfyUI's `autograd` mode (autograd_mode.py): (its
        result as ComfyUI takes it, {hidden input: its state after the node ran})."""
        # As (name, value) items, in the order ComfyUI passed them.
        items = runner.held.inputs_for(env, list(inputs.items()))
        refuse_model_inputs(dict(items), name)
        prompt_id, node_id = objects.executing()
        keep = (runner.held.keep_modes(env, prompt_id, node_id, output_is_list)
                if runner.keep_outputs else None)
        live = runner.live_nodes.for_call(env, prompt_id)
        if keep and any(mode != held.CROSS for mode in keep):
            runner.held.keep_for_prompt(env)  # before the call: kept once it is idle again
        hidden = [key for key in written_back if isinstance(inputs.get(key), dict)]
        drop = runner.held.let_go_since(env)
        try:
            # The worker's asks (ComfyUI's free_memory, previews) are answered on this thread,
            # an async node's own: in ComfyUI's mode, as they would be in process.
            with autograd_mode.entered(autograd):
                result = runner.call(
                    env, name, "run", pack_dir, name, node_id or "object-%x" % id(self), items,
                    live=live, keep=keep, drop=drop,
                    prompt=None if live is None else objects.prompt_state(prompt_id),
                    graph_prefix=_node_graph_prefix(), hidden_back=hidden or None,
                    autograd=autograd)
        except BaseException:
            runner.held.let_go_again(env, drop)
            raise
        changed = {}
        if hidden:
            result, changed = result["result"], result["hidden"]
        return runner.held.wrap(env, name, result, output_is_list), changed

    def run_isolated(self, **inputs):
        result, changed = call(self, inputs, autograd_mode.current())
        for key, state in changed.items():
            _update_in_place(inputs[key], state)
        return result

    attrs["run_isolated"] = (_awaiting(call, written_back) if description.get("async")
                             else run_isolated)
    if description.get("check_lazy_status"):
        def check_lazy_status(self, **inputs):
            node_id = objects.executing()[1] or "object-%x" % id(self)
            return runner.call(env, name, "check_lazy_status", pack_dir, name, node_id,
                               runner.held.inputs_for(env, list(inputs.items())),
                               autograd=autograd_mode.current())

        attrs["check_lazy_status"] = check_lazy_status
    if description.get("is_changed"):
        attrs["IS_CHANGED"] = classmethod(
            lambda cls, **inputs: held.with_token(
                runner.call(env, name, "is_changed", pack_dir, name, list(inputs.items()),
                            autograd=autograd_mode.current()),
                runner.held.token(env)))
    else:
        attrs["IS_CHANGED"] = classmethod(lambda cls, **inputs: runner.held.token(env))
    if description.get("validate_inputs"):
        attrs["VALIDATE_INPUTS"] = _validate_inputs(runner, env, pack_dir, name,
                                                    description["validate_inputs"])
    return _StandInType(name if name.isidentifier() else "IsolatedNode", (), attrs)


def _awaiting(call, written_back):
    """The stand-in of an async FUNCTION: a coroutine function (ComfyUI starts such nodes first
    and runs others while they await) whose `call` to the worker waits on a thread of its own,
    in the node's context (ComfyUI's executing node), which asyncio.to_thread copies. Of the
    shared hidden inputs it took (`written_back`), only what the node changed is written back,
    on ComfyUI's thread: the prompt's other nodes ran meanwhile and may have changed the rest."""
    async def run_isolated(self, **inputs):
        before = {key: copy.deepcopy(inputs[key]) for key in written_back
                  if isinstance(inputs.get(key), dict)}
        awaited = _Awaited(_graph_prefix())
        autograd = autograd_mode.current()  # this thread's: the call's is another
        # Reset after the call: ComfyUI gives each call a task (a context) of its own, but a
        # pack that awaits a stand-in itself would keep it in its own context.
        token = _awaited.set(awaited)
        try:
            result, changed = await asyncio.to_thread(call, self, inputs, autograd)
        except asyncio.CancelledError:
            awaited.cancelled.set()
            raise
        finally:
            _awaited.reset(token)
        for key, state in changed.items():
            _apply_changes(inputs[key], before[key], state)
        return result

    return run_isolated


def _validate_inputs(runner, env, pack_dir, name, parameters):
    """A classmethod with the real VALIDATE_INPUTS's parameter names. Where ComfyUI awaits a
    node's validation (0.3.4x on), on its event loop as a prompt is posted, it is a coroutine
    function whose call waits on a thread: the worker may be busy with another prompt's node of
    its environment, or starting, and ComfyUI's server (progress, /interrupt) must not wait."""
    names = [n for n in parameters["names"] if n.isidentifier() and not keyword.iskeyword(n)]
    signature = ", ".join(["cls"] + names + (["**more"] if parameters["varkw"] else []))
    passed = "{%s}" % ", ".join("%r: %s" % (n, n) for n in names)
    if parameters["varkw"]:
        passed = "dict(%s, **more)" % passed
    if _validation_awaited():
        source = ("async def VALIDATE_INPUTS(%s):\n    return await _to_thread(_call, %s)\n"
                  % (signature, passed))
    else:
        source = "def VALIDATE_INPUTS(%s):\n    return _call(%s)\n" % (signature, passed)
    scope = {"_to_thread": asyncio.to_thread,
             "_call": lambda inputs: runner.call_unwatched(
                 env, name, "validate_inputs", pack_dir, name,
                 _types_as_names(list(inputs.items())))}
    exec(source, scope)  # noqa: S102 (names checked above: identifiers only)
    return classmethod(scope["VALIDATE_INPUTS"])


def _validation_awaited():
    """Whether this ComfyUI awaits a node's VALIDATE_INPUTS: its validate_inputs is a coroutine
    function since it runs async nodes (before, it called VALIDATE_INPUTS and took a coroutine
    for an answer)."""
    execution = sys.modules.get("execution")
    return inspect.iscoroutinefunction(getattr(execution, "validate_inputs", None))


def _types_as_names(items):
    """VALIDATE_INPUTS's `input_types` ({input: the type linked to it}) with each type as it
    crosses (values.type_name): the linked node's types are often instances of a pack's own
    str subclass (`AnyType`), or ours, which the worker cannot unpickle."""
    return [(key, {k: worker_values.type_name(v) if isinstance(v, str) else v
                   for k, v in value.items()}
             if key == "input_types" and isinstance(value, dict) else value)
            for key, value in items]


def _input_types(described, class_based, open_inputs):
    """INPUT_TYPES as the real class returns it: each input's spec a tuple (type, options), and
    a category that takes inputs of any name taking them (_OpenInputs)."""
    out = {}
    for category, inputs in described.items():
        if isinstance(inputs, dict):
            out[category] = {k: tuple(v) if isinstance(v, list) else v for k, v in inputs.items()}
            if category in open_inputs:
                spec = open_inputs[category]
                out[category] = _OpenInputs(out[category],
                                            tuple(spec) if isinstance(spec, list) else spec)
        else:
            out[category] = inputs
    if class_based and isinstance(out.get("hidden"), dict):
        out["hidden"] = {k: _HiddenSpec(v) if isinstance(v, tuple) else v
                         for k, v in out["hidden"].items()}
    return out


def _with_wildcards(value):
    """`value` (a description, or part of one) with each {WILDCARD: name} a Wildcard again."""
    value = worker_values.wildcard_again(value)
    if isinstance(value, dict):
        return {k: _with_wildcards(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_wildcards(v) for v in value]
    return value


class _OpenInputs(dict):
    """A category of INPUT_TYPES that takes inputs of any name, as the real node's (scan's
    open_inputs): ComfyUI passes a node each input of the prompt that `in` finds in its
    categories, and reads an undeclared one's spec with []. Copied as itself."""

    def __init__(self, declared, spec):
        super().__init__(declared)
        self.spec = spec

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return dict.get(self, key, self.spec)

    def copy(self):
        return _OpenInputs(self, self.spec)


class _HiddenSpec(tuple):
    """A class-based node's hidden input, ("PROMPT",) as ComfyUI shows it for such a node, and
    equal to "PROMPT", which is what ComfyUI's execution looks for in a V1 node's hidden inputs
    to pass the value; the stand-in is a V1 node, and the worker hands the value to the real
    class's `hidden`."""

    def __eq__(self, other):
        if isinstance(other, str):
            return len(self) == 1 and self[0] == other
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    __hash__ = tuple.__hash__


def _copy(input_types):
    return {category: inputs.copy() if isinstance(inputs, dict) else inputs
            for category, inputs in input_types.items()}


# Hidden inputs that are the host's own objects, shared by every node of the prompt.
_SHARED_HIDDEN = ("PROMPT", "EXTRA_PNGINFO")


def _graph_prefix():
    """ComfyUI's prefix for the ids of nodes a node expands into (GraphBuilder), which it sets
    in this process before each node runs: "<node id>.<call index>.<graph index>.", so that two
    nodes' expansions never share an id."""
    from comfy_execution.graph_utils import GraphBuilder

    return [GraphBuilder._default_prefix_root, GraphBuilder._default_prefix_call_index,
            GraphBuilder._default_prefix_graph_index]


def _node_graph_prefix():
    """_graph_prefix as the running node started: an async node's thread reads it later."""
    awaited = _awaited.get()
    return _graph_prefix() if awaited is None else awaited.graph_prefix


def _apply_changes(target, before, after):
    """Make in the dict `target` the changes from `before` to `after` (a node's, made on a copy),
    leaving what else changed in `target` meanwhile; dicts both hold are changed in place."""
    for key in before:
        if key not in after:
            target.pop(key, None)
    for key, value in after.items():
        old = before.get(key, _ABSENT)
        if isinstance(old, dict) and isinstance(value, dict) and isinstance(target.get(key), dict):
            _apply_changes(target[key], old, value)
        elif old is _ABSENT or old != value:
            target[key] = value


_ABSENT = object()


def _update_in_place(target, source):
    """Make the dict `target` equal to `source`, keeping the objects both hold where they are
    dicts: other holders of the prompt's parts see the node's changes, as in process."""
    for key in [k for k in target if k not in source]:
        del target[key]
    for key, value in source.items():
        if isinstance(target.get(key), dict) and isinstance(value, dict):
            _update_in_place(target[key], value)
        elif key not in target or target[key] != value:
            target[key] = value
