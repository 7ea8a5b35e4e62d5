"""API-format workflows that run every node of ComfyUI-post-processing-nodes (23 nodes, none
needs model weights) on deterministic test images, each ending in its own SaveImage, and
`run_all(server)`, which runs them on a ComfyServer and returns the saved PNG bytes per
workflow, so that an in-process and an isolated ComfyUI can be compared byte for byte.

Written by hand from the pack's INPUT_TYPES (post_processing_nodes.py), not from /object_info
defaults, because several nodes need more than their defaults to run or to do anything:

- PixelSort's `mask` is typed IMAGE but must be one channel per pixel (B, H, W): a 3-channel
  image makes it fail (`mask[i, j] == 1` on an RGB pixel: "truth value of an array is
  ambiguous"). It gets the (B, H, W) output of HSVThresholdMask, as the pack intends.
- AsciiArt opens `arial.ttf` through PIL, which Linux has under no such name: the server needs a
  font of that file name under $XDG_DATA_HOME/fonts (`font_env()` makes one from DejaVu Sans,
  Debian's fonts-dejavu-core); without it the node fails with "cannot open resource".
- Vignette works on square images only (torch.meshgrid(x, y, indexing="ij") makes its mask
  W x H): it gets a square image, IMAGE_S.
- ChromaticAberration, ColorCorrect and Vignette are the identity at their defaults, Quantize
  nearly: they get non-default values.
- Dissolve and FilmGrain draw random numbers that nobody seeds. FilmGrain's come from numpy's
  global generator, seeded from the OS: they differ in every process. Dissolve's come from
  torch's default generator, which starts from the same fixed seed in every process and advances
  with each draw: its output repeats only for the same number of draws since the process
  started (the first Dissolve of a fresh process matches another process's first one; a second
  run in the same process differs). Each of the two runs twice: with settings under which the
  randomness cannot show (Dissolve factor 1.0 keeps image1, since rand < 1 always; FilmGrain
  intensity 0 scales the noise to zero, its temperature and vignette still apply), which is
  byte-comparable anywhere, and with randomness (`*:random`), to be held to its size only.
"""

import hashlib
import io
import os
from pathlib import Path

IMAGE_A = "isohost-pp-a.png"  # 256x192, RGB gradients and seeded noise
IMAGE_B = "isohost-pp-b.png"  # 256x192, another pattern (second input of the blends)
IMAGE_C = "isohost-pp-c.png"  # 160x176, another size (Blend crops and resizes it)
IMAGE_S = "isohost-pp-s.png"  # 192x192, square (Vignette needs it)
SIZES = {IMAGE_A: (256, 192), IMAGE_B: (256, 192), IMAGE_C: (160, 176), IMAGE_S: (192, 192)}

NODES = [
    "ArithmeticBlend", "AsciiArt", "Blend", "Blur", "CannyEdgeMask", "ChromaticAberration",
    "ColorCorrect", "ColorTint", "Dissolve", "DodgeAndBurn", "FilmGrain", "Glow",
    "HSVThresholdMask", "KuwaharaBlur", "Parabolize", "PencilSketch", "PixelSort", "Pixelize",
    "Quantize", "Sharpen", "SineWave", "Solarize", "Vignette",
]

# The node under test (node id "10") and its inputs; "A", "B", "C", "S" name the loaded images, and
# ("node", id) another node of the workflow. Extra nodes: key -> {id: (class, inputs)}.
_SPECS = {
    "ArithmeticBlend": ("ArithmeticBlend", {"image1": "A", "image2": "B",
                                            "blend_mode": "difference"}),
    "AsciiArt": ("AsciiArt", {"image": "A", "char_size": 8, "font_size": 8}),
    "Blend": ("Blend", {"image1": "A", "image2": "C", "blend_factor": 0.6,
                        "blend_mode": "soft_light"}),
    "Blur": ("Blur", {"image": "A", "blur_radius": 3, "sigma": 1.5}),
    "CannyEdgeMask": ("CannyEdgeMask", {"image": "A", "lower_threshold": 50,
                                        "upper_threshold": 150}),
    "ChromaticAberration": ("ChromaticAberration", {
        "image": "A", "red_shift": 3, "red_direction": "horizontal", "green_shift": -2,
        "green_direction": "vertical", "blue_shift": 1, "blue_direction": "horizontal"}),
    "ColorCorrect": ("ColorCorrect", {"image": "A", "temperature": 20.0, "hue": 10.0,
                                      "brightness": 10.0, "contrast": 15.0,
                                      "saturation": 20.0, "gamma": 1.2}),
    "ColorTint": ("ColorTint", {"image": "A", "strength": 0.7, "mode": "sepia"}),
    "Dissolve": ("Dissolve", {"image1": "A", "image2": "B", "dissolve_factor": 1.0}),
    "Dissolve:random": ("Dissolve", {"image1": "A", "image2": "B", "dissolve_factor": 0.5}),
    "DodgeAndBurn": ("DodgeAndBurn", {"image": "A", "mask": "B", "intensity": 0.5,
                                      "mode": "dodge_and_burn"}),
    "FilmGrain": ("FilmGrain", {"image": "A", "intensity": 0.0, "scale": 10.0,
                                "temperature": 25.0, "vignette": 0.5}),
    "FilmGrain:random": ("FilmGrain", {"image": "A", "intensity": 0.2, "scale": 10.0,
                                       "temperature": 0.0, "vignette": 0.0}),
    "Glow": ("Glow", {"image": "A", "intensity": 0.8, "blur_radius": 4}),
    "HSVThresholdMask": ("HSVThresholdMask", {"image": "A", "low_threshold": 0.3,
                                              "high_threshold": 0.8, "hsv_channel": "value"}),
    "KuwaharaBlur": ("KuwaharaBlur", {"image": "A", "blur_radius": 3, "method": "gaussian"}),
    "Parabolize": ("Parabolize", {"image": "A", "coeff": 1.5, "vertex_x": 0.4,
                                  "vertex_y": 0.2}),
    "PencilSketch": ("PencilSketch", {"image": "A", "blur_radius": 5, "sharpen_alpha": 1.0}),
    "PixelSort": ("PixelSort", {"image": "A", "mask": ("node", "9"), "direction": "horizontal",
                                "span_limit": 50, "sort_by": "value", "order": "forward"}),
    "Pixelize": ("Pixelize", {"image": "A", "pixel_size": 8}),
    "Quantize": ("Quantize", {"image": "A", "colors": 16, "dither": "floyd-steinberg"}),
    "Sharpen": ("Sharpen", {"image": "A", "sharpen_radius": 1, "alpha": 0.5}),
    "SineWave": ("SineWave", {"image": "A", "amplitude": 10.0, "frequency": 5.0,
                              "direction": "horizontal"}),
    "Solarize": ("Solarize", {"image": "A", "threshold": 0.5}),
    "Vignette": ("Vignette", {"image": "S", "vignette": 0.6}),
}
_EXTRA = {
    # PixelSort's mask: one channel per pixel, as HSVThresholdMask gives it.
    "PixelSort": {"9": ("HSVThresholdMask", {"image": "A", "low_threshold": 0.4,
                                             "high_threshold": 1.0, "hsv_channel": "value"})},
}

# Workflows whose output differs between two runs of the same server (unseeded randomness).
NONDETERMINISTIC = frozenset(key for key in _SPECS if key.endswith(":random"))
# Workflows whose PNG must be byte-identical wherever the node runs (same prompt, same packages).
DETERMINISTIC = frozenset(_SPECS) - NONDETERMINISTIC
# Workflows that need `arial.ttf` findable by PIL in the server's environment (font_env()).
NEEDS_FONT = frozenset({"AsciiArt"})

_LOADERS = {"A": "1", "B": "2", "C": "3", "S": "4"}
_FILES = {"A": IMAGE_A, "B": IMAGE_B, "C": IMAGE_C, "S": IMAGE_S}


def _resolve(value, used):
    if isinstance(value, str) and value in _LOADERS:
        used.add(value)
        return [_LOADERS[value], 0]
    if isinstance(value, tuple) and value[0] == "node":
        return [value[1], 0]
    return value


def output_size(key):
    """(width, height) of workflow `key`'s output: its first input image's."""
    return SIZES[_FILES[next(v for v in _SPECS[key][1].values() if v in _FILES)]]


def prefix(key):
    """The SaveImage filename_prefix of workflow `key`."""
    return "pp_" + key.replace(":", "_")


def workflow(key):
    """The API-format prompt of workflow `key` (a node name, or `Node:random`)."""
    class_type, inputs = _SPECS[key]
    used, prompt = set(), {}
    for node_id, (extra_class, extra_inputs) in _EXTRA.get(key, {}).items():
        prompt[node_id] = {"class_type": extra_class,
                           "inputs": {k: _resolve(v, used) for k, v in extra_inputs.items()}}
    prompt["10"] = {"class_type": class_type,
                    "inputs": {k: _resolve(v, used) for k, v in inputs.items()}}
    for name in sorted(used):
        prompt[_LOADERS[name]] = {"class_type": "LoadImage", "inputs": {"image": _FILES[name]}}
    prompt["20"] = {"class_type": "SaveImage",
                    "inputs": {"images": ["10", 0], "filename_prefix": prefix(key)}}
    return prompt


WORKFLOWS = {key: workflow(key) for key in _SPECS}
assert {class_type for class_type, _ in _SPECS.values()} == set(NODES)


def write_inputs(input_dir, seed=20261204):
    """Writes the test images into `input_dir`: the same bytes on every run."""
    import numpy as np
    from PIL import Image

    input_dir = Path(input_dir)
    input_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index, name in enumerate((IMAGE_A, IMAGE_B, IMAGE_C, IMAGE_S)):
        width, height = SIZES[name]
        y, x = np.mgrid[0:height, 0:width].astype(np.float64)
        if index in (0, 3):  # diagonal gradients, a disc, noise
            r = x * 255 / (width - 1)
            g = y * 255 / (height - 1)
            b = 255 * ((x - width / 2) ** 2 + (y - height / 2) ** 2 < (height / 3) ** 2)
        elif index == 1:  # stripes and rings
            r = 127.5 + 127.5 * np.sin(x / 7.0)
            g = 127.5 + 127.5 * np.cos(np.hypot(x - 80, y - 60) / 9.0)
            b = (x + 2 * y) % 256
        else:  # a checkerboard with a ramp
            r = 255 * (((x // 16) + (y // 16)) % 2)
            g = (x * y) % 256
            b = 255 - y * 255 / (height - 1)
        image = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), "RGB").save(
            input_dir / name, compress_level=6)


def font_env(directory):
    """Environment for a server (and its workers) under which PIL finds `arial.ttf`: an
    XDG_DATA_HOME whose fonts/arial.ttf is DejaVu Sans. {} when no DejaVu Sans is installed
    (then AsciiArt fails: run the others)."""
    for candidate in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                      "/usr/share/fonts/TTF/DejaVuSans.ttf"):
        if os.path.exists(candidate):
            fonts = Path(directory) / "xdg-data" / "fonts"
            fonts.mkdir(parents=True, exist_ok=True)
            link = fonts / "arial.ttf"
            if not link.exists():
                link.symlink_to(candidate)
            return {"XDG_DATA_HOME": str(Path(directory) / "xdg-data")}
    return {}


def run_all(server, keys=None, timeout=300):
    """Runs each workflow (all, or `keys`) on `server`, one prompt at a time; returns
    {key: PNG bytes of its SaveImage}. Raises AssertionError naming the workflow and ComfyUI's
    error when one does not succeed. The server's input directory must hold write_inputs()'s
    images. A server with ComfyUI's default cache answers a workflow it ran before from the
    cache (the same file again); start it with --cache-none to run every node every time."""
    out = {}
    for key in (keys or WORKFLOWS):
        kind, message, history = server.run(WORKFLOWS[key], timeout)
        if kind != "execution_success":
            data = message.get("data", {})
            raise AssertionError("%s: %s %s: %s\n%s" % (
                key, kind, data.get("exception_type", ""), data.get("exception_message", ""),
                "".join(data.get("traceback", []))))
        files = server.output_files(history).get("20", [])
        assert len(files) == 1, (key, history)
        out[key] = files[0]
    return out


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def pixels(data):
    """(mode, size, sha256 of the pixels) of a PNG: what it shows, without its metadata."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.mode, image.size, hashlib.sha256(image.tobytes()).hexdigest()
