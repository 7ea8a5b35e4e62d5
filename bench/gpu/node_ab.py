"""An isolated node's price under two or more settings, taken in turn on one machine (issue 12).

Each round runs bench comfyui's node figures (bench/comfyui/bench_comfyui.py, node_samples:
Invert and Blur on a 1024x1024 IMAGE, in process and through the adapter's stand-in) in a fresh
process per setting, with both sides stamped (bench/gpu/stamps: values.encode and
values.decode, the worker's call and the node's run, their minor faults, each call's two hops
on one clock), and prints each figure's median per setting after each round (about 23 s a
setting and round on the H100 machine):

    python3 bench/gpu/node_ab.py ROUNDS SAMPLES NAME=VAR=VALUE[,VAR=VALUE] ...
    python3 bench/gpu/node_ab.py 3 300 one=ISOHOST_COPY_THREADS=1 default=

A setting's variable ISOHOST_BENCH_HOST_TABLE (JSON: {"worker_poll_microseconds": 2000}) sets
keys of the config's [host] table (bench_comfyui.py), NODE_AB_WORKER_ENV (JSON) variables of the
worker alone (its `env` table). A setting's variables are split at each comma that a NAME=
follows, so a JSON value may hold commas.

Run with ComfyUI's interpreter and ISOHOST_BUILD_PYTHON set, as bench comfyui is.
"""

import bisect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def one(root, pack, samples):
    """This process's figures: the nodes' medians, then the stamped stretches' and hops'."""
    sys.path.insert(0, str(REPO / "bench" / "comfyui"))
    import bench_comfyui

    stamps = Path(os.environ["ISOHOST_STAMPS"])
    blocks = []  # (when, figure): the start of each figure's calls, in order

    def on_block(figure):
        blocks.append((time.monotonic(), figure))

    figures = {name: statistics.median(values) for name, values in
               bench_comfyui.node_samples((Path(root), Path(pack)), samples, worker_env=dict(
                   json.loads(os.environ.get("NODE_AB_WORKER_ENV", "{}")),
                   PYTHONPATH=os.environ["PYTHONPATH"]), on_block=on_block).items()}
    from sitecustomize import _flush

    _flush()
    mine = "%d.log" % os.getpid()
    spans = defaultdict(list)
    split = defaultdict(list)
    for log in stamps.glob("*.log"):
        side = "host" if log.name == mine else "worker"
        for line in log.read_text().splitlines():
            name, ms, faults, start, end = line.split()
            node = _node_at(blocks, float(start))
            spans[(side, name)].append((float(start), float(end), node))
            if node is not None:
                split["%s.%s.%s" % (side, name, node)].append(float(ms))
                split["%s.%s_faults.%s" % (side, name, node)].append(int(faults))
    figures.update({name: statistics.median(values) for name, values in split.items()})
    figures.update(hops(spans))
    print(json.dumps(figures))


def _node_at(blocks, moment):
    """The isolated node whose block of timed calls `moment` falls in ("Invert", "Blur"), or
    None (before the first block, among untimed calls, or in a block of calls in process)."""
    index = bisect.bisect_right([when for when, _ in blocks], moment) - 1
    figure = blocks[index][1] if index >= 0 else None
    if figure is None or not figure.startswith("node_isolated."):
        return None
    return figure.rpartition(".")[2]


# A call's way from the host's encoding to the worker's call and back to the host's decoding,
# as stamps (side, stamp, which end: 0 its start, 1 its end), in order; each is the first such
# moment after the one before. Between two: a stretch of a hop, named by where it ends.
_WAY = [(("host", "submit", 0), "in.glue"),       # the host's Python between encode and submit
        (("host", "submit", 1), "in.submit"),     # Core.submit: into the core, posted to its loop
        (("worker", "read", 1), "in.transit"),    # the loop, the socket, the worker's read
        (("worker", "call", 0), "in.dispatch"),   # the worker's runtime up to calls.call
        (("worker", "encode", 1), None),          # the node ran; its result encoded (in reply)
        (("worker", "reply", 1), "out.reply"),    # the rest of the reply's encoding
        (("worker", "send", 1), "out.send"),      # sent
        (("host", "wait", 1), "out.transit"),     # the loop, the caller's wake, back in Python
        (("host", "decode", 0), "out.finish")]    # the outcome taken, up to values.decode


def hops(spans):
    """Each call's two hops: from the host's encoding's end to the start of the worker's next
    call (hop_in), and from the end of the worker's encoding (its reply) to the start of the
    host's next decoding (hop_out), in ms, Invert's and Blur's apart (`spans` lists each
    stamp's (start, end, node): None outside the nodes' timed calls, whose encodings are left
    out), and each hop's stretches (_WAY) where their stamps are there.
    Matched by time: either side also stamps what is not a node's call, and the worker's last
    lines may not be written."""
    host_encode = spans.get(("host", "encode"), [])
    moments_of = {(side, stamp, edge): sorted(span[edge] for span in found)
                  for (side, stamp), found in spans.items() for edge in (0, 1)}
    out = defaultdict(list)
    for _, sent, node in host_encode:
        if node is None:
            continue
        at = {}
        moment = sent
        for step, stretch in _WAY:
            found = _first_after(moments_of.get(step, []), moment)
            if found is None:
                break
            if stretch is not None:
                out["%s.%s" % (stretch, node)].append((found - moment) * 1e3)
            at[step] = moment = found
        if ("worker", "call", 0) in at:
            out["hop_in." + node].append((at[("worker", "call", 0)] - sent) * 1e3)
        if ("host", "decode", 0) in at:
            out["hop_out." + node].append(
                (at[("host", "decode", 0)] - at[("worker", "encode", 1)]) * 1e3)
    return {name: statistics.median(values) for name, values in out.items()}


def _first_after(moments, moment):
    index = bisect.bisect_left(moments, moment)
    return moments[index] if index < len(moments) else None


def settings(argument):
    name, _, assignments = argument.partition("=")
    env = {}
    for assignment in filter(None, re.split(r",(?=[A-Za-z_][A-Za-z0-9_]*=)", assignments)):
        variable, _, value = assignment.partition("=")
        env[variable] = value
    return name, env


def main():
    if sys.argv[1] == "--one":
        one(*sys.argv[2:4], int(sys.argv[4]))
        return
    rounds, samples = int(sys.argv[1]), int(sys.argv[2])
    cases = [settings(a) for a in sys.argv[3:]]
    sys.path.insert(0, str(REPO / "tests" / "comfyui"))
    from comfy_server import unpack

    root, pack = unpack(Path(tempfile.mkdtemp(prefix="isohost-node-ab-")))
    results = defaultdict(lambda: defaultdict(list))
    names = [name for name, _ in cases]
    for done_rounds in range(1, rounds + 1):
        for name, env in cases:
            stamps = tempfile.mkdtemp(prefix="isohost-stamps-")
            child_env = dict(os.environ, ISOHOST_STAMPS=stamps, **env)
            child_env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(REPO / "bench" / "gpu" / "stamps"), os.environ.get("PYTHONPATH")]))
            done = subprocess.run([sys.executable, __file__, "--one", str(root), str(pack),
                                   str(samples)], env=child_env, capture_output=True, text=True)
            if done.returncode:
                sys.exit("%s failed:\n%s" % (name, done.stderr[-3000:]))
            for figure, value in json.loads(done.stdout.splitlines()[-1]).items():
                results[figure][name].append(value)
        # After every round, so that a run cut short by its bound keeps the rounds it had.
        print_table(results, names, done_rounds)


def print_table(results, names, done_rounds):
    print("%-28s %s  (median of each round's median, ms; rounds in turn; %d done)" % (
        "figure", "  ".join("%-22s" % n for n in names), done_rounds))
    for figure, by_case in sorted(results.items()):
        print("%-28s %s" % (figure, "  ".join(
            "%-22s" % ("%.3f (%s)" % (statistics.median(by_case[n]),
                                      " ".join("%.2f" % v for v in by_case[n]))
                       if by_case.get(n) else "-")  # a stamp one setting's code lacks
            for n in names)), flush=True)


if __name__ == "__main__":
    main()
