"""Where an isolated node's time goes inside a real ComfyUI: runs the ten-node workflow of
`isohost bench comfyui` (isolated) ROUNDS times with stamps.patch applied (it writes
/tmp/probe/times.log in ComfyUI's process and /tmp/probe/wtimes.log in the worker), then prints
per node the medians of each stretch, in ms. CLOCK_MONOTONIC is one clock for both processes.
Usage, from the repository root, the patch applied and `ninja -C build` run:
  ISOHOST_BUILD_PYTHON=$PWD/build/python .venv/comfyui/bin/python \
      bench/results/cpu-2026-12-05-node-breakdown/breakdown.py [ROUNDS]"""

import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "comfyui"))
sys.path.insert(0, str(REPO / "bench" / "comfyui"))
import conftest  # noqa: E402
import workflows  # noqa: E402
from bench_comfyui import CHAIN  # noqa: E402
from comfy_server import unpack  # noqa: E402

LOGS = Path("/tmp/probe")
STRETCHES = ["encode", "submit->read", "read->run", "run", "run->reply", "decode", "->end"]


def run_workflow(rounds):
    base = Path(tempfile.mkdtemp(prefix="isohost-breakdown-"))
    tree = unpack(base / "tree")
    server = conftest.start_server(tree, base / "s", envs={"postproc": (sys.executable,
                                                                        [tree[1]])})
    try:
        info = server.object_info()
        infos = {name: info[name] for name in CHAIN}
        for _ in range(rounds + 1):
            kind, message, _ = server.run(workflows.chain(CHAIN, infos,
                                                          image=server.fresh_image()))
            assert kind == "execution_success", message
    finally:
        server.stop()


def parse(line):
    node, start, end, *stamps = line.split()
    return node, float(start), float(end), [(s.split("=")[0], float(s.split("=")[1]))
                                            for s in stamps]


def last(stamps, name):
    return [t for n, t in stamps if n == name][-1]


def stretches(host_line, worker_line):
    node, t1, t2, host = parse(host_line)
    _, a, d, worker = parse(worker_line)
    h1, h2, h3, w0 = last(host, "H1"), last(host, "H2"), last(host, "H3"), last(worker, "W0")
    return node, [h1 - t1, w0 - h1, a - w0, d - a, h2 - d, h3 - h2, t2 - h3]


def main(rounds):
    LOGS.mkdir(exist_ok=True)
    for name in ("times.log", "wtimes.log"):
        (LOGS / name).unlink(missing_ok=True)
    run_workflow(rounds)
    host = (LOGS / "times.log").read_text().splitlines()
    worker = (LOGS / "wtimes.log").read_text().splitlines()
    per_node = defaultdict(list)
    for host_line, worker_line in zip(host, worker):
        node, values = stretches(host_line, worker_line)
        per_node[node].append(values)
    print("node " + " ".join("%12s" % s for s in STRETCHES))
    for node in sorted(per_node, key=int):
        samples = per_node[node][1:]  # the first round starts the worker
        print("%4s " % node + " ".join("%12.3f" % (statistics.median(s[i] for s in samples) * 1e3)
                                        for i in range(len(STRETCHES))))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
