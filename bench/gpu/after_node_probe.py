"""What an isolated node pays right after a node in process (issue 12; docs/comfyui.md,
"ComfyUI's own torch threads"): Invert on a 1024x1024 IMAGE in process and through its
stand-in, each timed alone (right after another call of itself) and right after the post-
processing pack's Blur in process, whose torch threads then spin (libgomp's default), in eight
turns on bench comfyui's setup (bench_comfyui.node_samples). Prints each figure's median, 10th
and 90th percentiles. Run as bench comfyui is (ComfyUI's interpreter, ISOHOST_BUILD_PYTHON set):

    python3 bench/gpu/after_node_probe.py SAMPLES
    GOMP_SPINCOUNT=10000 python3 bench/gpu/after_node_probe.py 240
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "comfyui"))
import bench_comfyui  # noqa: E402


def probe(functions, rounds, on_block=None):
    blur = functions["node_in_process.Blur"]
    out = {}
    for turn in range(8):
        for side in ("in_process", "isolated"):
            node = functions["node_%s.Invert" % side]
            for before, first in (("alone", node), ("after_blur", blur)):
                samples = out.setdefault("%s.%s" % (before, side), [])
                for i in range(rounds // 8 + 5):
                    first()
                    start = time.perf_counter()
                    node()
                    if i >= 5:
                        samples.append((time.perf_counter() - start) * 1e3)
    return out


bench_comfyui.in_turn = probe
from comfy_server import unpack  # noqa: E402

tree = unpack(Path(tempfile.mkdtemp(prefix="isohost-probe-tree-")))
for name, values in bench_comfyui.node_samples(tree, int(sys.argv[1])).items():
    print("%-24s median %7.3f ms  p10 %7.3f  p90 %7.3f" % (
        name, statistics.median(values), *statistics.quantiles(values, n=10)[::8]))
