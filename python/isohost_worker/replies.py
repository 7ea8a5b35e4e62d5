"""How the worker encodes a reply: JSON where the value is plain JSON, a pickle (values.py) where
the host accepts one (`"accept": "pickle5"` in the request) and the value is not, or is too large
for a JSON body."""

from isohost_worker import errors, frames, values


def encode(reply, request):
    """(frame bytes, descriptors to attach). The caller closes the descriptors after sending."""
    accepts_pickle = request.get("accept") == values.PICKLE5
    # Spare memfds going back to the host ride only on a pickled value.
    if reply["ok"] and accepts_pickle and (values.has_returns(values.HOST)
                                           or not values.is_plain_json(reply["value"])):
        return _pickled(reply)
    try:
        return frames.encode(reply), []
    except Exception as e:  # the value is not JSON, or too big for one frame
        if reply["ok"] and accepts_pickle:
            return _pickled(reply)
        return frames.encode(error_reply(reply["id"], errors.describe(errors.RESULT, e))), []


def error_reply(request_id, error):
    return {"op": "reply", "id": request_id, "ok": False, "error": error}


def _pickled(reply):
    try:
        encoded = values.encode(reply["value"], values.HOST)
    except Exception as e:
        return frames.encode(error_reply(reply["id"], errors.describe(errors.ENCODE, e))), []
    body = {"op": "reply", "id": reply["id"], "ok": True, "pickle": encoded.description}
    try:
        return frames.encode(body, len(encoded.fds)), encoded.fds
    except BaseException:
        encoded.close()
        raise
