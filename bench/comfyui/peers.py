#!/usr/bin/env python3
"""The peers of `isohost bench comfyui`: pyisolate and comfy-env, measured the same way.

One ComfyUI node (peer_nodes.py: IMAGE in, IMAGE out, 1 - image), a [1, 1024, 1024, 3] float32
image, called from a host process into an isolated process through each peer's own node
machinery, and the same node called in that host process, interleaved call by call in the same
run. Per peer: the median ms per call isolated and in process, their ratio and difference,
and a ten-node chain (each node's output is the next one's input) both ways. A peer that
cannot run here gets a line saying why, with the error. Findings and sources: PEERS.md.

    /usr/bin/python3 bench/comfyui/peers.py --setup   # make the environments (idempotent), then run
    /usr/bin/python3 bench/comfyui/peers.py [--json] [--calls N] [--peers a,b]

This script is standard library only where it orchestrates: it runs each peer in a subprocess
under .venv/peers/host/bin/python (`--child PEER`), so that one peer's failure, its stdout
chatter or its process-wide torch settings cannot touch another's figures. Peers:

  pyisolate          pyisolate, ComfyUI's configuration for a pack with share_torch: host-coupled,
                     bubblewrap sandbox, CPU tensors through /dev/shm (torch file_system)
  pyisolate-sealed   pyisolate sealed_worker: its own venv and torch, tensors as JSON lists
  comfy-env          comfy-env's node proxy (metadata scan + build_proxy_class, as register_nodes
                     builds it) in a ComfyUI 0.3.64 host; its worker in another venv, tensors
                     through shared memory (file descriptors)
  comfy-env-install  comfy-env's documented install (install(): pixi builds the env); reported
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHARED = Path(os.environ.get("ISOHOST_SHARED", REPO.parent / "shared")) / "comfyui"
COMFYUI_TARBALL = SHARED / "ComfyUI-0.3.64.tar.gz"
SYSTEM_PYTHON = "/usr/bin/python3"
REQUIREMENTS = HERE / "requirements-peers.txt"
COMFY_ENV_WORKER_REQUIREMENTS = ["torch==2.13.0", "numpy==2.4.6"]
SEALED_TORCH = "torch==2.13.0"  # the wheel pyisolate's sealed child installs (pip download)
PEERS = ["pyisolate", "pyisolate-sealed", "comfy-env", "comfy-env-install"]
NODE = "IsohostPeerImageInvert"
SHAPE = (1, 1024, 1024, 3)
CHAIN = 10
RESULT_MARK = "ISOHOST-PEER-RESULT "


def default_root() -> Path:
    return Path(os.environ.get("ISOHOST_PEERS_ROOT", REPO / ".venv" / "peers"))


class Layout:
    """Where everything lives under the root (.venv/peers by default; all of it ignored)."""

    def __init__(self, root: Path):
        self.root = root
        self.host = root / "host"
        self.host_python = self.host / "bin" / "python"
        self.ce_worker = root / "comfy-env-worker"
        self.wheels = root / "wheels"
        self.pyisolate_venvs = root / "pyisolate-venvs"
        self.work = root / "work"
        self.comfyui = self.work / "ComfyUI"
        self.pack = self.comfyui / "custom_nodes" / "IsohostPeerPack"
        self.pyisolate_pack = self.work / "packs" / "isohost_peer_pack"
        self.ce_workspace = root / "comfy-env-workspace"
        self.logs = root / "logs"


# --------------------------------------------------------------------------------------------
# set-up


def _stamp(venv: Path, content: str) -> bool:
    """True when venv was made from exactly this content (then it is kept)."""
    f = venv / ".isohost-peers-stamp"
    return (venv / "bin" / "python").exists() and f.exists() and f.read_text() == content


def _make_venv(venv: Path, pip_args: list[str], stamp: str, log) -> None:
    if _stamp(venv, stamp):
        log(f"peers: {venv} is up to date")
        return
    log(f"peers: making {venv} ({' '.join(pip_args)})")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *pip_args], check=True)
    (venv / ".isohost-peers-stamp").write_text(stamp)


def prepare_work(lay: Layout) -> None:
    """ComfyUI 0.3.64 unpacked from the fixture, and the test pack laid out for both peers."""
    if not (lay.comfyui / "comfyui_version.py").exists():
        if not COMFYUI_TARBALL.exists():
            raise FileNotFoundError(f"{COMFYUI_TARBALL} (the ComfyUI fixture) is missing")
        lay.work.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=lay.work))
        with tarfile.open(COMFYUI_TARBALL) as tar:
            tar.extractall(tmp)
        shutil.rmtree(lay.comfyui, ignore_errors=True)
        (tmp / "ComfyUI").rename(lay.comfyui)
        shutil.rmtree(tmp)
    init = "from .peer_nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS\n"
    # comfy-env's layout: <pack>/nodes/ isolated by <pack>/nodes/comfy-env.toml, its env
    # named from the pack; <pack>/comfy-env-root.toml marks the pack for install().
    nodes = lay.pack / "nodes"
    nodes.mkdir(parents=True, exist_ok=True)
    _write(lay.pack / "comfy-env-root.toml", "")
    _write(lay.pack / "__init__.py",
           "from comfy_env import register_nodes\n"
           "NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes()\n")
    _write(nodes / "comfy-env.toml",
           '[dependencies]\npython = "3.11.*"\n\n[pypi-dependencies]\n'
           'torch = "==2.13.0"\nnumpy = "==2.4.6"\n')
    _write(nodes / "__init__.py", init)
    _write(nodes / "peer_nodes.py", (HERE / "peer_nodes.py").read_text())
    # pyisolate's layout: a module_path directory with an __init__.py.
    lay.pyisolate_pack.mkdir(parents=True, exist_ok=True)
    _write(lay.pyisolate_pack / "__init__.py", init)
    _write(lay.pyisolate_pack / "peer_nodes.py", (HERE / "peer_nodes.py").read_text())


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def setup(lay: Layout, log) -> None:
    if sys.version_info[:2] != (3, 11) and Path(SYSTEM_PYTHON).resolve() == Path(sys.executable).resolve():
        log("peers: the pins are for Python 3.11; trying anyway")
    if shutil.which("bwrap") is None:
        # pyisolate's default sandbox (and ComfyUI's default host policy) needs bubblewrap.
        if os.geteuid() == 0 and shutil.which("apt-get"):
            log("peers: installing bubblewrap (pyisolate's sandbox) with apt-get")
            if subprocess.run(["apt-get", "install", "-y", "-q", "bubblewrap"]).returncode != 0:
                subprocess.run(["apt-get", "update", "-q"], check=False)
                subprocess.run(["apt-get", "install", "-y", "-q", "bubblewrap"], check=False)
        else:
            log("peers: bwrap is missing and this is not root: pyisolate will say why it cannot start")
    req = REQUIREMENTS.read_text()
    _make_venv(lay.host, ["-r", str(REQUIREMENTS)], req, log)
    _make_venv(lay.ce_worker, COMFY_ENV_WORKER_REQUIREMENTS,
               "\n".join(COMFY_ENV_WORKER_REQUIREMENTS), log)
    if not list(lay.wheels.glob("torch-*.whl")):
        lay.wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(lay.host_python), "-m", "pip", "download", "-q", "--no-deps",
                        "--disable-pip-version-check", SEALED_TORCH, "-d", str(lay.wheels)],
                       check=True)
    prepare_work(lay)


# --------------------------------------------------------------------------------------------
# orchestration


def fmt_ms(v):
    return "-" if v is None else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


def peer_line(r: dict) -> str:
    name = r["peer"]
    if not r.get("ran"):
        return f"{name}: could not run here: {r.get('error')}"
    iso, inp = r["isolated_ms"], r["in_process_ms"]
    s = (f"{name}: {fmt_ms(iso)} ms per call isolated, {fmt_ms(inp)} ms in process "
         f"(x{iso / inp:.1f}, +{fmt_ms(iso - inp)} ms per node), 1024x1024 IMAGE in and out, "
         f"median of {r['calls']}")
    if r.get("chain_isolated_ms") is not None:
        ci, cp = r["chain_isolated_ms"], r["chain_in_process_ms"]
        s += (f"; {CHAIN}-node chain {fmt_ms(ci)} ms vs {fmt_ms(cp)} ms in process "
              f"(x{ci / cp:.1f}, median of {r['chain_rounds']})")
    elif r.get("chain_note"):
        s += f"; {CHAIN}-node chain: {r['chain_note']}"
    return s + f" [{r['how']}]"


def run_peer(lay: Layout, peer: str, args) -> dict:
    base = {"peer": peer, "ran": False}
    if not lay.host_python.exists():
        return {**base, "error": f"not set up ({lay.host_python} missing): run "
                                 f"`{SYSTEM_PYTHON} {Path(__file__).relative_to(REPO)} --setup`"}
    try:
        prepare_work(lay)
    except Exception as e:  # the fixture missing, say
        return {**base, "error": f"{type(e).__name__}: {e}"}
    lay.logs.mkdir(parents=True, exist_ok=True)
    log_path = lay.logs / f"{peer}.log"
    env = dict(os.environ)
    env["PATH"] = f"{lay.host / 'bin'}:{env.get('PATH', '')}"  # pyisolate finds uv on PATH
    # pyisolate's own advice for share_torch under its sandbox (benchmarks/simple_benchmark.py):
    # torch's shared-memory manager puts its socket in TMPDIR, and the sandbox's /tmp is private.
    # A directory of its own there, removed afterwards: the child ends with os._exit, and what
    # the peers leave in TMPDIR (comfy-env's staged worker scripts, multiprocessing's) goes too.
    tmpdir = tempfile.mkdtemp(prefix="isohost-peers-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    env["TMPDIR"] = tmpdir
    env["COMFY_ENV_ROOT"] = str(lay.ce_workspace)
    env.pop("PYTHONPATH", None)
    cmd = [str(lay.host_python), str(Path(__file__).resolve()), "--child", peer,
           "--root", str(lay.root), "--calls", str(args.calls), "--warmup", str(args.warmup),
           "--chain-rounds", str(args.chain_rounds), "--sealed-calls", str(args.sealed_calls)]
    t0 = time.monotonic()
    with open(log_path, "w") as logf:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=logf, env=env, text=True,
                               timeout=args.timeout)
            out = p.stdout
            rc = p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            rc = None
        logf.write("\n--- child stdout ---\n" + (out or ""))
    shutil.rmtree(tmpdir, ignore_errors=True)
    result = None
    for line in (out or "").splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
    if result is None:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-6:]
        why = "timed out" if rc is None else f"exited {rc}"
        result = {**base, "error": f"the peer's run {why} with no result; its log "
                                   f"{log_path}: {' | '.join(tail)}"}
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["log"] = str(log_path)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", action="store_true",
                    help="make the environments first (idempotent: kept when their pins match)")
    ap.add_argument("--setup-only", action="store_true", help="make the environments, measure nothing")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {PEERS}")
    ap.add_argument("--calls", type=int, default=30, help="timed calls per peer, each way")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per peer, each way")
    ap.add_argument("--chain-rounds", type=int, default=5, help="timed ten-node chains, each way")
    ap.add_argument("--sealed-calls", type=int, default=1,
                    help="timed calls for pyisolate-sealed, after its one untimed check call "
                         "(20-30 s each here; 0 skips it)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per peer")
    ap.add_argument("--root", type=Path, default=default_root())
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    lay = Layout(args.root.resolve())

    if args.child:
        return child_main(lay, args)

    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    if args.setup or args.setup_only:
        setup(lay, log)
        for peer in ("pyisolate", "pyisolate-sealed", "comfy-env"):
            # First starts build pyisolate's child venvs (uv) and comfy-env's metadata cache.
            if peer in args.peers.split(","):
                r = run_peer(lay, peer, argparse.Namespace(calls=1, warmup=0, chain_rounds=0,
                                                           sealed_calls=1, timeout=900))
                log(f"peers: first start of {peer}: {'ok' if r.get('ran') else r.get('error')}")
        if args.setup_only:
            return 0

    results = []
    for peer in [p for p in args.peers.split(",") if p]:
        if peer not in PEERS:
            print(f"peers: unknown peer {peer!r}; known: {', '.join(PEERS)}", file=sys.stderr)
            return 2
        if peer == "pyisolate-sealed" and args.sealed_calls <= 0:
            continue
        r = run_peer(lay, peer, args)
        r["line"] = peer_line(r)
        results.append(r)
        if not args.json:
            print(r["line"], flush=True)
    if args.json:
        print(json.dumps({"image_shape": list(SHAPE), "dtype": "float32", "node": NODE,
                          "chain_nodes": CHAIN, "peers": results}, indent=1))
    return 0


# --------------------------------------------------------------------------------------------
# the child: one peer, measured in its own host process (runs under .venv/peers/host)


def _median_ms(xs):
    return statistics.median(xs) * 1e3 if xs else None


def measure(isolated, in_process, image, warmup, calls, chain_rounds, clock=time.perf_counter):
    """Interleave isolated and in-process calls (alternating which goes first); fresh input each
    call (a clone, untimed), as a node's input is the previous node's fresh output."""
    import torch

    first = isolated(image.clone())
    want = in_process(image.clone())
    if not (isinstance(first, torch.Tensor) and first.shape == want.shape
            and torch.equal(first, want)):
        raise RuntimeError(f"the isolated node's output differs from in process: "
                           f"{type(first).__name__} {getattr(first, 'shape', None)}")
    ways = {"iso": isolated, "inp": in_process}
    samples = {"iso": [], "inp": []}
    for i in range(warmup + calls):
        for k in (("iso", "inp") if i % 2 == 0 else ("inp", "iso")):
            x = image.clone()
            t0 = clock()
            y = ways[k](x)
            t1 = clock()
            del x, y
            if i >= warmup:
                samples[k].append(t1 - t0)
    chains = {"iso": [], "inp": []}
    for i in range(chain_rounds):
        for k in (("iso", "inp") if i % 2 == 0 else ("inp", "iso")):
            x = image.clone()
            t0 = clock()
            for _ in range(CHAIN):
                x = ways[k](x)
            t1 = clock()
            del x
            chains[k].append(t1 - t0)
    return {
        "isolated_ms": _median_ms(samples["iso"]),
        "in_process_ms": _median_ms(samples["inp"]),
        "isolated_samples_ms": [round(s * 1e3, 3) for s in samples["iso"]],
        "in_process_samples_ms": [round(s * 1e3, 3) for s in samples["inp"]],
        "calls": len(samples["iso"]),
        "chain_isolated_ms": _median_ms(chains["iso"]),
        "chain_in_process_ms": _median_ms(chains["inp"]),
        "chain_rounds": len(chains["iso"]),
    }


def _image():
    import torch

    g = torch.Generator().manual_seed(12)
    return torch.rand(SHAPE, generator=g, dtype=torch.float32)


def child_main(lay: Layout, args) -> int:
    peer = args.child
    res = {"peer": peer, "ran": False}
    try:
        fn = {"pyisolate": child_pyisolate, "pyisolate-sealed": child_pyisolate_sealed,
              "comfy-env": child_comfy_env, "comfy-env-install": child_comfy_env_install}[peer]
        res.update(fn(lay, args))
    except BaseException as e:  # noqa: BLE001 - every failure is the peer's line
        import traceback

        traceback.print_exc()
        res["ran"] = False
        res["error"] = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")[:1500]
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(res), flush=True)
    os._exit(0)  # the peers' own atexit teardown is not what is measured, and may hang


def _version(dist):
    from importlib.metadata import version

    return version(dist)


def _pyisolate_run(lay, args, *, sealed: bool):
    import asyncio

    import torch

    sys.path.insert(0, str(HERE))  # peer_nodes: the extension class pyisolate loads by name
    import peer_nodes
    import pyisolate
    from pyisolate import SandboxMode

    image = _image()
    node = peer_nodes.PeerImageInvert()
    out = {"package": "pyisolate", "version": _version("pyisolate")}

    if sealed:
        wheels = sorted(lay.wheels.glob("torch-*.whl"))
        if not wheels:
            raise FileNotFoundError(f"no torch wheel in {lay.wheels}: run peers.py --setup")
        config = {
            "name": "isohost-peer-sealed", "module_path": str(lay.pyisolate_pack),
            "isolated": True, "dependencies": [str(wheels[-1])], "apis": [],
            "share_torch": False, "share_cuda_ipc": False, "execution_model": "sealed_worker",
            "sandbox_mode": SandboxMode.REQUIRED, "sandbox": {"network": False},
            "sealed_host_ro_paths": [str(HERE)],
        }
        out["how"] = (f"pyisolate {out['version']} sealed_worker: own venv ({wheels[-1].name}), "
                      f"bubblewrap sandbox, tensors as JSON lists over a Unix socket")
    else:
        # ComfyUI's host policy defaults (comfy/isolation/host_policy.py) and its config for a
        # pack with share_torch (comfy/isolation/extension_loader.py); CUDA IPC only with CUDA.
        config = {
            "name": "isohost-peer", "module_path": str(lay.pyisolate_pack), "isolated": True,
            "dependencies": [], "apis": [], "share_torch": True,
            "share_cuda_ipc": bool(torch.cuda.is_available()),
            "sandbox_mode": SandboxMode.REQUIRED,
            "sandbox": {"network": False, "writable_paths": ["/dev/shm"],
                        "readonly_paths": [str(HERE)]},
        }
        out["how"] = (f"pyisolate {out['version']} host-coupled, share_torch (host torch "
                      f"{torch.__version__} through a .pth), bubblewrap sandbox, CPU tensors "
                      f"through /dev/shm (torch file_system), JSON-RPC over a Unix socket")

    async def amain():
        mgr = pyisolate.ExtensionManager(peer_nodes.PeerNodeExtension,
                                         pyisolate.ExtensionManagerConfig(
                                             venv_root_path=str(lay.pyisolate_venvs)))
        t0 = time.perf_counter()
        ext = mgr.load_extension(config)
        nodes = await ext.list_nodes()
        info = await ext.child_info()
        start_s = time.perf_counter() - t0
        if NODE not in nodes or info["pid"] == os.getpid():
            raise RuntimeError(f"unexpected child: nodes={nodes} info={info}")
        loop = asyncio.get_running_loop()

        # measure() is synchronous; the event loop runs pyisolate's RPC, so each isolated call
        # is awaited on the loop from a helper thread, and the in-process call runs there too.
        def isolated(x):
            fut = asyncio.run_coroutine_threadsafe(ext.execute_node(NODE, image=x), loop)
            return fut.result()[0]

        def in_process(x):
            with torch.inference_mode():
                return node.invert(image=x)[0]

        calls = min(args.calls, args.sealed_calls) if sealed else args.calls
        warmup = 0 if sealed else args.warmup  # sealed: the check call is its warm-up
        chain_rounds = 0 if sealed else args.chain_rounds
        m = await loop.run_in_executor(
            None, lambda: measure(isolated, in_process, image, warmup, calls, chain_rounds))
        if sealed and args.chain_rounds:
            m["chain_note"] = f"not run (about {CHAIN} x the per-call time)"
        m.update(worker={"pid": info["pid"], "python": info["executable"]},
                 start_seconds=round(start_s, 2), ran=True)
        try:
            mgr.stop_all_extensions()
        except Exception:
            pass
        return m

    out.update(asyncio.run(amain()))
    return out


def child_pyisolate(lay, args):
    return _pyisolate_run(lay, args, sealed=False)


def child_pyisolate_sealed(lay, args):
    return _pyisolate_run(lay, args, sealed=True)


def _import_comfyui(lay):
    """The host is a ComfyUI 0.3.64 process: comfy-env's node runtime imports comfy.*,
    comfy_execution and (through comfy_execution.graph) nodes, as loaded there."""
    import torch

    sys.path.insert(0, str(lay.comfyui))
    import comfy.cli_args

    comfy.cli_args.args.cpu = not torch.cuda.is_available()  # ComfyUI's --cpu
    import comfy.model_management  # noqa: F401
    import nodes  # noqa: F401


def child_comfy_env(lay, args):
    import torch

    _import_comfyui(lay)
    from comfy_env.isolation.metadata import build_proxy_class, fetch_metadata
    from comfy_env.isolation.subenv import _get_env_paths

    out = {"package": "comfy-env", "version": _version("comfy-env")}
    env_dir = lay.ce_worker
    sp = _get_env_paths(env_dir)
    if sp is None:
        raise FileNotFoundError(f"no worker environment at {env_dir}: run peers.py --setup")
    # What register_nodes() does once it has found a materialized env for <pack>/nodes
    # (comfy_env/isolation/wrap.py, pattern 1): scan the package in the env's interpreter, then
    # one proxy class per node whose FUNCTION runs in the env's persistent worker.
    env_vars = {"COMFYUI_BASE": str(lay.comfyui)}
    t0 = time.perf_counter()
    meta = fetch_metadata(env_dir=env_dir, package_name="nodes", working_dir=lay.pack,
                          env_vars=env_vars)
    if NODE not in meta.get("nodes", {}):
        raise RuntimeError(f"comfy-env's metadata scan found {sorted(meta.get('nodes', {}))}")
    cls = build_proxy_class(node_name=NODE, meta=meta["nodes"][NODE], env_dir=env_dir,
                            package_root=lay.pack, sys_path=[str(sp), str(lay.pack)],
                            env_vars=env_vars)
    proxy = cls()
    run = getattr(proxy, cls.FUNCTION)
    sys.path.insert(0, str(HERE))
    import peer_nodes

    node = peer_nodes.PeerImageInvert()

    def isolated(x):
        with torch.inference_mode():
            return run(image=x)[0]

    def in_process(x):
        with torch.inference_mode():
            return node.invert(image=x)[0]

    isolated(_image())  # the worker starts at the first call
    start_s = time.perf_counter() - t0
    from comfy_env.isolation.pool import _WORKER_POOL

    rec = _WORKER_POOL.get(str(env_dir))
    worker = rec[0] if rec is not None else None
    wpid = getattr(getattr(worker, "_process", None), "pid", None)
    if wpid is None or wpid == os.getpid():
        raise RuntimeError(f"no separate worker process (pool: {list(_WORKER_POOL)})")
    out.update(measure(isolated, in_process, _image(), args.warmup, args.calls, args.chain_rounds))
    out.update(
        ran=True, start_seconds=round(start_s, 2),
        worker={"pid": wpid, "python": str(getattr(worker, "python", ""))},
        how=(f"comfy-env {out['version']} node proxy (fetch_metadata + build_proxy_class, as "
             f"register_nodes builds it) in a ComfyUI 0.3.64 host (torch {torch.__version__}); "
             f"worker: a plain venv (torch 2.13.0+cpu), not the pixi env install() would make; "
             f"tensors through shared memory (file descriptors), frames over a Unix socket"))
    return out


def child_comfy_env_install(lay, args):
    """comfy-env's documented way: the pack's install.py calls comfy_env.install(), which builds
    the pack's env with pixi; register_nodes() then runs the nodes in that env. Tried here for
    real, into a workspace under the root."""
    from comfy_env import install

    out = {"package": "comfy-env", "version": _version("comfy-env")}
    try:
        install(node_dir=lay.pack)
    except BaseException as e:  # noqa: BLE001
        from comfy_env.pixi import PIXI, PIXI_VERSION

        raise RuntimeError(
            f"comfy_env.install() (its documented set-up, which builds the env with pixi) fails "
            f"here: it downloads pixi {PIXI_VERSION} from github.com/prefix-dev/pixi/releases "
            f"({type(e).__name__}: {e}); no pixi at {PIXI}, and pixi would then need conda-forge "
            f"for the env's python. Only PyPI and Debian's archive are reachable from this "
            f"machine. Measured instead: the comfy-env line (its node proxy and worker, the "
            f"worker in a plain venv)") from e
    out.update(ran=False, error="comfy_env.install() unexpectedly succeeded; not measured "
                                "(the comfy-env line measures the same runtime)")
    return out


if __name__ == "__main__":
    sys.exit(main())
