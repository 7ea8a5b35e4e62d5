"""The adapter's side panel: GET /isohost/status on ComfyUI's server, checked against the pool's
own status taken in ComfyUI's process at the same moment, and the panel itself in ComfyUI's real
front end in headless Chromium, opened by a click on its sidebar button and read back from the
DOM. A screenshot of it goes to the test's directory, or to $ISOHOST_PANEL_SCREENSHOT
(docs/comfyui-panel.png was made so)."""

import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest
import websocket

from comfy_server import ADAPTER
from conftest import COMFY_PYTHON, PACK_PYTHON, TEST_PACKS, start_server

CHROMIUM = os.environ.get("ISOHOST_CHROMIUM", "/usr/bin/chromium")
PAGE_TIMEOUT = 180  # ComfyUI's front end in software-rendered Chromium on 2 busy cores
WINDOW = (1600, 1000)
# Two samples of an idle worker's PSS taken a moment apart differ only as far as other
# processes start or stop sharing its pages (libraries of its interpreter, torch's): PSS
# divides each shared page among its sharers. Other tests on this machine start and end such
# processes, so a few MB either way; the worker's own pages do not move (nothing runs in it, and
# idle_release_seconds = 0 keeps the release from dropping its caches in between).
PSS_MARGIN = 8 * 10**6

# An in-process node that hands back the pool's own status: the adapter's isohost.Host's ps(),
# taken on ComfyUI's prompt thread, not through the route.
PROBE = '''
import json
import sys


class PoolStatus:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "status"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    @classmethod
    def IS_CHANGED(cls):
        return float("nan")

    def status(self):
        adapter = next(m for name, m in list(sys.modules.items())
                       if name.endswith("isohost_comfyui") and getattr(m, "host", None))
        return {"ui": {"ps": [json.dumps(adapter.host.ps())]}, "result": ()}


NODE_CLASS_MAPPINGS = {"PoolStatusProbeIsohost": PoolStatus}
'''


def front_end_root():
    """ComfyUI's front end as its requirements install it (the other tests' servers serve none)."""
    found = subprocess.run(
        [COMFY_PYTHON, "-c", "import comfyui_frontend_package, os; "
         "print(os.path.join(os.path.dirname(comfyui_frontend_package.__file__), 'static'))"],
        capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


@pytest.fixture(scope="module")
def server(comfy_tree, tmp_path_factory):
    """ComfyUI with the front end, the test nodes isolated in environment "tests" and the numpy 1
    pack in "numpy1" (both under the pack's interpreter), and the probe in process."""
    root = front_end_root()
    if not root or not os.path.isdir(root):
        pytest.skip("comfyui_frontend_package is not installed for %s" % COMFY_PYTHON)
    base = tmp_path_factory.mktemp("panel")
    probe = base / "isohost_pool_probe"
    probe.mkdir()
    (probe / "__init__.py").write_text(PROBE)
    # A returning user: no template browser over the canvas.
    settings = base / "comfy" / "user" / "default" / "comfy.settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"Comfy.TutorialCompleted": True,
                                    "Comfy.Workflow.ShowMissingModelsWarning": False,
                                    "Comfy.Workflow.ShowMissingNodesWarning": False}))
    started = start_server(
        comfy_tree, base / "comfy", custom_nodes=[probe],
        envs={"tests": (PACK_PYTHON, [TEST_PACKS / "isohost_test_nodes"]),
              "numpy1": (PACK_PYTHON, [TEST_PACKS / "isohost_numpy1_pack"]),
              "gone": ("/no/such/python", [TEST_PACKS / "isohost_gpu_nodes"])},
        host={"idle_release_seconds": 0}, args=["--front-end-root", root])
    yield started
    started.stop()


def run_ok(server, workflow):
    kind, message, history = server.run(workflow)
    assert kind == "execution_success", (message, server.log_tail())
    return history["outputs"]


@pytest.fixture(scope="module")
def worker_pid(server):
    """Each environment's node run once; the "tests" worker's pid as the node saw it."""
    run_ok(server, {"1": {"class_type": "NumpyVersionIsohost", "inputs": {}}})
    outputs = run_ok(server, {"1": {"class_type": "ReportIsohost", "inputs": {"tag": "panel"}}})
    return outputs["1"]["pid"][0]


def pool_status(server):
    """The pool's own status, from isohost.Host.ps() in ComfyUI's process."""
    return json.loads(run_ok(server, {"1": {"class_type": "PoolStatusProbeIsohost",
                                            "inputs": {}}})["1"]["ps"][0])


def by_env(status):
    return {w["env"]: w for w in status["workers"]}


def test_the_route_answers_the_pools_status(server, worker_pid):
    before = server.request("GET", "/isohost/status")
    own = pool_status(server)
    after = server.request("GET", "/api/isohost/status")  # as the front end asks for it

    assert before["available"] and after["available"]
    assert {e["name"]: e["packs"] for e in before["environments"]} == {
        "tests": [str(TEST_PACKS / "isohost_test_nodes")],
        "numpy1": [str(TEST_PACKS / "isohost_numpy1_pack")],
        "gone": [str(TEST_PACKS / "isohost_gpu_nodes")]}
    assert before["not_loaded"] == [{
        "environment": "gone", "pack": str(TEST_PACKS / "isohost_gpu_nodes"),
        "reason": GONE}]
    machine = before["machine"]
    assert 0 < machine["available"] <= machine["total"]
    assert set(by_env(own)) == {"tests", "numpy1"}
    for answer in (before, after):
        assert set(answer) >= {"host", "workers", "zygotes"}
        assert answer["host"]["pid"] == own["host"]["pid"] == server.process.pid
        for env, worker in by_env(own).items():
            seen = by_env(answer)[env]
            # Exact: nothing ran in the workers between the three samples (the route starts,
            # wakes and asks nothing of them).
            for key in ("pid", "generation", "state", "calls"):
                assert seen[key] == worker[key], (env, key, seen, worker)
            assert abs(seen["pss"] - worker["pss"]) <= PSS_MARGIN, (env, seen, worker)
            assert seen["private"] <= seen["pss"] <= seen["rss"]
    tests = by_env(own)["tests"]
    assert tests["pid"] == worker_pid and tests["state"] == "ready"
    assert worker_pid in server.descendants()


def test_without_a_host_the_route_answers_an_empty_view_with_the_reason(comfy_tree, tmp_path):
    bare = start_server(comfy_tree, tmp_path / "bare", custom_nodes=[ADAPTER])
    try:
        answer = bare.request("GET", "/isohost/status")
    finally:
        bare.stop()
    assert answer["available"] is False
    assert answer["workers"] == [] and answer["zygotes"] == [] and answer["devices"] == []
    assert "isohost.toml does not exist" in answer["reason"], answer


class Chromium:
    """Headless Chromium driven through its DevTools protocol (one page)."""

    def __init__(self, profile):
        if not shutil.which(CHROMIUM):
            pytest.skip("%s is missing: scripts/setup installs it" % CHROMIUM)
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--user-data-dir=%s" % profile,
             "--remote-debugging-port=0", "--window-size=%d,%d" % WINDOW, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, errors="replace", start_new_session=True)
        self.stderr = []
        lines = queue.Queue()

        def read():
            for line in self.process.stderr:
                self.stderr.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        port = None
        deadline = time.monotonic() + 60
        while port is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError("Chromium exited: %s" % "".join(self.stderr[-20:]))
            if line.startswith("DevTools listening on ws://"):
                port = int(line.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=30) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        # Longer than any wait_for, which fails itself first with what it waited for.
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"],
                                              timeout=PAGE_TIMEOUT + 60, suppress_origin=True)
        self.next_id = 0

    def send(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError("%s: %s" % (method, message["error"]))
                return message["result"]

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError("%s\n%s" % (result["exceptionDetails"].get("exception", {})
                                           .get("description"), expression))
        return result["result"].get("value")

    def wait_for(self, predicate, what, timeout=PAGE_TIMEOUT):
        """Waits until the JS expression `predicate` is truthy, looked at whenever the DOM
        changes (a MutationObserver); fails after `timeout` seconds."""
        return self.evaluate("""new Promise((resolve, reject) => {
            const look = () => { try { return Boolean(%s); } catch (e) { return false; } };
            let timer = null;
            const observer = new MutationObserver(() => {
                const value = look();
                if (value) { observer.disconnect(); clearTimeout(timer); resolve(value); }
            });
            const now = look();
            if (now) { resolve(now); return; }
            observer.observe(document, {subtree: true, childList: true, attributes: true,
                                        characterData: true});
            timer = setTimeout(() => { observer.disconnect();
                reject(new Error("waited %d s for %s")); }, %d);
        })""" % (predicate, timeout, what.replace('"', "'"), timeout * 1000))

    def click(self, selector):
        """A real mouse click (pressed and released) at the middle of `selector`'s element."""
        box = self.evaluate("(() => { const r = document.querySelector(%s)"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, "
                            "r.y + r.height / 2]; })()" % json.dumps(selector))
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left",
                      clickCount=1)

    def close(self):
        try:
            self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            # Its renderer and helper processes, in the session it was started in.
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def chromium(tmp_path):
    browser = Chromium(tmp_path / "chromium-profile")
    yield browser
    browser.close()


# The worker rows the panel shows: {env: {pid, state, generation, pss, ...}} from the DOM.
READ_ROWS = """(() => {
    const rows = {};
    for (const tr of document.querySelectorAll("#isohost-workers-table tr.isohost-worker-row")) {
        const row = {pid: Number(tr.dataset.pid), state: tr.dataset.state,
                     generation: Number(tr.dataset.generation)};
        for (const td of tr.querySelectorAll("td[data-field]")) {
            row[td.dataset.field + "_text"] = td.textContent;
            if (td.dataset.value !== undefined && td.dataset.value !== "")
                row[td.dataset.field] = Number(td.dataset.value);
        }
        rows[tr.dataset.env] = row;
    }
    return rows;
})()"""


NOT_LOADED = """Array.from(document.querySelectorAll('.isohost-not-loaded'))
    .map(n => [n.dataset.env, n.dataset.pack, n.textContent])"""
GONE = "the interpreter of environment 'gone', /no/such/python, is not an executable file"


def test_the_panel_shows_the_workers_in_comfyuis_page(server, worker_pid, chromium, tmp_path):
    chromium.send("Page.enable")
    chromium.send("Page.navigate", url="http://127.0.0.1:%d/" % server.port)
    # The front end has loaded the extension when its sidebar button exists.
    chromium.wait_for("document.querySelector('.side-tool-bar-container .isohost-tab-button')",
                      "the isohost sidebar button")
    # The isolated nodes on the canvas, beside the panel, for the screenshot.
    chromium.evaluate("""(async () => {
        const app = window.comfyAPI.app.app;
        await app.loadApiJson({
            "1": {"class_type": "ReportIsohost", "inputs": {"tag": "panel"}},
            "2": {"class_type": "NumpyVersionIsohost", "inputs": {}}}, "isolated.json");
        app.canvas.ds.offset = [0, 0];
        app.canvas.ds.scale = 1;
        app.graph._nodes.forEach((node, i) => { node.pos = [480, 140 + 160 * i]; });
        app.canvas.setDirty(true, true);
    })()""")
    chromium.click(".side-tool-bar-container .isohost-tab-button")
    chromium.wait_for("document.querySelector('#isohost-worker-tests')?.dataset.pid == %d "
                      "&& document.querySelector('#isohost-worker-numpy1')" % worker_pid,
                      "the panel's row of worker 'tests'")
    shown = chromium.evaluate(READ_ROWS)
    answer = server.request("GET", "/isohost/status")
    assert answer["available"]
    assert chromium.evaluate("document.querySelector('#isohost-status').dataset.available") \
        == "true"
    for env, worker in by_env(answer).items():
        row = shown[env]
        assert (row["pid"], row["state"], row["generation"], row["calls"]) == (
            worker["pid"], worker["state"], worker["generation"], worker["calls"]), (env, row)
        assert abs(row["pss"] - worker["pss"]) <= PSS_MARGIN, (env, row, worker)
        # What a person reads: the pid, and PSS in MB as `isohost ps` prints it.
        assert row["pid_text"] == str(worker["pid"]) and row["state_text"] == worker["state"]
        number, unit = row["pss_text"].split()
        scale, rounding = {"MB": (1e6, 0.5e6), "GB": (1e9, 0.05e9)}[unit]
        assert abs(float(number) * scale - worker["pss"]) <= PSS_MARGIN + rounding
    assert shown["tests"]["pid"] == worker_pid
    # A pack left out at start is named, with why, where the log alone said so before.
    assert chromium.evaluate(NOT_LOADED) == [
        ["gone", str(TEST_PACKS / "isohost_gpu_nodes"),
         "%s (environment gone)%s" % (TEST_PACKS / "isohost_gpu_nodes", GONE)]]
    # The machine's RAM bar has a segment per worker, sized by its PSS.
    segments = chromium.evaluate("""Array.from(document.querySelectorAll(
        '#isohost-ram-bar rect')).map(r => r.dataset.segment)""")
    assert "tests (%d)" % worker_pid in segments and "available" in segments
    # The history: the panel's own samples, a line each for the workers' PSS and VRAM.
    chromium.wait_for("Number(document.querySelector('#isohost-history')?.dataset.points) >= 2",
                      "the panel's history of two samples")
    peak = chromium.evaluate(
        "Number(document.querySelector('#isohost-history-chart polyline[data-series=pss]').dataset.peak)")
    assert peak >= sum(w["pss"] for w in by_env(answer).values()) - PSS_MARGIN

    png = base64.b64decode(chromium.send("Page.captureScreenshot", format="png")["data"])
    (tmp_path / "comfyui-panel.png").write_bytes(png)
    if os.environ.get("ISOHOST_PANEL_SCREENSHOT"):
        with open(os.environ["ISOHOST_PANEL_SCREENSHOT"], "wb") as f:
            f.write(png)
    assert png.startswith(b"\x89PNG")
