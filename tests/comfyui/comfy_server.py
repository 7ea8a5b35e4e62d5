"""A real ComfyUI on 127.0.0.1 for the tests: unpacked from ../shared/comfyui at test time, one
base directory per server (its custom_nodes, input, output, temp, user), driven through its HTTP
API and websocket as a browser would."""

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import websocket

from workflows import IMAGE_FILE

REPO = Path(__file__).resolve().parents[2]
# The fixtures' folder: ../shared/comfyui beside the checkout, or $ISOHOST_COMFYUI_FIXTURES (the
# GPU machine gets a copy of them in the working tree).
SHARED = Path(os.environ.get("ISOHOST_COMFYUI_FIXTURES", REPO.parent / "shared" / "comfyui"))
ADAPTER = REPO / "comfyui" / "isohost_comfyui"
START_TIMEOUT = 120
PROMPT_TIMEOUT = 300


def unpack(destination):
    """ComfyUI and the post-processing pack under `destination`: (ComfyUI root, pack dir)."""
    for archive in (SHARED / "ComfyUI-0.3.64.tar.gz",
                    SHARED / "packs" / "ComfyUI-post-processing-nodes.tar.gz"):
        with tarfile.open(archive) as tar:
            tar.extractall(destination)
    return destination / "ComfyUI", destination / "ComfyUI-post-processing-nodes"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComfyServer:
    """One ComfyUI process. `custom_nodes`: directories linked into its custom_nodes. Saved
    images carry no metadata (the prompt), so that the same pixels are the same bytes."""

    def __init__(self, root, base, python, custom_nodes=(), env=None, args=(), cpu=True):
        self.root, self.base = Path(root), Path(base)
        for name in ("custom_nodes", "input", "output", "temp", "user", "models"):
            (self.base / name).mkdir(parents=True, exist_ok=True)
        for node_dir in custom_nodes:
            link = self.base / "custom_nodes" / Path(node_dir).name
            if not link.exists():
                link.symlink_to(node_dir)
        self.port = free_port()
        self.client_id = uuid.uuid4().hex
        self.log = []
        self.messages = []  # (monotonic time, message dict) from the websocket
        self._changed = threading.Condition()
        self._ready = False
        environment = dict(os.environ, PYTHONUNBUFFERED="1")
        environment.pop("PYTHONPATH", None)  # only what `env` gives
        environment.update(env or {})
        self.process = subprocess.Popen(
            [python, "main.py"] + (["--cpu"] if cpu else []) + [
             "--listen", "127.0.0.1", "--port", str(self.port),
             "--base-directory", str(self.base), "--disable-auto-launch", "--disable-metadata",
             "--front-end-root", str(self.base / "user")] + list(args),
            cwd=self.root, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
        threading.Thread(target=self._read_log, daemon=True).start()
        self._wait_for(lambda: self._ready or self.process.poll() is not None, START_TIMEOUT,
                       "ComfyUI to say it serves")
        if not self._ready:
            raise RuntimeError("ComfyUI exited %s before serving:\n%s"
                               % (self.process.returncode, self.log_tail()))
        self.ws = websocket.create_connection("ws://127.0.0.1:%d/ws?clientId=%s"
                                              % (self.port, self.client_id), timeout=None)
        threading.Thread(target=self._read_ws, daemon=True).start()

    def _read_log(self):
        for line in self.process.stdout:
            with self._changed:
                self.log.append(line.rstrip("\n"))
                if "To see the GUI go to" in line:
                    self._ready = True
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_ws(self):
        try:
            while True:
                data = self.ws.recv()
                if isinstance(data, str) and data:
                    with self._changed:
                        self.messages.append((time.monotonic(), json.loads(data)))
                        self._changed.notify_all()
        except (websocket.WebSocketException, OSError):
            pass

    def _wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("waited %d s for %s; log:\n%s"
                                       % (timeout, what, self.log_tail()))
                self._changed.wait(left)

    def wait_for_log(self, *texts, timeout=PROMPT_TIMEOUT):
        """Block until one line of the server's output holds every one of `texts`."""
        self._wait_for(lambda: any(all(t in line for t in texts) for line in self.log), timeout,
                       "a log line with %s" % " and ".join(map(repr, texts)))

    def log_tail(self, lines=60):
        return "\n".join(self.log[-lines:])

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def object_info(self):
        return self.request("GET", "/object_info")

    def queue(self, workflow, extra_data=None):
        body = {"prompt": workflow, "client_id": self.client_id}
        if extra_data is not None:
            body["extra_data"] = extra_data
        return self.request("POST", "/prompt", body)["prompt_id"]

    def events(self, prompt_id, kinds=None):
        """The websocket messages about `prompt_id` so far: [(time, message)]."""
        with self._changed:
            return [(t, m) for t, m in self.messages
                    if isinstance(m.get("data"), dict) and m["data"].get("prompt_id") == prompt_id
                    and (kinds is None or m["type"] in kinds)]

    def wait_for_event(self, prompt_id, kinds, timeout=PROMPT_TIMEOUT):
        """The first message of one of `kinds` about `prompt_id`, waiting for it."""
        found = []

        def seen():
            found[:] = self.events(prompt_id, kinds)[:1]
            return bool(found)

        self._wait_for(seen, timeout, "%s of prompt %s" % ("/".join(kinds), prompt_id))
        return found[0]

    def run(self, workflow, timeout=PROMPT_TIMEOUT, extra_data=None):
        """Queues `workflow`, waits for its end; (end message type, message, history entry)."""
        prompt_id = self.queue(workflow, extra_data)
        return self.finish(prompt_id, timeout)

    def finish(self, prompt_id, timeout=PROMPT_TIMEOUT):
        """Waits for the end of `prompt_id`, then for the queue's status message that ComfyUI
        sends once the prompt's history is stored."""
        ended_at, message = self.wait_for_event(
            prompt_id, ("execution_success", "execution_error", "execution_interrupted"), timeout)
        self._wait_for(lambda: any(t >= ended_at and m.get("type") == "status"
                                   for t, m in self.messages), timeout, "the queue's status")
        history = self.request("GET", "/history/%s" % prompt_id).get(prompt_id)
        return message["type"], message, history

    def fresh_image(self):
        """A new name for the test image in this server's input directory (the same bytes), so
        that a workflow loading it misses ComfyUI's cache."""
        name = "isohost-%s.png" % uuid.uuid4().hex[:12]
        (self.base / "input" / name).write_bytes((self.base / "input" / IMAGE_FILE).read_bytes())
        return name

    def interrupt(self):
        sent = time.monotonic()
        self.request("POST", "/interrupt", {})
        return sent

    def output_files(self, history):
        """{node id: [bytes of each image it saved]} from a history entry."""
        out = {}
        for node_id, output in (history or {}).get("outputs", {}).items():
            for image in output.get("images", []):
                folder = self.base / image.get("type", "output") / image.get("subfolder", "")
                out.setdefault(node_id, []).append((folder / image["filename"]).read_bytes())
        return out

    def descendants(self):
        """Pids of every process under ComfyUI's (its workers and theirs)."""
        found, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            try:
                for task in os.listdir("/proc/%d/task" % pid):
                    with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                        children = [int(c) for c in f.read().split()]
                    found += children
                    todo += children
            except (FileNotFoundError, ProcessLookupError):
                pass
        return found

    def stop(self):
        """Stops ComfyUI and checks that every process it started ended with it."""
        children = [(pid, _pidfd(pid)) for pid in self.descendants()]
        try:
            self.ws.close()
        except Exception:
            pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Nothing of this server's process group may be left (workers included).
        try:
            os.killpg(self.process.pid, 0)
            left = True
        except ProcessLookupError:
            left = False
        if left:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise AssertionError("ComfyUI's process group outlived it")
        # Its workers end with it (their death signal): wait for each to exit, boundedly.
        import select

        survivors = []
        for pid, fd in children:
            if fd is None:
                continue
            try:
                if not select.select([fd], [], [], 10)[0]:
                    survivors.append(pid)
            finally:
                os.close(fd)
        if survivors:
            raise AssertionError("processes outlived ComfyUI: %s" % survivors)


def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def write_test_image(path, width=256, height=192, seed=7):
    """A deterministic, non-uniform PNG: gradients and seeded noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1),
                      (x + y) % 256], axis=-1).astype(np.int32)
    image = np.clip(image + rng.integers(-40, 40, image.shape), 0, 255).astype(np.uint8)
    Image.fromarray(image, "RGB").save(path)
