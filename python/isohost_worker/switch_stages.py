"""What `isohost bench switch` runs besides the pool (bench/switch.cpp).

In a worker, as call targets:

    load_model(nbytes, pieces=40)        reserve_vram(nbytes) first, so the host's admission makes
                                         room; then stages.hold_model; returns the checksum
    in_process_move(nbytes, rounds=3, pinned=False)
                                         one process moving a model to host RAM and back, as a
                                         single-process ComfyUI offloads one model for another:
                                         Module.to (pageable), or into host tensors pinned once

As a process of its own, not an isohost worker (the foreign process on the card):

    python -m isohost_worker.switch_stages fill ROOM_BYTES

opens CUDA, holds all of the card's free memory but ROOM_BYTES, prints one JSON line
{"ready": true, "held", "free", "total"} and waits until its standard input closes.

Standard library, and torch imported lazily.
"""

import json
import sys
import time


def load_model(nbytes, pieces=40):
    """Ask the host for `nbytes` of VRAM, then make and keep a model of that size. Answers how the
    room was made and the model's checksum."""
    import isohost_worker
    from isohost_worker import stages

    if not hasattr(stages, "hold_model") or not hasattr(stages, "model_checksum"):
        raise RuntimeError("isohost_worker.stages has no hold_model or model_checksum: "
                           "this runtime predates sleep")
    nbytes = int(nbytes)
    started = time.perf_counter()
    grant = isohost_worker.reserve_vram(nbytes)
    asked = time.perf_counter()
    with grant:  # raises VramRefused, with the host's arithmetic, if there is no room
        held = stages.hold_model(nbytes, int(pieces))
    loaded = time.perf_counter()
    return {
        "outcome": grant.outcome,
        "explanation": grant.explanation,
        "reserve_seconds": asked - started,
        "load_seconds": loaded - asked,
        "held": held,
        "checksum": stages.model_checksum(),
    }


def _module_of(nbytes, pieces):
    """A module of `pieces` float16 parameters, `nbytes` in all, on the card."""
    import torch

    elements = max(1, int(nbytes) // int(pieces) // 2)
    module = torch.nn.Module()
    generator = torch.Generator(device="cuda").manual_seed(14)
    module.weights = torch.nn.ParameterList(
        torch.nn.Parameter(torch.randn(elements, dtype=torch.float16, device="cuda",
                                       generator=generator), requires_grad=False)
        for _ in range(int(pieces)))
    torch.cuda.synchronize()
    return module


def _checksum(module):
    import torch

    return sum(float(torch.sum(p, dtype=torch.float64).item()) for p in module.parameters())


def in_process_move(nbytes, rounds=3, pieces=40, pinned=False):
    """Make a model of `nbytes` on the card, then `rounds` times move it to host RAM and back as
    one process does, each direction timed to its last byte and the card's memory given back
    (empty_cache) before the move in. Pageable (`pinned` false): `Module.to("cpu")` and
    `.to("cuda")`, new host memory each time. Pinned: into host tensors pinned once, before the
    rounds (that time answered apart), as a single-process ComfyUI that keeps its offloaded
    weights pinned does. Answers the times in ms and whether the checksum came back the same."""
    import torch

    module = _module_of(nbytes, pieces)
    before = _checksum(module)
    parameters = list(module.parameters())
    moved = sum(p.numel() * p.element_size() for p in parameters)
    pin_started = time.perf_counter()
    hosts = [torch.empty_like(p, device="cpu", pin_memory=True) for p in parameters] if pinned else []
    pin_ms = (time.perf_counter() - pin_started) * 1000.0
    out_ms, in_ms, switch_ms = [], [], []
    for _ in range(int(rounds)):
        torch.cuda.synchronize()
        start = time.perf_counter()
        _move_out(torch, module, parameters, hosts)
        torch.cuda.empty_cache()
        middle = time.perf_counter()
        _move_in(torch, module, parameters, hosts)
        torch.cuda.synchronize()
        end = time.perf_counter()
        out_ms.append((middle - start) * 1000.0)
        in_ms.append((end - middle) * 1000.0)
        switch_ms.append((end - start) * 1000.0)
    after = _checksum(module)
    del module, parameters, hosts
    torch.cuda.empty_cache()
    return {"bytes": moved, "pinned": bool(pinned), "pin_ms": pin_ms if pinned else None,
            "out_ms": out_ms, "in_ms": in_ms, "switch_ms": switch_ms, "intact": before == after,
            "checksum": before}


def _move_out(torch, module, parameters, hosts):
    if not hosts:
        module.to("cpu")
        return
    for parameter, host in zip(parameters, hosts):
        host.copy_(parameter.data, non_blocking=True)
    torch.cuda.synchronize()
    for parameter, host in zip(parameters, hosts):
        parameter.data = host


def _move_in(torch, module, parameters, hosts):
    if not hosts:
        module.to("cuda")
        return
    for parameter, host in zip(parameters, hosts):
        parameter.data = host.to("cuda", non_blocking=True)


def fill(room):
    """The foreign process: hold all the card's free memory but `room` bytes until stdin closes."""
    room = int(room)
    try:
        import torch

        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
    except Exception as e:  # no torch, no CUDA: said on the one line the bench reads
        print(json.dumps({"ready": False, "reason": "%s: %s" % (type(e).__name__, e)}), flush=True)
        return 2
    if free < room:
        print(json.dumps({"ready": False, "free": free, "total": total, "room": room,
                          "reason": "the card has %d MiB free, less than the %d MiB asked for"
                                    % (free >> 20, room >> 20)}), flush=True)
        return 2
    held = torch.empty(free - room, dtype=torch.uint8, device="cuda") if free > room else None
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    print(json.dumps({"ready": True, "held": 0 if held is None else held.numel(), "free": free_after,
                      "total": total}), flush=True)
    sys.stdin.read()  # until the bench closes it, or ends
    return 0


def main(argv):
    if len(argv) != 3 or argv[1] != "fill":
        print("usage: python -m isohost_worker.switch_stages fill ROOM_BYTES", file=sys.stderr)
        return 64
    return fill(int(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
