"""A progress preview's image, from the worker to the host's ComfyUI (docs/comfyui.md,
"Progress, messages and memory").

ComfyUI's progress hook takes a preview as (format, PIL image, max_size) and its server sends it
as (format) bytes after shrinking it to max_size. An ask carries JSON, so the worker shrinks the
image as ComfyUI's server would and sends it as a fast lossless PNG; the host opens it and hands
ComfyUI's hook (format, image, None), which encodes it once in the preview's own format, as in
process. PIL is imported only when a preview comes."""

import base64
import io


def encode(preview):
    """The JSON form of a hook's preview, or None for what is not (format, PIL image, size)."""
    if not (isinstance(preview, (tuple, list)) and len(preview) == 3):
        return None
    image_format, image, max_size = preview
    if not hasattr(image, "save") or image_format not in ("JPEG", "PNG"):
        return None
    from PIL import Image, ImageOps

    if max_size is not None:
        resampling = Image.Resampling.BILINEAR if hasattr(Image, "Resampling") else Image.BILINEAR
        image = ImageOps.contain(image, (max_size, max_size), resampling)
    data = io.BytesIO()
    image.save(data, format="PNG", compress_level=1)
    return {"format": image_format, "png": base64.b64encode(data.getvalue()).decode("ascii")}


def decode(encoded):
    """The (format, PIL image, None) that encode() was given, shrunk already."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(encoded["png"])))
    image.load()
    return encoded["format"], image, None
