"""A worker's `PromptServer.instance.send_sync(event, data)`, carried to the host's ComfyUI
(docs/comfyui.md, "Progress, messages and memory").

An ask carries JSON. A named event's data is JSON already; a binary event (an int of ComfyUI's
protocol.BinaryEventTypes) carries bytes, which travel in base64, or a preview image, which
travels as previews.py carries a progress preview: the host's server then encodes the image in
its own format, as it does for a pack in process."""

import base64

from isohost_comfy_worker import previews

# ComfyUI's protocol.BinaryEventTypes whose data is an image for its server to encode.
UNENCODED_PREVIEW_IMAGE = 2
PREVIEW_IMAGE_WITH_METADATA = 4


def encode(event, data, sid):
    """The JSON form of send_sync's arguments. Raises TypeError for data of a binary event
    that is neither bytes nor a preview image, or ValueError naming an image it cannot carry."""
    message = {"event": event, "sid": sid}
    if isinstance(event, str):
        message["data"] = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        message["bytes"] = base64.b64encode(bytes(data)).decode("ascii")
    elif event == UNENCODED_PREVIEW_IMAGE:
        message["preview"] = _preview(data)
    elif event == PREVIEW_IMAGE_WITH_METADATA and isinstance(data, (tuple, list)) and len(
            data) == 2:
        message["preview"] = _preview(data[0])
        message["metadata"] = data[1]
    else:
        raise TypeError("binary event %r with %s data: a worker carries bytes, or a preview "
                        "image for events %d and %d" % (event, type(data).__name__,
                                                        UNENCODED_PREVIEW_IMAGE,
                                                        PREVIEW_IMAGE_WITH_METADATA))
    return message


def _preview(data):
    preview = previews.encode(data)
    if preview is None:
        raise ValueError("a preview is (\"JPEG\" or \"PNG\", PIL image, max size), not %r"
                         % (data,))
    return preview


def decode(message):
    """(event, data, sid) as the worker passed them to send_sync, images shrunk already."""
    data = message.get("data")
    if "bytes" in message:
        data = base64.b64decode(message["bytes"])
    elif "preview" in message:
        data = previews.decode(message["preview"])
        if "metadata" in message:
            data = (data, message["metadata"])
    return message["event"], data, message.get("sid")
