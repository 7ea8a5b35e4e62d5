"""Outputs that stay in their worker (docs/comfyui.md, "Values that stay in the worker").

An isolated node's output that holds a tensor, or an object of a class of its pack's own (or of
a library of its environment alone), stays in its worker (isohost_comfy_worker.held), and ComfyUI caches a Held in its place. The
next stand-in of the same environment sends it back as a mark, so the value never crosses; any
other node gets the value itself: the hook on ComfyUI's get_input_data fetches it (once) before
such a node runs, and a stand-in of another environment fetches it to send on. A Held that
ComfyUI drops is let go of with the environment's next call. Where the worker that held values
is gone (reaped, killed), its stand-ins answer a new IS_CHANGED token, so ComfyUI runs them
again instead of handing its cached, now empty, marks to the nodes after them. While a prompt
runs, an environment whose worker holds its nodes' outputs is kept (isohost.Host.keep): no reap
takes them between two of its nodes, as ComfyUI keeps its own outputs in process.

A pack's object that a node outside its environment reads comes as the worker's refusal
instead: this process could not unpickle it, so the node fails with ObjectCannotCross, naming
the output, its type, its class and its readers."""

import collections
import logging
import math
import threading

import isohost

# The mark's key and what the worker does with each output, as the worker side defines them.
from isohost_comfy_worker.held import CROSS, KEEP, KEEP_EACH, MARK, REFUSED
from isohost_comfy_worker.values import ObjectCannotCross

from . import objects

_log = logging.getLogger("isohost")


class Held:
    """Output `output` of node `node`, kept by `env`'s worker (pid `pid`) under `id`."""

    __slots__ = ("env", "node", "output", "id", "pid", "_book", "_value", "_fetched")

    def __init__(self, book, env, node, mark, output=0):
        self.env, self.node, self.output = env, node, output
        self.id, self.pid = mark[MARK], mark["pid"]
        self._book = book
        self._value = None
        self._fetched = False

    def mark(self):
        return {MARK: self.id, "pid": self.pid}

    def value(self):
        """The value itself, fetched from the worker the first time."""
        if not self._fetched:
            self._value = self._book.fetch(self)
            self._fetched = True
        return self._value

    def __del__(self):
        try:
            self._book.let_go(self)
        except Exception:  # the interpreter is ending; the worker ends with it
            pass

    def __repr__(self):
        return "<%s's output kept by isohost environment '%s' (pid %d, #%d)>" % (
            self.node, self.env, self.pid, self.id)


class HeldBook:
    """Per environment: the Helds let go of since its last call, and which worker holds its
    values, with the token its stand-ins' IS_CHANGED adds."""

    def __init__(self, runner):
        self._runner = runner
        # env -> deque of [pid, id], appended from any thread (a Held's __del__): a deque is
        # never replaced, and its append and popleft are atomic, so none is lost between them.
        self._let_go = {}
        self._holder = {}  # env -> (pid, start time) of the worker its Helds name
        self._epoch = {}   # env -> how many such workers it has lost
        self._readers = (None, {})  # (prompt id, {node id: {output: [class types reading it]}})
        # The environments kept (isohost.Host.keep) while the running prompt needs what their
        # workers hold: reaped between two of its nodes, a worker took the values with it. Only
        # where the prompt's end is seen (install), else nothing would let them go.
        self.keeps_for_prompts = False
        self._kept = set()
        self._kept_lock = threading.Lock()

    def keep_modes(self, env, prompt_id, node_id, output_is_list):
        """Per output of the node, what its worker does with it: keep it (KEEP, or KEEP_EACH
        item of a list output) where every node of the running prompt that reads it is a
        stand-in of `env`, and nothing else would fetch it; else CROSS with the answer. None
        outside a prompt ComfyUI's queue runs (nothing kept)."""
        readers = self._readers_in(prompt_id)
        if readers is None:
            return None
        by_output = readers.get(str(node_id), {})
        return [(KEEP_EACH if as_list else KEEP)
                if all(_env_of(t) == env for t in by_output.get(index, ())) else CROSS
                for index, as_list in enumerate(output_is_list)]

    def _readers_in(self, prompt_id):
        if prompt_id is None:
            return None
        if self._readers[0] != prompt_id:
            prompt = objects.running_prompt(prompt_id)
            if prompt is None:
                return None
            self._readers = (prompt_id, _readers(prompt))
        return self._readers[1]

    def wrap(self, env, node, result, output_is_list):
        """The run's answer with each mark in an output a Held; ObjectCannotCross where an
        output is the worker's refusal (raised once the marks are Helds: the worker is told to
        let go of what it kept)."""
        if isinstance(result, dict) and isinstance(result.get("result"), (tuple, list)):
            return dict(result, result=self.wrap(env, node, result["result"], output_is_list))
        if not isinstance(result, (tuple, list)):
            return result
        out = []
        for index, value in enumerate(result):
            if index < len(output_is_list) and output_is_list[index] and isinstance(value, list):
                out.append([self._held(env, node, item, index) for item in value])
            else:
                out.append(self._held(env, node, value, index))
        for index, value in enumerate(out):
            refused = _refusal_in(value)
            if refused is not None:
                raise cannot_cross(env, node, index, refused, self._readers_outside(env, index))
        return tuple(out) if isinstance(result, tuple) else out

    def inputs_for(self, env, items):
        """A stand-in's (name, value) inputs as they go to `env`'s worker: its own Helds as
        marks, others' as their values (also inside a list: an INPUT_IS_LIST input)."""
        return [(name, [self._for(env, v) for v in value] if isinstance(value, list)
                 else self._for(env, value)) for name, value in items]

    def let_go_since(self, env):
        """The [pid, id] of `env`'s Helds dropped since the last call, which the worker forgets."""
        let_go, taken = self._let_go.get(env), []
        while let_go:
            try:
                taken.append(let_go.popleft())
            except IndexError:
                break
        return taken or None

    def let_go_again(self, env, taken):
        """`let_go_since`'s pairs of a call that failed, perhaps before its worker had them (one
        interrupted in the queue): they go with the next call (a worker drops a pair once)."""
        if taken:
            self._let_go.setdefault(env, collections.deque()).extendleft(reversed(taken))

    def let_go(self, held):
        self._let_go.setdefault(held.env, collections.deque()).append([held.pid, held.id])

    def fetch(self, held):
        value = self._runner.call(held.env, held.node, "take_held", held.mark())
        refused = _refusal_in(value)
        if refused is not None:  # a pack's object, kept in a prompt that read it in `env` only
            raise cannot_cross(held.env, held.node, held.output, refused, ())
        return value

    def token(self, env):
        """The IS_CHANGED token of `env`'s stand-ins: the same while the worker holding its
        values lives, a new one once it is gone (their cached outputs name nothing then)."""
        holder = self._holder.get(env)
        if holder is not None and _start_time(holder[0]) != holder[1]:
            self._epoch[env] = self._epoch.get(env, 0) + 1
            del self._holder[env]
            _log.info("isohost: environment '%s' lost the worker that held its nodes' outputs; "
                      "ComfyUI runs them again", env)
        return "isohost-%s-%d" % (env, self._epoch.get(env, 0))

    def _held(self, env, node, value, output):
        if not (isinstance(value, dict) and MARK in value and isinstance(value.get("pid"), int)):
            return value
        holder = self._holder.get(env)
        if holder is None or holder[0] != value["pid"]:
            self._holder[env] = (value["pid"], _start_time(value["pid"]))
        return Held(self, env, node, value, output)

    def keep_for_prompt(self, env):
        """`env`'s worker holds, or is about to hold, outputs of the running prompt: keep it
        until the prompt ends."""
        if not self.keeps_for_prompts:
            return
        with self._kept_lock:
            if env in self._kept:
                return
            self._kept.add(env)
        self._keep(env, True)

    def prompt_starting(self):
        """A prompt starts: the workers holding outputs that ComfyUI's cache may hand its nodes
        are kept for it too."""
        for env, (pid, start_time) in list(self._holder.items()):
            if _start_time(pid) == start_time:
                self.keep_for_prompt(env)

    def prompt_ended(self):
        """ComfyUI's prompt ended: the workers holding its nodes' outputs may be reaped again
        (ComfyUI's cache may still name them: the token runs those nodes again then)."""
        with self._kept_lock:
            kept, self._kept = self._kept, set()
        for env in sorted(kept):
            self._keep(env, False)

    def _keep(self, env, kept):
        try:
            self._runner.host.keep(env, kept)
        except isohost.Error as e:  # the host is closing, say: its workers go with it
            _log.warning("isohost: environment '%s' could not be %s: %s", env,
                         "kept for the running prompt" if kept else "let go", e)

    def _readers_outside(self, env, output):
        """The class types of the running prompt's nodes outside `env` that read output
        `output` of the node ComfyUI is executing (for a message)."""
        prompt_id, node_id = objects.executing()
        readers = (self._readers_in(prompt_id) or {}).get(str(node_id), {})
        return [t for t in readers.get(output, ()) if _env_of(t) != env]

    def _for(self, env, value):
        if not isinstance(value, Held):
            return value
        return value.mark() if value.env == env else value.value()


def _refusal_in(value):
    """The class name in `value` where it is the worker's refusal (never an item of a list:
    the worker refuses a list output whole), or None."""
    if isinstance(value, dict) and len(value) == 1 and REFUSED in value:
        return value[REFUSED]
    return None


def cannot_cross(env, node, output, class_name, readers):
    """ObjectCannotCross for output `output` of `node`, an object of `class_name`, a class of
    its pack's own or of a library of its environment alone, which `readers` (class types) read
    outside `env`."""
    return ObjectCannotCross(
        "output %d (%s) of %s is a %s: only isolated environment '%s' can import its class (the "
        "pack's, or a library installed there alone), so the object cannot reach %s outside "
        "that environment; run the nodes that read it in environment '%s'" % (
            output, _output_type(node, output), node, class_name, env,
            ", ".join(sorted(set(readers))) or "a node", env))


def _output_type(node, output):
    """The type of output `output` of the stand-in ComfyUI registered as `node`."""
    import nodes

    types = getattr(nodes.NODE_CLASS_MAPPINGS.get(node), "RETURN_TYPES", ())
    return str(types[output]) if output < len(types) else "?"


def _readers(prompt):
    """{node id: {output index: [class types of the nodes reading it]}} of a prompt."""
    readers = {}
    for node in prompt.values():
        if not isinstance(node, dict) or not isinstance(node.get("inputs"), dict):
            continue
        for value in node["inputs"].values():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[1], int):
                readers.setdefault(str(value[0]), {}).setdefault(value[1], []).append(
                    node.get("class_type"))
    return readers


def _env_of(class_type):
    """The isohost environment whose stand-in ComfyUI registered as `class_type`, or None."""
    import nodes

    return getattr(nodes.NODE_CLASS_MAPPINGS.get(class_type), "ISOHOST_ENV", None)


def materialized(input_data_all):
    """ComfyUI's inputs for a node that is no stand-in, each Held replaced by its value."""
    for name, values in input_data_all.items():
        if isinstance(values, list) and any(isinstance(v, Held) for v in values):
            input_data_all[name] = [v.value() if isinstance(v, Held) else v for v in values]
    return input_data_all


def with_token(result, token):
    """A real IS_CHANGED's answer with the token; NaN (run every time) stays NaN."""
    if isinstance(result, float) and math.isnan(result):
        return result
    return (result, token)


def _start_time(pid):
    """The process's start time (/proc/PID/stat), which tells it from a later one of the same
    pid; None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()[19]


def install(runner):
    """Hook ComfyUI's get_input_data, so that a node that is no stand-in gets values, never a
    Held, and let the runner keep outputs in the workers; where this ComfyUI has no such
    function, outputs cross as before (said in the log)."""
    try:
        import execution
    except ImportError as e:
        _log.warning("isohost: outputs cross back after each isolated node: %s", e)
        return
    original = getattr(execution, "get_input_data", None)
    if original is None:
        _log.warning("isohost: outputs cross back after each isolated node: this ComfyUI's "
                     "execution.py has no get_input_data to hook")
        return
    if getattr(original, "isohost_hook", False):
        runner.keep_outputs = True
        return

    def get_input_data(inputs, class_def, *args, **kwargs):
        result = original(inputs, class_def, *args, **kwargs)
        if getattr(class_def, "ISOHOST_ENV", None) is None:
            materialized(result[0])
        return result

    get_input_data.isohost_hook = True
    execution.get_input_data = get_input_data
    _let_go_as_prompts_end(execution, runner)
    runner.keep_outputs = True


def _let_go_as_prompts_end(execution, runner):
    """Hook ComfyUI's PromptExecutor.execute (one prompt, however it ends) so that the workers
    kept for a prompt are let go as it ends."""
    executor = getattr(execution, "PromptExecutor", None)
    original = getattr(executor, "execute", None)
    if original is None:
        _log.warning("isohost: workers holding a prompt's outputs are not kept from reaps: this "
                     "ComfyUI's execution.py has no PromptExecutor.execute to hook")
        return

    def execute(self, *args, **kwargs):
        runner.held.prompt_starting()
        try:
            return original(self, *args, **kwargs)
        finally:
            runner.held.prompt_ended()

    executor.execute = execute
    runner.held.keeps_for_prompts = True
