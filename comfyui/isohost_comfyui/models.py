"""Models never cross into an isolated worker (docs/comfyui.md, "Values"): an input that is or
holds one is refused by name before anything is sent. The worker refuses the same for outputs
(isohost_comfy_worker.values, which this reuses: both sides recognise the same classes)."""

from isohost_comfy_worker.values import ModelCannotCross, find_model, where


def refuse_model_inputs(inputs, node):
    for name, value in inputs.items():
        found = find_model(value)
        if found is not None:
            raise ModelCannotCross(
                "input '%s' of %s is a %s%s: a model stays in the process that holds it, and "
                "this node runs in an isolated worker; load the model inside that node's "
                "environment instead" % (name, node, found[1], where(found[0])))
