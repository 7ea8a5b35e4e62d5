"""A request the core cannot take is answered at once with a named BadRequest, however it
reaches the core, and the host serves on: a call whose target was 5 once hung its caller
forever (the core threw on its event loop, and no one answered)."""

import json

import pytest

import isohost


def core_error(host, kind, message, timeout=10):
    """The error the core answers `message` with, sent as it is, past the API's own checks;
    None if it succeeded. Returned without its traceback: its frames would hold the pending
    call (and its eventfd) in a cycle with the caller's, to be closed by a later garbage
    collection, under another test's descriptor count."""
    pending = host._core.submit(kind, "w", json.dumps(message), [])
    assert host._wait(pending, timeout), "no answer within %g s" % timeout
    try:
        host._finish(pending, host._peer("w"))
    except isohost.Error as e:
        return e.with_traceback(None)
    return None


@pytest.mark.parametrize("fields, says", [
    ({"target": 5}, "target must be a string 'module:function', not 5"),
    ({"target": None}, "target must be a string 'module:function', not null"),
    ({"target": ["os", "getpid"]}, "target must be a string 'module:function', not [\"os\",\"getpid\"]"),
    ({"args": {"a": 1}}, "args must be a JSON array, not {\"a\":1}"),
    ({"kwargs": [1]}, "kwargs must be a JSON object, not [1]"),
    ({"accept": 5}, "accept must be a string, not 5"),
])
def test_the_core_names_a_field_of_the_wrong_type(host, fields, says):
    good = {"target": "isohost_test_funcs:add", "args": [1, 2], "kwargs": {}}
    error = core_error(host, "call", dict(good, **fields))
    assert isinstance(error, isohost.BadRequest) and str(error) == says
    assert core_error(host, "call", good) is None


def test_make_room_names_a_device_out_of_range(host):
    error = core_error(host, "make_room", {"bytes": 1, "device": 10 ** 12})
    assert isinstance(error, isohost.BadRequest)
    assert str(error) == "make_room needs a GPU index from 0 to 255, not 1000000000000"
