"""How the worker encodes a reply: JSON where the value is plain JSON, a pickle (values.py) where
the host accepts one (`"accept": "pickle5"` in the request) and the value is not, or is too large
for a JSON body."""

from isohost_worker import errors, frames


def encode(reply, request):
    """(frame bytes, descriptors to attach, the values.Encoded still copying or None). The
    caller sends, then waits for that copy and closes the descriptors."""
    accepts_pickle = "accept" in request and _accepts_pickle(request)
    # Spare memfds going back to the host ride only on a pickled value.
    if reply["ok"] and accepts_pickle and _pickle_it(reply["value"]):
        return _pickled(reply)
    try:
        return frames.encode(reply), [], None
    except Exception as e:  # the value is not JSON, or too big for one frame
        if reply["ok"] and accepts_pickle:
            return _pickled(reply)
        return frames.encode(error_reply(reply["id"], errors.describe(errors.RESULT, e))), [], None


def error_reply(request_id, error):
    return {"op": "reply", "id": request_id, "ok": False, "error": error}


def _accepts_pickle(request):
    from isohost_worker import values  # only a host that takes pickles pays for importing it

    return request["accept"] == values.PICKLE5


def _pickle_it(value):
    from isohost_worker import values

    return values.has_returns(values.HOST) or not values.is_plain_json(value)


def _pickled(reply):
    from isohost_worker import values

    try:
        encoded = values.encode(reply["value"], values.HOST, pipelined=True)
    except Exception as e:
        return frames.encode(error_reply(reply["id"], errors.describe(errors.ENCODE, e))), [], None
    body = {"op": "reply", "id": reply["id"], "ok": True, "pickle": encoded.description}
    try:
        return frames.encode(body, len(encoded.fds)), encoded.fds, encoded
    except BaseException:
        encoded.close()
        raise
