"""What an isolated pack's route and on-prompt handlers cost through the route channel, beside
the same pack in process, in real ComfyUI servers on 127.0.0.1 (the test harness's): 300 GETs of
the schema pack's echo route each way, the same while its worker (or, in process, ComfyUI's
prompt thread) holds a node, and 40 POST /prompt of a one-node prompt, which runs the pack's two
on-prompt handlers first. Prints medians and 90th percentiles in ms, and the ratio to in process.
Usage, from the repository root:
  ISOHOST_BUILD_PYTHON=$PWD/build/python .venv/comfyui/bin/python \
      bench/results/cpu-2026-12-06-route-channel/route_latency.py"""

import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "comfyui"))
from comfy_server import unpack  # noqa: E402
from conftest import (COMFY_PYTHON, PACK_PYTHON, TEST_PACKS, holding_a_node,  # noqa: E402
                      start_server)

SCHEMA = TEST_PACKS / "isohost_schema_pack"
NODES = TEST_PACKS / "isohost_test_nodes"


def get(server, path):
    started = time.monotonic()
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (server.port, path), timeout=60) as r:
        r.read()
    return (time.monotonic() - started) * 1e3


def echo_times(server, rounds=300):
    get(server, "/isohost_test/echo/warm")
    return [get(server, "/isohost_test/echo/x") for _ in range(rounds)]


def echo_times_while_holding(server):
    with holding_a_node(server):
        return echo_times(server, 100)


def prompt_times(server, rounds=40):
    times = []
    for i in range(rounds + 1):
        workflow = {"1": {"class_type": "ReportIsohost", "inputs": {"tag": "round %d" % i}}}
        started = time.monotonic()
        prompt_id = server.queue(workflow)
        elapsed = (time.monotonic() - started) * 1e3
        server.wait_for_event(prompt_id, ("execution_success", "execution_error"), 60)
        server.finish(prompt_id)
        if i:  # the first opens the channel
            times.append(elapsed)
    return times


def summary(times):
    times = sorted(times)
    return statistics.median(times), times[int(len(times) * 0.9)]


def main():
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        tree = unpack(base / "unpacked")
        servers = {
            "isolated": start_server(tree, base / "isolated",
                                     envs={"pack": (PACK_PYTHON, [NODES]),
                                           "schema": (COMFY_PYTHON, [SCHEMA])}),
            "in process": start_server(tree, base / "in_process", custom_nodes=[NODES, SCHEMA]),
        }
        try:
            rows = {}
            for name, server in servers.items():
                rows[name] = {"GET a route": summary(echo_times(server)),
                              "GET while a node runs": summary(
                                  echo_times_while_holding(server)),
                              "POST /prompt": summary(prompt_times(server))}
        finally:
            for server in servers.values():
                server.stop()
    for what in rows["isolated"]:
        mine, theirs = rows["isolated"][what], rows["in process"][what]
        print("%-22s isolated %.2f ms (p90 %.2f)  in process %.2f ms (p90 %.2f)  ratio %.2f"
              % (what, mine[0], mine[1], theirs[0], theirs[1], mine[0] / theirs[0]))


if __name__ == "__main__":
    main()
