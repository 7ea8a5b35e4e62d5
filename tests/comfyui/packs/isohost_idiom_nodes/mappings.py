"""ComfyUI's node table and linked types as packs read them: loop and switch nodes (easy-use,
Impact, Inspire) look up the classes of the prompt's nodes in `nodes.NODE_CLASS_MAPPINGS`, and
a VALIDATE_INPUTS may take the types linked to its inputs (`input_types`)."""


class AnyType(str):
    """The `*` of many packs: a type that matches every other."""

    def __ne__(self, other):
        return False

    __hash__ = str.__hash__


ANY = AnyType("*")


class LookUpNodes:
    """Whether each name is in ComfyUI's node table here, and its own display name there;
    `nodes` imported as the node runs, as loop nodes often do."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "look_up"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"names": ("STRING", {"default": ""})}}

    def look_up(self, names):
        import nodes

        found = {name: name in nodes.NODE_CLASS_MAPPINGS for name in names.split(",")}
        return {"ui": {"found": [found], "display_name": [
            nodes.NODE_DISPLAY_NAME_MAPPINGS.get("LookUpNodesIdiomIsohost")]}, "result": ()}


class CallBuiltinNode:
    """Runs ComfyUI's SolidMask (comfy_extras, not nodes.py) from the node table, as packs call
    the nodes they build on, and names the modules of it and of a class-based one."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "call"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("FLOAT", {"default": 0.25})}}

    def call(self, value):
        import nodes

        mask, = nodes.NODE_CLASS_MAPPINGS["SolidMask"]().solid(value, 8, 4)
        split = nodes.NODE_CLASS_MAPPINGS.get("SplitImageWithAlpha")
        return {"ui": {"mask": [[list(mask.shape), float(mask.sum())]], "modules": [
            nodes.NODE_CLASS_MAPPINGS["SolidMask"].RELATIVE_PYTHON_MODULE,
            split.RELATIVE_PYTHON_MODULE]}, "result": ()}


class ListNodeTable:
    """The names in ComfyUI's node table here, as a pack that offers every node type lists
    them."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "list_names"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def list_names(self):
        import nodes

        table = nodes.NODE_CLASS_MAPPINGS
        names = [name for name in table]  # a lookup meanwhile changes nothing
        assert all(name in table for name in names) and len(table) == len(names)
        return {"ui": {"names": sorted(names)}, "result": ()}


class MakeAny:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = (ANY,)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 3})}}

    def make(self, value):
        return (value,)


class TakeAnyChecked:
    """Validates against the type linked to its input, as type-generic packs do: a wildcard
    must still match "INT"."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("INT",)
    FUNCTION = "take"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": (ANY, {})}}

    @classmethod
    def VALIDATE_INPUTS(cls, input_types):
        linked = input_types.get("value")
        if linked is None or linked != "INT":
            return "the input is linked to %r, which is not INT" % (linked,)
        return True

    def take(self, value):
        return (value + 1,)


NODE_CLASS_MAPPINGS = {"LookUpNodesIdiomIsohost": LookUpNodes, "MakeAnyIdiomIsohost": MakeAny,
                       "TakeAnyCheckedIdiomIsohost": TakeAnyChecked,
                       "CallBuiltinNodeIdiomIsohost": CallBuiltinNode,
                       "ListNodeTableIdiomIsohost": ListNodeTable}
NODE_DISPLAY_NAME_MAPPINGS = {"LookUpNodesIdiomIsohost": "Look up nodes (idioms)"}
