"""A/B of a stand-in call's cost, the adapter and runtime of AB_ADAPTER and ISOHOST_BUILD_PYTHON
(README here): the isohost_test_nodes Counter (no tensor) and Invert (a 1024x1024 IMAGE) through
the stand-ins ComfyUI would call, medians of 400 and 200 calls, ms."""
import sys, os, tempfile, statistics, time
from pathlib import Path
REPO = Path("/work/main")
sys.path.insert(0, str(REPO / "bench/comfyui")); sys.path.insert(0, str(REPO / "tests/comfyui"))
from comfy_server import unpack
import torch
root, pack = unpack(Path(tempfile.mkdtemp(prefix="isohost-ab-tree-")))
sys.path.insert(0, str(root)); sys.argv = [sys.argv[0], "--cpu"]
import comfy.options; comfy.options.enable_args_parsing()
base = Path(tempfile.mkdtemp(prefix="isohost-ab-"))
config = base / "isohost.toml"
config.write_text('[env.bench]\npython = "%s"\npacks = ["%s"]\n' % (sys.executable, REPO / "tests/comfyui/packs/isohost_test_nodes"))
os.environ["ISOHOST_COMFYUI_CONFIG"] = str(config)
os.environ["ISOHOST_PYTHONPATH"] = os.environ["ISOHOST_BUILD_PYTHON"]
sys.path.insert(0, os.environ["AB_ADAPTER"])
import isohost_comfyui
c = isohost_comfyui.NODE_CLASS_MAPPINGS["CounterIsohost"]()
s = isohost_comfyui.NODE_CLASS_MAPPINGS["InvertIsohost"]()
image = torch.rand(1, 1024, 1024, 3)
def med(f, n=400):
    for _ in range(20): f()
    r=[]
    for _ in range(n):
        t=time.perf_counter(); f(); r.append((time.perf_counter()-t)*1e3)
    return statistics.median(r)
print("%s Counter %.3f Invert %.3f" % (os.environ["AB_NAME"], med(lambda: c.run_isolated(step=1)), med(lambda: s.run_isolated(image=image), 200)))
isohost_comfyui.host.close()
