"""Node outputs kept in the worker between the nodes of its environment (docs/comfyui.md,
"Values that stay in the worker").

An isolated node's IMAGE, LATENT or MASK would cross to the host's ComfyUI after the node and
back for the next one, a copy each way, though the next node runs here too. So the worker keeps
each output that holds a tensor and answers a mark in its place, {"isohost_held": id, "pid":
pid}, which the host's stand-in wraps in an object ComfyUI caches like any output
(isohost_comfyui.held). A stand-in of this environment sends the mark back as its input and
the worker puts the value in; any other node asks for the value itself (take), once. The host
says which marks ComfyUI no longer holds with the next call (drop); a mark of another process
(the worker was replaced) or one dropped is refused with HeldValueGone.

An object of a class of the pack's own (Impact Pack's SEGS, a PIPE) or of a library of its
environment alone is kept the same way, tensor or not: the host could not unpickle it at all
(values.worker_only_class). Where such an output must cross all the same (a node outside this
environment reads it), a refusal,
{"isohost_cannot_cross": class name}, goes in its place, and the host fails the node with
ObjectCannotCross, naming the output, not with a DecodeError about a module named after the
pack's path.

Standard library; torch only through sys.modules (a worker without it holds no tensors)."""

import itertools
import os
import sys

from isohost_comfy_worker import values

MARK = "isohost_held"
# In place of an output the host could not unpickle: the host raises ObjectCannotCross for it.
REFUSED = "isohost_cannot_cross"

# id -> the value, for as long as the host's ComfyUI holds its mark.
_values = {}
_ids = itertools.count(1)


class HeldValueGone(LookupError):
    """A mark whose value this worker does not hold: another process made it (this worker
    replaced the one that did) or the host dropped it."""


# What to do with each output (the host's isohost_comfyui.held.keep_modes): send it back, keep
# it (if it holds a tensor or a pack's object), keep each item of a list output.
CROSS, KEEP, KEEP_EACH = 0, 1, 2


def keep_outputs(result, modes):
    """`result` (a node's tuple, or {"ui": ..., "result": tuple}) with the outputs `modes` says
    to keep kept here and marked, where they hold a tensor or a pack's object, and the others
    refused where they are a pack's object."""
    if isinstance(result, dict) and isinstance(result.get("result"), (tuple, list)):
        return dict(result, result=keep_outputs(result["result"], modes))
    if not isinstance(result, (tuple, list)):
        return result
    out = []
    for index, value in enumerate(result):
        mode = modes[index] if index < len(modes) else CROSS
        if mode == KEEP_EACH and isinstance(value, list):
            out.append([_keep(item) for item in value])
        elif mode == KEEP:
            out.append(_keep(value))
        else:
            out.append(_crossing(value))
    return tuple(out) if isinstance(result, tuple) else out


def put_back(items):
    """The node's (name, value) inputs with each mark of this worker replaced by its value
    (also inside a list: an INPUT_IS_LIST input)."""
    return [(name, [_value_of(v) for v in value] if isinstance(value, list) else _value_of(value))
            for name, value in items]


def take(mark):
    """The value behind `mark`, for a node that does not run here (refused where the host could
    not unpickle it); it stays kept until the host drops it (ComfyUI may hand the output to
    more nodes)."""
    return _crossing(_value_of(mark, must=True))


def drop(let_go):
    """Forget the values the host's ComfyUI holds the marks of no more: [pid, id] pairs, of
    which only this process's are its own (a replaced worker's ids start again at 1)."""
    pid = os.getpid()
    for entry in let_go or ():
        if isinstance(entry, (list, tuple)) and len(entry) == 2 and entry[0] == pid:
            _values.pop(entry[1], None)


def count():
    """How many values are kept (tests, the memory report)."""
    return len(_values)


def _keep(value):
    # A tensor is kept to save its copies; a pack's object because it could not cross at all.
    if not (_holds_tensor(value, 2) or values.worker_only_class(value)):
        return value
    held_id = next(_ids)
    _values[held_id] = value
    return {MARK: held_id, "pid": os.getpid()}


def _crossing(value):
    """`value` as it crosses to the host: itself, or a refusal where the host could not
    unpickle it (a DecodeError naming a module after the pack's path would say nothing)."""
    name = values.worker_only_class(value)
    return value if name is None else {REFUSED: name}


def _value_of(value, must=False):
    if not (isinstance(value, dict) and MARK in value):
        if must:
            raise TypeError("not a mark of a held value: %r" % (value,))
        return value
    held_id = value.get(MARK)
    if value.get("pid") != os.getpid() or held_id not in _values:
        raise HeldValueGone(
            "value %r of an earlier node is no longer held: %s" % (
                held_id, "the worker that held it was replaced" if value.get("pid") != os.getpid()
                else "the host had let it go"))
    return _values[held_id]


def _holds_tensor(value, depth):
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0:
        return False
    if isinstance(value, dict):
        return any(_holds_tensor(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v, depth - 1) for v in value)
    return False
