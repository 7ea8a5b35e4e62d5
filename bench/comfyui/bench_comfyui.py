"""isohost bench comfyui: what isolating a ComfyUI node costs (issue 12; docs/comfyui.md).

Run with ComfyUI's interpreter (.venv/comfyui/bin/python): `isohost bench comfyui` does. Prints
one JSON object of samples (milliseconds) on its last line:

- copy_12MiB: one copy of a 1024x1024 IMAGE (float32, 12 MiB), the physical part of the price;
- raw_trip: a small message there and back over a socketpair between two processes;
- node_in_process.NAME / node_isolated.NAME: the node's FUNCTION called on a 1024x1024 IMAGE,
  in this process and through the adapter's stand-in (the class ComfyUI registers), whose
  worker runs ComfyUI's own interpreter, both under torch.inference_mode() as in ComfyUI; the target is at most 1 ms plus one copy of each
  tensor in and out over the in-process time. Eight times as many samples as the workflows'
  rounds, after WARMUP calls, taken in turns with copy_12MiB's (in_turn);
- workflow10_in_process / workflow10_isolated: ten post-processing nodes in a chain through a
  real ComfyUI (execution_start to execution_success), the pack in process and isolated;
  workflow10_isolated_crossing: isolated with every output sent back after each node
  ([comfyui] keep_outputs_in_workers = false), as before outputs stayed in the worker.

ISOHOST_BENCH_HOST_TABLE (JSON, {"loop_poll_after_call_microseconds": 2000}) sets keys of the
isolated configs' [host] table, to take a setting's figures beside the defaults' in one run.
"""

import functools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "comfyui"))

CHAIN = ["Blur", "Sharpen", "ColorTint", "Glow", "Vignette", "Solarize", "Pixelize",
         "Quantize", "Parabolize", "ChromaticAberration"]


# Calls before a node's samples: a stand-in's first calls make the memfds that later calls
# reuse, and its first few took 11, 7.9, 6.4, 6.2, 2.4 and 2.1 ms where later ones took 1.8
# (Invert on the 2-core CPU machine): the figures are those of the calls after.
WARMUP = 10


# The node figures are taken in TURNS turns, each figure's calls back to back within a turn
# after TURN_WARMUP untimed ones (time enough for what the figure before left running to stop:
# torch's threads in this process spin for some 3 ms after its last operation), so that the
# machine's changes of pace weigh on the in-process and the isolated figures alike: on the
# H100 machine one node's in-process time differed by half between two runs of a few seconds
# (1.27 and 2.17 ms, bench/results/h100-2026-12-06-copy-wake/run4-polls), and the figures were
# taken one after the other.
TURNS = 8
TURN_WARMUP = 5


def timed(function, rounds, warmup=WARMUP):
    for _ in range(warmup):
        function()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def in_turn(functions, rounds, on_block=None):
    """{name: samples} for each of `functions` ({name: function}), about `rounds` each, in
    TURNS turns after WARMUP calls of each. `on_block(name)` is called as each function's
    timed calls begin, `on_block(None)` as its untimed ones do (node_ab.py tells the stamps of
    each node's calls apart)."""
    on_block = on_block or (lambda name: None)
    out = {name: [] for name in functions}
    for turn in range(TURNS):
        for name, function in functions.items():
            on_block(None)
            timed(function, 0, WARMUP if turn == 0 else TURN_WARMUP)
            on_block(name)
            out[name] += timed(function, max(1, rounds // TURNS), 0)
    return out


def raw_trip(rounds):
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent.close()
        while True:
            data = child.recv(64)
            if not data:
                os._exit(0)
            child.sendall(data)
    child.close()

    def trip():
        parent.sendall(b"x" * 32)
        parent.recv(64)

    samples = timed(trip, rounds)
    parent.close()
    os.waitpid(pid, 0)
    return samples


def host_table():
    """The [host] keys ISOHOST_BENCH_HOST_TABLE sets (whole numbers), {} without it."""
    return json.loads(os.environ.get("ISOHOST_BENCH_HOST_TABLE") or "{}")


def node_samples(tree, rounds, worker_env=None, on_block=None):
    """In process and through the stand-in, for a cheap node (ours) and a real one (Blur).
    `worker_env`: variables for the worker's environment (its config's `env` table);
    `on_block`: as for in_turn."""
    import torch

    root, pack = tree
    sys.path.insert(0, str(root))
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options
    comfy.options.enable_args_parsing()
    base = Path(tempfile.mkdtemp(prefix="isohost-bench-"))
    config = base / "isohost.toml"
    config.write_text('[env.bench]\npython = "%s"\npacks = ["%s", "%s"]\n' % (
        sys.executable, pack, REPO / "tests" / "comfyui" / "packs" / "isohost_test_nodes"))
    host = host_table()
    if host:
        config.write_text("[host]\n" + "".join("%s = %d\n" % item for item in host.items())
                          + config.read_text())
    if worker_env:
        with config.open("a") as f:
            f.write("[env.bench.env]\n" + "".join("%s = %s\n" % (name, json.dumps(value))
                                                  for name, value in worker_env.items()))
    os.environ["ISOHOST_COMFYUI_CONFIG"] = str(config)
    os.environ["ISOHOST_PYTHONPATH"] = os.environ.get("ISOHOST_BUILD_PYTHON",
                                                      str(REPO / "build" / "python"))
    sys.path.insert(0, str(REPO / "comfyui"))
    import isohost_comfyui

    import importlib.util
    spec = importlib.util.spec_from_file_location("postproc", pack / "__init__.py",
                                                  submodule_search_locations=[str(pack)])
    postproc = importlib.util.module_from_spec(spec)
    sys.modules["postproc"] = postproc
    spec.loader.exec_module(postproc)
    sys.path.insert(0, str(REPO / "tests" / "comfyui" / "packs"))
    import isohost_test_nodes

    image = torch.rand(1, 1024, 1024, 3)
    functions = {"copy_12MiB": image.clone}
    cases = {"Invert": (isohost_test_nodes.Invert, {"image": image}),
             "Blur": (postproc.NODE_CLASS_MAPPINGS["Blur"], {"image": image, "blur_radius": 3,
                                                              "sigma": 1.0})}
    for name, (cls, kwargs) in cases.items():
        real = getattr(cls(), cls.FUNCTION)
        stand_in_cls = isohost_comfyui.NODE_CLASS_MAPPINGS[name if name == "Blur" else "InvertIsohost"]
        stand_in = stand_in_cls()
        # Outside a prompt the stand-in keeps nothing in its worker: its output comes back
        # with the answer, as for an isolated node read by a node in process.
        if not torch.equal(stand_in.run_isolated(**kwargs)[0], real(**kwargs)[0]):
            raise AssertionError("%s isolated gave another result" % name)
        functions["node_in_process." + name] = functools.partial(real, **kwargs)
        functions["node_isolated." + name] = functools.partial(stand_in.run_isolated, **kwargs)
    # As ComfyUI runs a prompt: the stand-in's worker runs the node in the same mode.
    with torch.inference_mode():
        out = in_turn(functions, rounds, on_block)
    isohost_comfyui.host.close()
    return out


def workflow_samples(tree, rounds):
    import conftest
    import workflows

    base = Path(tempfile.mkdtemp(prefix="isohost-bench-"))
    _, pack = tree
    envs = {"postproc": (sys.executable, [pack])}
    host = host_table() or None
    servers = {"in_process": conftest.start_server(tree, base / "in_process", custom_nodes=[pack]),
               "isolated": conftest.start_server(tree, base / "isolated", envs=envs, host=host),
               "isolated_crossing": conftest.start_server(
                   tree, base / "isolated_crossing", envs=envs, host=host,
                   comfyui={"keep_outputs_in_workers": False})}
    out = {"workflow10_" + which: [] for which in servers}
    try:
        infos = workflows.pack_nodes(servers["in_process"].object_info(), "post-processing")
        # Round by round across the servers, so that what else the machine does at one time
        # weighs on all three alike.
        for i in range(rounds + 1):
            for which, server in servers.items():
                prompt_id = server.queue(workflows.chain(CHAIN, infos, image=server.fresh_image()))
                kind, message, _ = server.finish(prompt_id)
                if kind != "execution_success":
                    raise AssertionError("%s: %s" % (which, message))
                start = server.events(prompt_id, ("execution_start",))[0][0]
                end = server.events(prompt_id, ("execution_success",))[0][0]
                if i:  # the first run starts the worker
                    out["workflow10_" + which].append((end - start) * 1e3)
    finally:
        for server in servers.values():
            server.stop()
    return out


def peer_samples():
    """pyisolate's and comfy-env's figures for the same node (1 - image), from
    bench/comfyui/peers.py in this same run, where its environments exist (peers.py --setup-only
    makes them: 7 GiB); {} otherwise. A peer that could not run says why on stderr."""
    import subprocess

    peers_root = Path(os.environ.get("ISOHOST_PEERS_ROOT", REPO / ".venv" / "peers"))
    if not peers_root.is_dir():
        print("peers: not measured (no %s; bench/comfyui/peers.py --setup-only makes it)"
              % peers_root, file=sys.stderr)
        return {}
    done = subprocess.run(["/usr/bin/python3", str(REPO / "bench" / "comfyui" / "peers.py"),
                           "--json", "--sealed-calls", "0"], capture_output=True, text=True)
    out = {}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        print("peers: no report (%s)" % done.stderr[-2000:], file=sys.stderr)
        return {}
    for peer in report["peers"]:
        if not peer.get("ran"):
            print("peers: %s did not run here: %s" % (peer.get("line"), peer.get("error")),
                  file=sys.stderr)
            continue
        out["peer_isolated." + peer["peer"]] = peer["isolated_samples_ms"]
        out["peer_in_process." + peer["peer"]] = peer["in_process_samples_ms"]
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    from comfy_server import unpack

    tree = unpack(Path(tempfile.mkdtemp(prefix="isohost-bench-tree-")))
    samples = {"raw_trip": raw_trip(rounds * 20)}
    samples.update(workflow_samples(tree, max(5, rounds // 10)))
    samples.update(node_samples(tree, rounds * 8))
    samples.update(peer_samples())
    for name, values in samples.items():
        print("%-32s median %8.3f ms" % (name, statistics.median(values)), file=sys.stderr)
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
