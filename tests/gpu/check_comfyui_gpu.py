"""GPU checks of the ComfyUI adapter in a real ComfyUI on the card, run by bench/gpu/run.sh
(comfyui). One line per check, then "N passed, N failed". Needs, in the environment: the
harness's settings (ISOHOST_COMFY_PYTHON, ISOHOST_PACK_PYTHON, ISOHOST_COMFY_DEVICE=gpu,
ISOHOST_COMFY_PYTHONPATH for the wheels ComfyUI needs, ISOHOST_BUILD_PYTHON,
ISOHOST_COMFYUI_FIXTURES).

1. CUDA tensors cross: an isolated node's CUDA output arrives in ComfyUI on cuda:0, an isolated
   node takes a CUDA input and gives one back, and the workflow's bytes equal the same workflow
   in process.
2. One view of the card, with another process holding all but 26 GiB of it: ComfyUI loads a
   12 GiB model of its own; an isolated node's 12 GiB load makes ComfyUI offload its model;
   ComfyUI's own load again makes isohost hibernate (or release, or reap) the idle worker.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "comfyui"))

import conftest  # noqa: E402
from comfy_server import unpack  # noqa: E402

PACKS = conftest.TEST_PACKS
results = []


def check(name, ok, detail):
    results.append(bool(ok))
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def node(class_type, node_id="1", **inputs):
    return {node_id: {"class_type": class_type, "inputs": inputs}}


def run(server, workflow):
    kind, message, history = server.run(workflow)
    if kind != "execution_success":
        raise AssertionError("%s: %s" % (kind, message))
    return history


def cuda_workflow(server, to_cuda, device_of, channels_first=False):
    """LoadImage -> ToCuda -> InvertIsohost (on the GPU: the post-processing pack's own nodes
    keep their kernels on the CPU) -> SaveImage; the saved files' digests, and where each CUDA
    tensor arrived (device, strides)."""
    image = server.fresh_image()
    workflow = {"1": {"class_type": "LoadImage", "inputs": {"image": image}},
                "2": {"class_type": to_cuda, "inputs": {"image": ["1", 0],
                                                        "channels_first": channels_first}},
                "3": {"class_type": "InvertIsohost", "inputs": {"image": ["2", 0]}},
                "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0],
                                                            "filename_prefix": "cuda"}},
                "5": {"class_type": device_of, "inputs": {"image": ["2", 0]}},
                "6": {"class_type": device_of, "inputs": {"image": ["3", 0]}}}
    history = run(server, workflow)
    files = server.output_files(history)
    outputs = history["outputs"]
    return ([hashlib.sha256(b).hexdigest() for b in files["4"]],
            outputs["5"]["device"][0], outputs["6"]["device"][0],
            outputs["5"]["strides"], outputs["6"]["strides"])


def check_cuda_tensors(tree, base):
    host_nodes = PACKS / "isohost_gpu_host_nodes"
    in_process = conftest.start_server(tree, base / "in_process",
                                       custom_nodes=[host_nodes, PACKS / "isohost_test_nodes"])
    isolated = conftest.start_server(
        tree, base / "isolated", custom_nodes=[host_nodes],
        envs={"gpu": (conftest.PACK_PYTHON, [PACKS / "isohost_test_nodes",
                                             PACKS / "isohost_gpu_nodes"])})
    try:
        mine = cuda_workflow(in_process, "ToCudaHost", "DeviceOfHost")
        theirs = cuda_workflow(isolated, "ToCudaIsolated", "DeviceOfHost")
        check("cuda.crossing", theirs[1] == "cuda:0" and theirs[2] == "cuda:0",
              "an isolated node's CUDA output arrives on %s, the isolated Invert's on %s"
              % (theirs[1], theirs[2]))
        check("cuda.same_bytes", mine[0] == theirs[0] and mine[1] == "cuda:0",
              "in process %s, isolated %s" % (mine[0][0][:12], theirs[0][0][:12]))
        # A permuted CUDA view crosses with its layout both ways (values.py: its memory and
        # strides), with the same bytes.
        mine = cuda_workflow(in_process, "ToCudaHost", "DeviceOfHost", channels_first=True)
        theirs = cuda_workflow(isolated, "ToCudaIsolated", "DeviceOfHost", channels_first=True)
        check("cuda.permuted_keeps_its_strides",
              mine[0] == theirs[0] and theirs[1:] == mine[1:] and mine[3] != sorted(mine[3])[::-1],
              "in process %s %s, isolated %s %s" % (mine[0][0][:12], mine[3:], theirs[0][0][:12],
                                                    theirs[3:]))
    finally:
        in_process.stop()
        isolated.stop()


HOG = """
import sys, torch
free, total = torch.cuda.mem_get_info()
keep = int(sys.argv[1]) << 30
hog = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
print("holding", hog.numel() >> 30, "GiB", flush=True)
sys.stdin.read()
"""


def state(server, tag, node_class="ModelStateHost"):
    return run(server, node(node_class, tag=tag))["outputs"]["1"]


def check_one_view(tree, base):
    hog = subprocess.Popen([sys.executable, "-c", HOG, "26"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    print("hog:", hog.stdout.readline().strip(), flush=True)
    server = conftest.start_server(
        tree, base / "memory", custom_nodes=[PACKS / "isohost_gpu_host_nodes"],
        envs={"gpu": (conftest.PACK_PYTHON, [PACKS / "isohost_gpu_nodes"])},
        host={"idle_release_seconds": 0, "vram_reserve_mib": 256})
    try:
        first = run(server, node("LoadBigModelHost", gib=12, tag="host"))["outputs"]["1"]
        check("memory.host_loads", first["loaded_gib"][0] >= 11.9,
              "ComfyUI loaded its own 12 GiB model (%s GiB on the card, %s GiB free)"
              % (first["loaded_gib"][0], first["free_gib"][0]))
        worker = run(server, node("LoadBigModelIsolated", gib=12, tag="worker"))["outputs"]["1"]
        host_after = state(server, "host")
        check("memory.isolated_load_offloads_comfyui", worker["loaded_gib"][0] >= 11.9
              and host_after["loaded_gib"][0] < 1,
              "the isolated node loaded %s GiB; ComfyUI's own model went to %s GiB on the card"
              % (worker["loaded_gib"][0], host_after["loaded_gib"][0]))
        again = run(server, node("LoadBigModelHost", gib=12, tag="host"))["outputs"]["1"]
        log = "\n".join(server.log)
        made_room = [l for l in server.log if "made room for ComfyUI's own load" in l
                     or "admission granted" in l or "hibernated worker" in l]
        check("memory.comfyui_load_makes_room_with_the_idle_worker",
              again["loaded_gib"][0] >= 11.9 and ("hibernat" in log or "released 'gpu'" in log
                                                  or "reaped 'gpu'" in log),
              "ComfyUI reloaded %s GiB; %s" % (again["loaded_gib"][0],
                                               " | ".join(made_room[-3:]) or "no admission step"))
        back = state(server, "worker", "ModelStateIsolated")
        check("memory.worker_serves_after", back["loaded_gib"][0] >= 0,
              "the isolated worker answers again (its model %s GiB on the card)"
              % back["loaded_gib"][0])
    finally:
        server.stop()
        hog.stdin.close()
        hog.wait()


def main():
    work = Path(tempfile.mkdtemp(prefix="isohost-gpu-comfyui-"))
    tree = unpack(work / "tree")
    for part in (check_cuda_tensors, check_one_view):
        try:
            part(tree, work)
        except Exception as e:  # one part's failure must not hide the other's result
            check(part.__name__, False, "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
