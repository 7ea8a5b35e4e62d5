"""Workflows (ComfyUI's API format) that run one node each on a test image, made from what the
server itself says of the node (/object_info), so the in-process and the isolated pack get
exactly the same prompts."""

IMAGE_FILE = "isohost-test.png"


def single_node(name, info, prefix=None, image=IMAGE_FILE):
    """LoadImage -> `name` (every IMAGE input from it, every other input its default or first
    choice) -> SaveImage of each IMAGE output. ComfyUI caches a node's output while its inputs
    stay the same: a new `image` file name (a copy of the test image) makes it run again."""
    workflow = {"1": {"class_type": "LoadImage", "inputs": {"image": image}}}
    inputs = {}
    for input_name, spec in info["input"].get("required", {}).items():
        kind = spec[0]
        options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
        if kind in ("IMAGE",):
            inputs[input_name] = ["1", 0]
        elif kind == "MASK":
            inputs[input_name] = ["1", 1]
        elif isinstance(kind, list):
            inputs[input_name] = kind[0]
        elif kind == "COMBO":
            inputs[input_name] = options.get("default", options.get("options", [None])[0])
        elif "default" in options:
            inputs[input_name] = options["default"]
        elif kind == "INT":
            inputs[input_name] = options.get("min", 0)
        elif kind == "FLOAT":
            inputs[input_name] = options.get("min", 0.0)
        elif kind == "STRING":
            inputs[input_name] = ""
        elif kind == "BOOLEAN":
            inputs[input_name] = False
        else:
            raise ValueError("%s needs a %s input, which this test cannot make" % (name, kind))
    workflow["2"] = {"class_type": name, "inputs": inputs}
    node = 3
    for index, kind in enumerate(info["output"]):
        if kind == "IMAGE":
            workflow[str(node)] = {"class_type": "SaveImage", "inputs": {
                "images": ["2", index], "filename_prefix": "%s_%d" % (prefix or name, index)}}
            node += 1
    return workflow


def chain(names, infos, prefix="chain", image=IMAGE_FILE):
    """LoadImage -> names[0] -> names[1] -> ... -> SaveImage: each node's first IMAGE input from
    the one before (the others from the loaded image)."""
    workflow = {"1": {"class_type": "LoadImage", "inputs": {"image": image}}}
    previous = ["1", 0]
    for i, name in enumerate(names):
        single = single_node(name, infos[name])["2"]
        inputs = dict(single["inputs"])
        first = next(k for k, v in infos[name]["input"]["required"].items() if v[0] == "IMAGE")
        inputs[first] = previous
        workflow[str(i + 2)] = {"class_type": name, "inputs": inputs}
        previous = [str(i + 2), 0]
    workflow["99"] = {"class_type": "SaveImage", "inputs": {"images": previous,
                                                            "filename_prefix": prefix}}
    return workflow


def pack_nodes(object_info, module_fragment):
    """{name: info} of the nodes whose python_module mentions `module_fragment`."""
    return {name: info for name, info in object_info.items()
            if module_fragment in str(info.get("python_module", ""))}
