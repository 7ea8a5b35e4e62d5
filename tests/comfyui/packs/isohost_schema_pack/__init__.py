"""A pack written with ComfyUI's class-based node schema (comfy_api.latest: io.ComfyNode, a
ComfyExtension from comfy_entrypoint) instead of NODE_CLASS_MAPPINGS, as ComfyUI's own
comfy_extras are since 0.3.4x, and which adds HTTP routes to ComfyUI's server, as many packs do
(in a worker under ComfyUI's interpreter: aiohttp is there). Written for these tests."""

import asyncio
import os

from aiohttp import web
from comfy_api.latest import ComfyExtension, io, ui
from server import PromptServer

HERE = os.path.dirname(os.path.abspath(__file__))
routes = PromptServer.instance.routes


@routes.get("/isohost_test/echo/{name}")
async def echo(request):
    return web.json_response({"name": request.match_info["name"], "query": dict(request.query),
                              "header": request.headers.get("X-Isohost-Test"),
                              "path": request.path, "remote": request.remote,
                              "pid": os.getpid()})


@routes.post("/isohost_test/sum")
async def add(request):
    numbers = (await request.json())["numbers"]
    response = web.Response(text=str(sum(numbers)), headers={"X-Isohost-Sum": str(len(numbers))})
    response.set_cookie("isohost_test", "summed")
    return response


@routes.post("/isohost_test/interrupt")
async def interrupt(request):
    """Interrupts ComfyUI's running prompt, as a pack's cancel button does."""
    import nodes

    nodes.interrupt_processing()
    return web.json_response({"interrupted": True})


@routes.get("/isohost_test/missing")
async def missing(request):
    raise web.HTTPNotFound(text="nothing here")


@routes.get("/isohost_test/fails")
async def fails(request):
    raise RuntimeError("this route fails on purpose")


_stream_release = None


@routes.get("/isohost_test/stream")
async def stream(request):
    """Streams "first", then, once /isohost_test/stream_release is asked, "second" (or fails
    there with ?fail)."""
    global _stream_release
    _stream_release = asyncio.Event()
    response = web.StreamResponse(headers={"X-Isohost-Stream": "yes"})
    response.content_type = "text/plain"
    response.set_cookie("isohost_stream", "on")
    await response.prepare(request)
    await response.write(b"first\n")
    await _stream_release.wait()
    if "fail" in request.query:
        raise RuntimeError("this stream fails on purpose")
    await response.write(b"second\n")
    await response.write_eof()
    return response


@routes.post("/isohost_test/stream_release")
async def stream_release(request):
    _stream_release.set()
    return web.Response(text="released")


@routes.get("/isohost_test/queue")
async def queue_length(request):
    return web.json_response({"remaining": PromptServer.instance.prompt_queue.get_tasks_remaining()})


@routes.get("/isohost_test/source")
async def source(request):
    return web.FileResponse(os.path.join(HERE, "__init__.py"))


@routes.get("/isohost_test/slow")
async def slow(request):
    await asyncio.sleep(30)  # only ever asked of an isolated pack
    return web.Response(text="late")


def _hold(socket):
    """Connects to the abstract unix socket `socket` the test listens on, sends this process's
    pid, and blocks until the test closes that connection (at most 60 s)."""
    import socket as sockets

    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as connection:
        connection.settimeout(60)
        connection.connect("\0" + socket)
        connection.sendall(str(os.getpid()).encode())
        connection.shutdown(sockets.SHUT_WR)
        connection.recv(1)  # b"" once the test lets go
    return os.getpid()


@routes.get("/isohost_test/stuck")
async def stuck(request):
    _hold(request.query["socket"])  # blocks its server loop; asked of a worker only
    return web.Response(text="late")


# As packs start background work at import on the server's loop, which runs once ComfyUI has
# imported its packs and starts its server.
_background = {}


async def _note_the_loop():
    _background["loop"] = asyncio.get_running_loop()


PromptServer.instance.loop.create_task(_note_the_loop())


def _read_line(path):
    with open(path) as f:
        return f.readline()


@routes.post("/isohost_test/later")
async def later(request):
    """Answers at once; a task it leaves on the server loop sends a message once a line comes
    through the named pipe the request names (the test writes it after the answer)."""
    fifo = (await request.json())["fifo"]

    async def send_when_told():
        await asyncio.get_running_loop().run_in_executor(None, _read_line, fifo)
        await PromptServer.instance.send_json("isohost_test.later", {"pid": os.getpid()})

    PromptServer.instance.loop.create_task(send_when_told())
    return web.Response(text="later")


@routes.get("/isohost_test/loop")
async def server_loop(request):
    await PromptServer.instance.send_json("isohost_test.loop", {"pid": os.getpid()})
    running = asyncio.get_running_loop()
    return web.json_response({"on_server_loop": running is PromptServer.instance.loop,
                              "background_ran": _background.get("loop") is running})


@routes.post("/isohost_test/crash")
async def crash(request):
    import signal

    os.kill(os.getpid(), signal.SIGKILL)  # only ever asked of an isolated pack's worker


routes.static("/isohost_test/static", HERE)


def _rewrite_tags(json_data):
    """An on-prompt handler, as packs add them to rewrite a prompt before ComfyUI checks it:
    every input "tag" that says "isohost-on-prompt" says which process rewrote it."""
    for node in json_data.get("prompt", {}).values():
        inputs = node.get("inputs", {})
        if inputs.get("tag") == "isohost-on-prompt":
            inputs["tag"] = "rewritten by %d" % os.getpid()
    return json_data


def _fail_on_marker(json_data):
    """One that fails for a prompt holding the tag "isohost-on-prompt-fails"."""
    for node in json_data.get("prompt", {}).values():
        if node.get("inputs", {}).get("tag") == "isohost-on-prompt-fails":
            raise RuntimeError("this on-prompt handler fails on purpose")
    return json_data


PromptServer.instance.add_on_prompt_handler(_rewrite_tags)
PromptServer.instance.add_on_prompt_handler(_fail_on_marker)


class ScaleImage(io.ComfyNode):
    """IMAGE and FLOAT in, IMAGE and STRING out; its UI output says which process ran it and
    which node id it was given as a hidden input."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ScaleImageIsohostSchema",
            display_name="Scale image (isohost schema test)",
            category="isohost_test",
            description="Multiplies an image by a factor.",
            inputs=[io.Image.Input("image"),
                    io.Float.Input("factor", default=0.5, min=0.0, max=4.0, step=0.1)],
            outputs=[io.Image.Output(display_name="scaled"), io.String.Output(display_name="pid")],
            hidden=[io.Hidden.unique_id],
            is_output_node=True,
        )

    @classmethod
    def validate_inputs(cls, factor):
        return True if factor != 3.0 else "a factor of 3 is reserved for this test"

    @classmethod
    def fingerprint_inputs(cls, image, factor):
        return float("nan")  # never the same: runs in every prompt

    @classmethod
    def execute(cls, image, factor) -> io.NodeOutput:
        pid = str(os.getpid())
        text = "pid %s, node %s" % (pid, cls.hidden.unique_id)
        return io.NodeOutput((image * factor).clamp(0.0, 1.0), pid, ui=ui.PreviewText(text))


class Hold(io.ComfyNode):
    """Holds its thread until the test lets go (_hold)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="HoldIsohostSchema",
            display_name="Hold (isohost schema test)",
            category="isohost_test",
            inputs=[io.String.Input("socket")],
            outputs=[io.String.Output(display_name="pid")],
            is_output_node=True,
        )

    @classmethod
    def fingerprint_inputs(cls, socket):
        return float("nan")

    @classmethod
    def execute(cls, socket) -> io.NodeOutput:
        return io.NodeOutput(str(_hold(socket)))


class Steps(io.ComfyNode):
    """Reports `steps` steps through comfy_api's set_progress, which names the executing node
    itself; its UI says the executing node's id it read."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="StepsIsohostSchema",
            display_name="Steps (isohost schema test)",
            category="isohost_test",
            inputs=[io.Int.Input("steps", default=3, min=1, max=100)],
            outputs=[],
            is_output_node=True,
        )

    @classmethod
    def fingerprint_inputs(cls, steps):
        return float("nan")

    @classmethod
    async def execute(cls, steps) -> io.NodeOutput:
        from comfy_api.latest import ComfyAPI
        from comfy_execution.utils import get_executing_context

        execution = ComfyAPI.Execution()
        for step in range(1, steps + 1):
            await execution.set_progress(step, steps)
        return io.NodeOutput(ui=ui.PreviewText("node %s" % get_executing_context().node_id))


class PassAny(io.ComfyNode):
    """A wildcard input and output (io.AnyType, "*")."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="PassAnyIsohostSchema",
            display_name="Pass anything (isohost schema test)",
            category="isohost_test",
            inputs=[io.AnyType.Input("value")],
            outputs=[io.AnyType.Output(display_name="value")],
        )

    @classmethod
    def execute(cls, value) -> io.NodeOutput:
        return io.NodeOutput(value)


class SchemaExtension(ComfyExtension):
    async def get_node_list(self):
        return [ScaleImage, Hold, Steps, PassAny]


async def comfy_entrypoint():
    return SchemaExtension()
