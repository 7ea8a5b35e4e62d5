"""The `call` op: targets, values, and every step at which a call can fail."""

import struct

import pytest

from conftest import frames

F = "isohost_test_funcs:"


def test_args_and_kwargs(worker):
    assert worker.value(F + "add", 2, 40) == 42
    assert worker.value(F + "add", a="x", b="y") == "xy"
    assert worker.value(F + "kwargs_echo", a=1, b=[2]) == {"a": 1, "b": [2]}
    assert worker.request("call", target=F + "add", args=[1, 1])["value"] == 2  # kwargs omitted


def test_nested_json_round_trips(worker):
    value = {"list": [1, 2.5, -3, True, False, None, "s"], "unicode": "naïve ☃ 日本",
             "nested": {"a": [[[{"b": [{}]}]]]}, "empty": [], "big": 2 ** 62,
             "escapes": "quote \" backslash \\ newline \n tab \t nul \u0000"}
    assert worker.value(F + "echo", value) == value


def test_dotted_target(worker):
    assert worker.value(F + "Namespace.Inner.triple", 5) == 15
    assert worker.value("os.path:join", "a", "b") == "a/b"


def test_hand_built_frame_is_understood(worker):
    body = b'{"op":"call","id":99,"target":"isohost_test_funcs:add","args":[20,22],"kwargs":{}}'
    worker.send_raw(struct.pack("<4sHHII", b"ISOH", frames.VERSION, 0, len(body), 0) + body)
    assert worker.recv() == {"op": "reply", "id": 99, "ok": True, "value": 42}


def test_call_error_builtin_type(worker):
    error = worker.error(F + "raises", "bad size")
    assert error["type"] == "ValueError"
    assert error["message"] == "bad size"
    assert error["where"] == "call"
    assert error["traceback"].startswith("Traceback (most recent call last):")
    assert "in raises" in error["traceback"] and "runtime.py" not in error["traceback"]
    assert error["traceback"].rstrip().endswith("ValueError: bad size")


def test_call_error_qualified_type(worker):
    error = worker.error(F + "raises_custom", "custom")
    assert error["type"] == "isohost_test_funcs.FixtureError"
    assert (error["message"], error["where"]) == ("custom", "call")


def test_sys_exit_is_an_error_not_an_exit(worker):
    error = worker.error(F + "exits", 5)
    assert (error["type"], error["message"], error["where"]) == ("SystemExit", "5", "call")
    assert worker.value(F + "echo", "still here") == "still here"


def test_wrong_arguments_to_the_function_fail_the_call(worker):
    error = worker.error(F + "add", 1)
    assert (error["type"], error["where"]) == ("TypeError", "call")


@pytest.mark.parametrize("fields", [
    {"target": 42},
    {"target": "no_colon"},
    {"target": ":echo"},
    {"target": "isohost_test_funcs:"},
    {"target": "isohost_test_funcs:Namespace..triple"},
    {"target": ".relative:echo"},
    {"target": F + "echo", "args": {"x": 1}},
    {"target": F + "echo", "args": [1], "kwargs": [1]},
])
def test_malformed_requests_are_argument_errors(worker, fields):
    reply = worker.request("call", **fields)
    assert reply["ok"] is False
    assert reply["error"]["where"] == "arguments"
    assert reply["error"]["type"] in ("TypeError", "ValueError")


def test_missing_module_is_an_import_error(worker):
    error = worker.error("isohost_no_such_module:f")
    assert error["type"] == "ModuleNotFoundError"
    assert error["where"] == "import"
    assert "isohost_no_such_module" in error["message"]


def test_module_that_raises_on_import_is_an_import_error(spawn, tmp_path):
    (tmp_path / "isohost_broken.py").write_text("raise RuntimeError('broken at import')\n")
    w = spawn(paths=[str(tmp_path)])
    error = w.error("isohost_broken:f")
    assert (error["type"], error["where"]) == ("RuntimeError", "import")
    assert "broken at import" in error["traceback"]


def test_missing_attribute_is_a_lookup_error(worker):
    error = worker.error(F + "Namespace.nothing")
    assert (error["type"], error["where"]) == ("AttributeError", "lookup")


def test_not_callable_is_a_lookup_error(worker):
    error = worker.error(F + "NOT_CALLABLE")
    assert (error["type"], error["where"]) == ("TypeError", "lookup")
    assert "not callable" in error["message"]


@pytest.mark.parametrize("function", ["not_json", "nan"])
def test_unserialisable_value_is_a_result_error(worker, function):
    error = worker.error(F + function)
    assert error["where"] == "result"
    assert error["type"] in ("TypeError", "ValueError")
    assert worker.value(F + "echo", 1) == 1


def test_lone_surrogate_is_a_result_error(worker):
    error = worker.error("builtins:chr", 0xD800)
    assert (error["type"], error["where"]) == ("UnicodeEncodeError", "result")


def test_unknown_op_is_answered_as_an_argument_error(worker):
    reply = worker.request("teleport")
    assert reply["ok"] is False and reply["error"]["where"] == "arguments"
    assert "teleport" in reply["error"]["message"]
    assert worker.request("ping")["ok"]


def test_unknown_fields_are_ignored(worker):
    reply = worker.request("call", target=F + "echo", args=[3], kwargs={}, future_field={"x": 1})
    assert reply["value"] == 3


def test_printing_does_not_touch_the_protocol(worker):
    assert worker.value(F + "print_lines", 3000) == 3000
    assert worker.value(F + "echo", "after") == "after"
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    assert worker.stdout_lines[0] == "ISOH stdout line 0\n"
    assert len(worker.stdout_lines) == 3000
    assert sum(line.startswith("ISOH stderr line") for line in worker.stderr_lines) == 3000
