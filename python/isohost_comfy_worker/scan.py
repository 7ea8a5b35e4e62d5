"""What a pack's nodes look like to ComfyUI, described in the worker for the host's stand-ins
(docs/comfyui.md, "Scan"). Everything ComfyUI reads from a node class before it runs it, as
plain JSON: tuples become lists (the host turns the known ones back), a wildcard type becomes
{values.WILDCARD: its name}, anything else that is not JSON becomes its str()."""

import inspect
import json
import os

from isohost_comfy_worker import comfy_env, file_lists, packs, routes, values

# Class attributes copied as they are (JSON-able in any pack that ComfyUI can serve).
_PLAIN = ("CATEGORY", "DESCRIPTION", "OUTPUT_NODE", "INPUT_IS_LIST", "DEPRECATED",
          "EXPERIMENTAL", "API_NODE", "SEARCH_ALIASES", "NOT_IDEMPOTENT")
_TUPLES = ("RETURN_TYPES", "RETURN_NAMES", "OUTPUT_IS_LIST", "OUTPUT_TOOLTIPS")
# A name no pack declares: an INPUT_TYPES category that says it holds it takes inputs of any
# name. (A type that matches every other crosses as values.WILDCARD, values.type_name.)
_PROBE = "isohost-scan-probe"


def describe_json(pack_dir, settings):
    """describe() as JSON text: the adapter then reads the same lists and dicts whether the
    description comes from the worker or from its cache (a JSON file), where a tuple in it would
    otherwise come back a tuple the first time and a list after."""
    return json.dumps(describe(pack_dir, settings))


def describe(pack_dir, settings):
    """{"module", "web_directory", "display_names", "nodes": {name: description}, "routes",
    "on_prompt_handlers": how many, "model_folders": {folder: [paths, extensions]} of the folders
    its file lists name} of the pack at `pack_dir`, imported here as ComfyUI would import it."""
    comfy_env.prepare(settings)
    module = packs.load(pack_dir)
    classes = packs.node_classes(pack_dir)
    import folder_paths

    with file_lists.InputProbe(folder_paths.get_temp_directory()) as input_probe:
        nodes = {name: _describe_class(cls, input_probe) for name, cls in classes.items()}
    display_names = _plain(getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {})
    for name, cls in classes.items():
        if nodes[name]["schema"] == "v3" and name not in display_names:
            # ComfyUI shows a class-based node under its schema's display name.
            display_names[name] = cls.GET_SCHEMA().display_name or name
    web = getattr(module, "WEB_DIRECTORY", None)
    return {
        "module": module.__name__,
        "web_directory": os.path.abspath(os.path.join(pack_dir, web)) if web else None,
        "display_names": display_names,
        "nodes": nodes,
        "routes": routes.listed(pack_dir),
        "on_prompt_handlers": len(routes.on_prompt_handlers(pack_dir)),
        "model_folders": file_lists.folders(nodes),
    }


def _describe_class(cls, input_probe):
    if _is_class_based(cls):
        return _describe_class_based(cls, input_probe)
    input_types = cls.INPUT_TYPES()
    description = {"schema": "v1", "function": getattr(cls, "FUNCTION", None),
                   "input_types": _plain(input_types),
                   "open_inputs": _open_categories(input_types),
                   "file_lists": _plain(file_lists.parts_of(cls.INPUT_TYPES, input_probe))}
    for name in _PLAIN + _TUPLES:
        if hasattr(cls, name):
            description[name] = _plain(getattr(cls, name))
    description["is_changed"] = hasattr(cls, "IS_CHANGED")
    description["async"] = _is_async(cls, description["function"])
    description["check_lazy_status"] = callable(getattr(cls, "check_lazy_status", None))
    validate = getattr(cls, "VALIDATE_INPUTS", None)
    description["validate_inputs"] = _parameters(validate) if validate is not None else None
    return description


def _is_class_based(cls):
    try:
        from comfy_api.internal import _ComfyNodeInternal
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, _ComfyNodeInternal)


def _describe_class_based(cls, input_probe):
    """A comfy_api node described through the V1 view ComfyUI derives from its schema
    (INPUT_TYPES, RETURN_TYPES, ...), so the host's stand-in is an ordinary V1 node."""
    description = {"schema": "v3", "function": "execute",
                   "input_types": _plain(cls.INPUT_TYPES(include_hidden=True)),
                   "file_lists": _plain(file_lists.parts_of(cls.INPUT_TYPES, input_probe))}
    for name in _PLAIN + _TUPLES:
        try:
            description[name] = _plain(getattr(cls, name))
        except Exception:  # the V3 compatibility properties may raise for odd schemas
            pass
    # The schema's fingerprint_inputs and validate_inputs are its IS_CHANGED and
    # VALIDATE_INPUTS; ComfyUI calls them only where the node overrides them.
    from comfy_api.internal import first_real_override

    description["is_changed"] = first_real_override(cls, "fingerprint_inputs") is not None
    validate = first_real_override(cls, "validate_inputs")
    description["validate_inputs"] = _parameters(validate) if validate is not None else None
    description["check_lazy_status"] = first_real_override(cls, "check_lazy_status") is not None
    description["async"] = _is_async(cls, "execute")
    return description


def _is_async(cls, function):
    """Whether the node's FUNCTION is a coroutine function: ComfyUI runs other nodes while one
    awaits, and so does its stand-in (standins.make)."""
    try:
        return inspect.iscoroutinefunction(getattr(cls, function))
    except Exception:  # no such attribute, or a name that is no string
        return False


def _parameters(function):
    """The names a VALIDATE_INPUTS takes (ComfyUI passes only those), and whether it takes
    **kwargs. A classmethod comes bound, its first parameter (`cls`, or `s` as ComfyUI's own
    LoadImage names it) already out of its signature."""
    parameters = inspect.signature(function).parameters.values()
    names = [p.name for p in parameters
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "cls")]
    return {"names": names, "varkw": any(p.kind == p.VAR_KEYWORD for p in parameters)}


def _open_categories(input_types):
    """{category: the spec any other input gets} for each category of INPUT_TYPES that takes
    inputs of any name: a dict whose `in` says yes to every name (inputs a pack's front end adds
    as they are linked), where ComfyUI passes the node each input of the prompt that it holds."""
    open_categories = {}
    for category, inputs in input_types.items():
        if isinstance(inputs, dict) and type(inputs) is not dict:
            try:
                if _PROBE in inputs:
                    open_categories[category] = _plain(inputs[_PROBE])
            except Exception:  # a dict subclass of a pack's making may raise anything
                pass
    return open_categories


def _plain(value):
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return values.type_name(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
