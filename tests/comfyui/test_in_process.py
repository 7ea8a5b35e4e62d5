"""The baseline the isolated tests compare against: the real ComfyUI with the post-processing
pack (and the isohost test nodes) in custom_nodes, in process, as a ComfyUI user has them.

Every node of the pack runs (pack_workflows: 23 nodes, two of them also with their randomness)
and saves a PNG; the deterministic workflows give the same bytes twice; and the in-process
behaviour of a ProgressBar and of POST /interrupt is recorded (printed with -s) and held to
what ComfyUI promises: a progress event per tick, an interrupt taking effect at the next tick.
"""

import json
import time

import pytest

from comfy_server import ComfyServer
from conftest import _COMFY_ENV, COMFY_PYTHON, DEVICE, TEST_PACKS
import pack_workflows as pw

PACK_MODULE = "custom_nodes.ComfyUI-post-processing-nodes"


@pytest.fixture(scope="module")
def server(comfy_tree, tmp_path_factory):
    root, pack = comfy_tree
    base = tmp_path_factory.mktemp("in_process")
    pw.write_inputs(base / "input")
    # --cache-none: every prompt runs every node, so a repeated workflow really runs again.
    started = time.monotonic()
    server = ComfyServer(root, base, COMFY_PYTHON, [pack, TEST_PACKS / "isohost_test_nodes"],
                         env=dict(_COMFY_ENV, **pw.font_env(base)), args=["--cache-none"],
                         cpu=DEVICE == "cpu")
    print("\nComfyUI in process: serving %.1f s after start" % (time.monotonic() - started))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def first_run(server):
    started = time.monotonic()
    results = pw.run_all(server)
    print("\n%d workflows in %.1f s" % (len(results), time.monotonic() - started))
    return results


def test_every_node_of_the_pack_is_registered(server):
    info = server.object_info()
    registered = sorted(name for name, node in info.items()
                        if node.get("python_module") == PACK_MODULE)
    assert registered == sorted(pw.NODES)


def test_every_node_saves_an_image(server, first_run, tmp_path_factory):
    assert set(first_run) == set(pw.WORKFLOWS)
    digests = {}
    for key, data in sorted(first_run.items()):
        assert data.startswith(b"\x89PNG"), key
        mode, size, pixel_digest = pw.pixels(data)
        # Every node keeps its image's size; the masks come out as one channel.
        assert size == pw.output_size(key), (key, size)
        assert mode == ("L" if key in ("CannyEdgeMask", "HSVThresholdMask") else "RGB"), key
        digests[key] = {"sha256": pw.sha256(data), "pixels": pixel_digest}
    # What the isolated runs are compared with; kept beside the test's files for a look.
    record = tmp_path_factory.getbasetemp() / "in_process_sha256.json"
    record.write_text(json.dumps(digests, indent=1, sort_keys=True))
    print("\nsha256 of each workflow's PNG in %s" % record)


def test_every_node_changes_its_input(server, first_run):
    """Each workflow's output differs from its input image (else a byte comparison would prove
    little), but Dissolve at factor 1.0, which keeps image1."""
    sources = {_pixels_of(server.base / "input" / name) for name in pw.SIZES}
    same = sorted(key for key, data in first_run.items() if pw.pixels(data)[2] in sources)
    assert same in ([], ["Dissolve"]), same


def test_deterministic_workflows_repeat_byte_for_byte(server, first_run):
    second = pw.run_all(server)
    differs = sorted(key for key in pw.WORKFLOWS if second[key] != first_run[key])
    print("\ndiffer between two in-process runs: %s" % ", ".join(differs))
    assert set(differs) == set(pw.NONDETERMINISTIC)
    for key in pw.NONDETERMINISTIC:  # the same size and kind, other pixels
        assert pw.pixels(second[key])[:2] == pw.pixels(first_run[key])[:2]


def test_progress_events_in_process(server):
    steps, seconds_per_step = 10, 0.05
    kind, message, _ = server.run({"1": {"class_type": "ProgressLoopIsohost", "inputs": {
        "steps": steps, "seconds_per_step": seconds_per_step}}})
    assert kind == "execution_success", message
    prompt_id = message["data"]["prompt_id"]
    progress = server.events(prompt_id, ("progress",))
    values = [m["data"]["value"] for _, m in progress]
    assert values == list(range(1, steps + 1))
    assert {m["data"]["max"] for _, m in progress} == {steps}
    assert {m["data"]["node"] for _, m in progress} == {"1"}
    times = [t for t, _ in progress]
    gaps = [b - a for a, b in zip(times, times[1:])]
    print("\nprogress in process: %d events, gaps %.3f-%.3f s (a tick every %.3f s)"
          % (len(progress), min(gaps), max(gaps), seconds_per_step))
    assert min(gaps) > seconds_per_step * 0.5


def test_interrupt_takes_effect_at_the_next_tick_in_process(server):
    seconds_per_step = 0.05
    prompt_id = server.queue({"1": {"class_type": "ProgressLoopIsohost", "inputs": {
        "steps": 400, "seconds_per_step": seconds_per_step}}})
    server.wait_for_event(prompt_id, ("progress",), timeout=60)
    sent = server.interrupt()
    ended, message = server.wait_for_event(
        prompt_id, ("execution_success", "execution_error", "execution_interrupted"), 60)
    latency = ended - sent
    ticks = len(server.events(prompt_id, ("progress",)))
    print("\ninterrupt in process (ProgressLoop, a tick every %.2f s): "
          "execution_interrupted %.3f s after POST /interrupt, after %d of 400 ticks"
          % (seconds_per_step, latency, ticks))
    assert message["type"] == "execution_interrupted"
    assert message["data"]["node_id"] == "1"
    assert latency < seconds_per_step + 0.25
    assert _next_prompt_succeeds(server)


def test_interrupt_of_a_node_without_ticks_waits_for_it_in_process(server):
    """A node spinning in Python with no ProgressBar is not stopped in process: ComfyUI checks
    the interrupt flag only at progress ticks and between nodes. The baseline for the isolated
    case, where isohost does better (it raises in the worker's thread)."""
    seconds = 2.0
    seen = len(server.messages)
    prompt_id = server.queue({"1": {"class_type": "BusyLoopIsohost", "inputs": {"seconds": seconds}}})
    # The node says "started" from inside itself: the interrupt arrives mid-node.
    started, _ = _wait_for_message(server, "isohost_test.started", seen, 60)
    sent = server.interrupt()
    ended, message = server.wait_for_event(
        prompt_id, ("execution_success", "execution_error", "execution_interrupted"), 60)
    print("\ninterrupt in process (BusyLoop %.1f s, no ticks): %s %.2f s after POST /interrupt, "
          "%.2f s after the node started" % (seconds, message["type"], ended - sent,
                                             ended - started))
    # The node ran to its end, and with no node after it the interrupt was lost: the prompt
    # succeeded (ComfyUI clears the flag when the next prompt starts).
    assert ended - started >= seconds * 0.95
    assert message["type"] == "execution_success"
    assert _next_prompt_succeeds(server)


def _wait_for_message(server, kind, start, timeout):
    """The first websocket message of type `kind` from server.messages[start:]: (time, msg)."""
    found = []

    def seen():
        found[:] = [(t, m) for t, m in server.messages[start:] if m.get("type") == kind][:1]
        return bool(found)

    server._wait_for(seen, timeout, kind)
    return found[0]


def _next_prompt_succeeds(server):
    kind, message, _ = server.run({"1": {"class_type": "ProgressLoopIsohost", "inputs": {
        "steps": 2, "seconds_per_step": 0.0}}}, timeout=60)
    return kind == "execution_success"


def _pixels_of(path):
    from PIL import Image

    with Image.open(path) as image:
        return pw.sha256(image.convert("RGB").tobytes())
