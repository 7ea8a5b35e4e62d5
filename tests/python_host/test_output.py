"""The workers' output handed to the host's handler (Host(on_output=...), docs/python-api.md,
"Worker output") instead of isohost's log, through the real core and real workers: in order,
before the call's result, as written (bytes that are not UTF-8 shown as \\xNN), a line without
its newline at the worker's end, bounded under a flood, and once."""

import json
import logging
import re
import subprocess
import textwrap
import threading

import isohost

from conftest import BUILD_PYTHON, PYTHON, config

F = "isohost_output_funcs:"

WORKER_FUNCTIONS = '''
import os
import sys


def say(lines):
    """Prints each [stream, text] of `lines`: "out" to stdout, "err" to stderr."""
    for stream, text in lines:
        print(text, file=sys.stderr if stream == "err" else sys.stdout)
    return os.getpid()


def write_bytes(data):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return os.getpid()


def write_unended(text):
    sys.stdout.write(text)  # line-buffered: out when the worker ends
    return os.getpid()


def flood(lines, width):
    block = (b"f" * width + b"\\n") * 1000
    for _ in range(lines // 1000):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.flush()
    return os.getpid()
'''


def output_config(tmp_path, **host):
    (tmp_path / "isohost_output_funcs.py").write_text(WORKER_FUNCTIONS)
    settings = config(call_timeout_seconds=60, **host)
    for env in settings["env"].values():
        env["path"].append(str(tmp_path))
    return settings


class Lines:
    """The handler: collects every line, and can hold the output thread until released."""

    def __init__(self):
        self.lines = []
        self.threads = set()
        self.released = threading.Event()
        self.released.set()

    def __call__(self, line):
        self.threads.add(threading.current_thread().name)
        self.lines.append(line)
        self.released.wait()

    def texts(self, env=None):
        return [line.text for line in self.lines if env is None or line.env == env]


def test_a_calls_lines_reach_the_handler_before_its_result(tmp_path):
    got = Lines()
    with isohost.Host(output_config(tmp_path), on_output=got) as host:
        pid = host.call("w", F + "say", [["out", "first"], ["out", "second"], ["err", "third"]])
        # No wait: the result came after its lines had been handed over.
        assert [(l.env, l.pid, l.stream, l.text) for l in got.lines] == [
            ("w", pid, "stdout", "first"), ("w", pid, "stdout", "second"),
            ("w", pid, "stderr", "third")]
        other = host.call("other", F + "say", [["out", "elsewhere"]])
        assert (got.lines[-1].env, got.lines[-1].pid) == ("other", other)
    assert got.threads == {"isohost-output"}
    assert all(isinstance(line, isohost.OutputLine) for line in got.lines)


def test_bytes_that_are_not_utf8_are_shown_escaped_and_control_characters_kept(tmp_path):
    got = Lines()
    with isohost.Host(output_config(tmp_path), on_output=got) as host:
        host.call("w", F + "write_bytes",
                  b"bad \xff\xfe byte caf\xc3\xa9 \x1b[31mred\x1b[0m\ttab\r\n")
        host.call("w", F + "write_bytes", b"cut \xe7\x94\n")
    assert got.texts() == ["bad \\xff\\xfe byte caf\u00e9 \x1b[31mred\x1b[0m\ttab",
                           "cut \\xe7\\x94"]


def test_a_line_without_its_newline_is_handed_over_when_the_worker_ends(tmp_path):
    got = Lines()
    host = isohost.Host(output_config(tmp_path), on_output=got)
    try:
        host.call("w", F + "write_unended", "no newline")
        assert got.texts() == []  # a line goes on until its newline, or the worker's end
        host.reap("w")
    finally:
        host.close()  # returns once the output thread has handed over the last lines
    assert got.texts() == ["no newline"]


def test_a_flood_is_bounded_dropped_lines_are_counted_and_the_host_serves_on(tmp_path, caplog):
    got = Lines()
    got.released.clear()  # the handler holds the output thread at the first line
    lines, width = 60000, 99  # 6 MB, past the 4 MiB the core queues
    with caplog.at_level(logging.WARNING, logger="isohost"):
        with isohost.Host(output_config(tmp_path), on_output=got) as host:
            host.call("w", F + "flood", lines, width)  # its result waits for the handler 1 s
            assert host.call("other", F + "say", []) > 0
            got.released.set()
    warnings = [r.getMessage() for r in caplog.records if "were dropped" in r.getMessage()]
    dropped = sum(int(re.search(r"(\d+) lines", w).group(1)) for w in warnings)
    flooded = got.texts("w")
    assert dropped > 0
    assert len(flooded) + dropped == lines
    assert set(flooded) == {"f" * width}


def test_a_handler_may_call_the_host(tmp_path):
    answers, done = [], threading.Event()

    def handler(line):
        if line.text == "ask again":
            answers.append(host.call("other", F + "say", [["out", "answered"]]))
        if line.text == "answered":
            done.set()

    with isohost.Host(output_config(tmp_path), on_output=handler) as host:
        host.call("w", F + "say", [["out", "ask again"]])
        assert done.wait(60)
    assert len(answers) == 1


RUN_HOST = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import isohost
seen = []
relay = sys.argv[3] == "relay"
with isohost.Host(json.loads(sys.argv[2]), on_output=seen.append if relay else None) as host:
    pid = host.call("w", "isohost_output_funcs:say", [["out", "said once"]])
print(json.dumps({"pid": pid, "seen": [line.text for line in seen]}))
'''


def run_host(tmp_path, mode):
    """(pid, lines handed over, stderr) of a host in a process of its own."""
    result = subprocess.run(
        [PYTHON, "-c", textwrap.dedent(RUN_HOST), str(BUILD_PYTHON),
         json.dumps(output_config(tmp_path)), mode],
        capture_output=True, text=True, timeout=120, check=True)
    said = json.loads(result.stdout)
    return said["pid"], said["seen"], result.stderr


def test_without_a_handler_the_lines_go_to_isohosts_log_and_with_one_only_to_it(tmp_path):
    pid, seen, log = run_host(tmp_path, "log")
    assert seen == []
    assert "[w:%d] said once" % pid in log
    pid, seen, log = run_host(tmp_path, "relay")
    assert seen == ["said once"]
    assert "said once" not in log, log
