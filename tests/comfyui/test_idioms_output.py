"""A pack's print and logging (packs/isohost_idiom_nodes/output.py) in ComfyUI's own log: GET
/internal/logs, which the front end's log panel shows, holds each line once by the time the
prompt has ended, isolated (after its environment's name) as in process, and ComfyUI's terminal
shows an isolated pack's line once (not also through isohost's log)."""

import uuid

import pytest

NODE = "PrintAndLogIdiomIsohost"
SERVERS = pytest.mark.parametrize("name, prefix", [("isolated", "[idioms] "), ("in_process", "")],
                                  ids=["isolated", "in_process"])


def said(server):
    """Runs the node with a fresh marker, which it prints and logs; its two lines."""
    marker = uuid.uuid4().hex
    kind, message, _ = server.run({"1": {"class_type": NODE, "inputs": {"marker": marker}}})
    assert kind == "execution_success", (message, server.log_tail())
    return marker, ["isohost-idiom print " + marker, "isohost-idiom logging " + marker]


@SERVERS
def test_a_packs_print_and_logging_are_in_comfyuis_logs_once(idiom_servers, name, prefix):
    server = idiom_servers[name]
    marker, lines = said(server)
    logs = server.request("GET", "/internal/logs")  # "<time> - <text>" for each write
    for line in lines:
        assert logs.count(" - " + prefix + line) == 1, logs[-3000:]
    assert logs.count(marker) == 2, logs[-3000:]


def test_an_isolated_packs_print_and_logging_are_on_comfyuis_terminal_once(idiom_servers):
    # In process, ComfyUI's terminal gets a print once ComfyUI's own stdout is flushed (its
    # logger's wrapper buffers a pipe); the isolated lines are flushed each.
    server = idiom_servers["isolated"]
    marker, lines = said(server)
    shown = ["[idioms] " + line for line in lines]
    for line in shown:
        server.wait_for_log(line)
    # Once: isohost's own log, had it written the lines too, wrote them first, on the same pipe.
    assert [line for line in server.log if marker in line] in (shown, shown[::-1])
