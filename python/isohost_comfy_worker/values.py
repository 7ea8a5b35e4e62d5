"""What may cross between the host's ComfyUI and a worker (docs/comfyui.md, "Values").

IMAGE, MASK and LATENT are CPU tensors (memfds, no copy on the receiving side) or CUDA tensors
(through host memory), CONDITIONING a list of [tensor, dict], and lists, dicts, strings and
numbers travel as they are. A model (MODEL, CLIP, VAE, CONTROL_NET, an nn.Module, anything that
holds one) never crosses: copying gigabytes of weights into another process unasked is worse
than failing, so it fails with ModelCannotCross, naming the input or output."""

# Classes whose objects are models, by module and name: no import needed to recognise them.
_MODEL_CLASSES = {
    ("comfy.model_patcher", "ModelPatcher"), ("comfy.sd", "CLIP"), ("comfy.sd", "VAE"),
    ("comfy.controlnet", "ControlBase"), ("comfy.controlnet", "ControlNet"),
    ("comfy.controlnet", "ControlLora"), ("comfy.controlnet", "T2IAdapter"),
    ("comfy.clip_vision", "ClipVisionModel"), ("comfy.sd", "StyleModel"),
    ("torch.nn.modules.module", "Module"),
}


class ModelCannotCross(TypeError):
    """A model was about to be copied between the host's ComfyUI and an isolated worker."""


def model_kind(value):
    """The name of the model class `value` is (or derives from), or None."""
    for cls in type(value).__mro__:
        if (cls.__module__, cls.__name__) in _MODEL_CLASSES:
            return "%s.%s" % (cls.__module__, cls.__name__)
    return None


def find_model(value, depth=0):
    """(path, class name) of the first model inside `value` (lists, tuples, dicts), or None."""
    kind = model_kind(value)
    if kind is not None:
        return "", kind
    if depth > 8:
        return None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = find_model(item, depth + 1)
        if found is not None:
            return "[%r]%s" % (key, found[0]), found[1]
    return None


def refuse_models(result, node, names):
    """Raises ModelCannotCross if the node's result holds a model."""
    outputs = result.get("result", ()) if isinstance(result, dict) else result
    if not isinstance(outputs, (list, tuple)):
        outputs = (outputs,)
    for index, output in enumerate(outputs):
        found = find_model(output)
        if found is not None:
            name = names[index] if index < len(names) else "#%d" % index
            raise ModelCannotCross(
                "output %d (%s) of %s is a %s%s: a model stays in the process that holds it, "
                "and this node runs in an isolated worker; run the nodes that use it in the "
                "same environment" % (index, name, node, found[1],
                                      " (at %s)" % found[0] if found[0] else ""))
