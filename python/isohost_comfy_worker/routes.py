"""An isolated pack's HTTP routes, served by the host's ComfyUI (docs/comfyui.md, "Routes").

A pack adds routes at import through `PromptServer.instance.routes`, aiohttp's RouteTableDef in
process. In a worker that table is a RouteTable: it records each handler with the pack being
imported, the scan lists them (scan.py), and the host's ComfyUI registers a proxy for each
under the same method and path. The proxy sends the request to the worker's route channel
(route_channel.py), which runs the pack's handler here (`answer`) on an aiohttp request rebuilt
from the host's and sends back its response. A static directory is served by the host itself: it
is on the same machine.
"""

import asyncio
import inspect
import logging
import os

from isohost_comfy_worker import packs

# What packs registered, in order: (pack directory or None, method, path, handler, kwargs).
# "*" is any method (a class-based view); "STATIC" a directory, whose handler is its path.
_table = []
# The on-prompt handlers packs added: (pack directory or None, handler).
_on_prompt = []
# Headers aiohttp sets itself from the body it sends.
_FRAMING = ("content-length", "transfer-encoding")
# Those, and what the host's server sets for a streamed response it sends.
_STREAM_SETS = _FRAMING + ("content-encoding", "date", "server", "connection")
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


class RouteTable:
    """`PromptServer.instance.routes` in a worker: aiohttp's RouteTableDef decorators, recorded
    for the host (a route added outside a pack's import belongs to no pack and is not served)."""

    def route(self, method, path, **kwargs):
        def decorator(handler):
            _record(method.upper(), path, handler, kwargs)
            return handler
        return decorator

    def get(self, path, **kwargs):
        return self.route("GET", path, **kwargs)

    def post(self, path, **kwargs):
        return self.route("POST", path, **kwargs)

    def put(self, path, **kwargs):
        return self.route("PUT", path, **kwargs)

    def patch(self, path, **kwargs):
        return self.route("PATCH", path, **kwargs)

    def delete(self, path, **kwargs):
        return self.route("DELETE", path, **kwargs)

    def head(self, path, **kwargs):
        return self.route("HEAD", path, **kwargs)

    def view(self, path, **kwargs):
        return self.route("*", path, **kwargs)

    def static(self, prefix, path, **kwargs):
        _record("STATIC", prefix, os.path.abspath(str(path)), kwargs)


def record_on_prompt(handler):
    """`PromptServer.instance.add_on_prompt_handler` in a worker: kept with the pack being
    imported; the host's ComfyUI calls it through the route channel for each prompt."""
    pack = packs.importing()
    if pack is None:
        logging.warning("isohost: an on-prompt handler was added outside an isolated pack's "
                        "import: the host's ComfyUI does not call it")
    _on_prompt.append((pack, handler))


def on_prompt_handlers(pack_dir):
    """The on-prompt handlers the pack at `pack_dir` added, in order."""
    pack_dir = os.path.abspath(pack_dir)
    return [handler for pack, handler in _on_prompt if pack == pack_dir]


def _record(method, path, handler, kwargs):
    pack = packs.importing()
    if pack is None:
        logging.warning("isohost: %s %s was added outside an isolated pack's import: the host's "
                        "ComfyUI does not serve it", method, path)
    _table.append((pack, method, path, handler, kwargs))


class App:
    """`PromptServer.instance.app` in a worker, as far as packs add routes through it: its
    router's add_route, add_get, ..., add_view, add_static, and add_routes (aiohttp's RouteDef
    and StaticDef, or a RouteTableDef) go into the worker's route table too."""

    def __init__(self, table):
        self.router = _Router(table)

    def add_routes(self, definitions):
        for definition in definitions:
            if hasattr(definition, "prefix"):  # aiohttp's StaticDef
                self.router.add_static(definition.prefix, definition.path, **definition.kwargs)
            else:
                self.router.add_route(definition.method, definition.path, definition.handler)


class _Router:
    def __init__(self, table):
        self._table = table

    def add_route(self, method, path, handler, **kwargs):
        self._table.route(method, path)(handler)

    def add_static(self, prefix, path, **kwargs):
        self._table.static(prefix, path, **kwargs)

    def __getattr__(self, name):  # add_get, add_post, ..., add_view
        method = "*" if name == "add_view" else name[4:].upper()
        if not name.startswith("add_") or method not in _METHODS + ("*",):
            raise AttributeError(name)
        return lambda path, handler, **kwargs: self.add_route(method, path, handler)


def listed(pack_dir):
    """The routes the pack at `pack_dir` added, as the scan describes them: {"method", "path"},
    or {"method": "STATIC", "path": prefix, "directory", "options"} (its JSON options)."""
    out = []
    pack_dir = os.path.abspath(pack_dir)
    for pack, method, path, handler, kwargs in _table:
        if pack != pack_dir:
            continue
        if method == "STATIC":
            options = {k: v for k, v in kwargs.items() if isinstance(v, (bool, int, str))}
            out.append({"method": method, "path": path, "directory": handler,
                        "options": options})
        else:
            out.append({"method": method, "path": path})
    return out


def find_handler(pack_dir, method, path):
    """The handler of the route `method` `path` the pack at `pack_dir` added in this worker."""
    # HEAD finds a GET route's handler, as aiohttp's add_get (allow_head) has it in process.
    pack_dir = os.path.abspath(pack_dir)
    for pack, route_method, route_path, found, _ in _table:
        if pack == pack_dir and route_path == path and (
                route_method in (method, "*") or (method, route_method) == ("HEAD", "GET")):
            return found
    raise LookupError("the pack %s has no route %s %s in this worker" % (pack_dir, method, path))


class _Transport:
    """The connection a rebuilt request reports: the host's client's address."""

    def __init__(self, peername):
        self._extra = {"peername": peername, "sockname": ("127.0.0.1", 0)}

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def is_closing(self):
        return False


class _Writer:
    """Where a response that the handler streams itself (StreamResponse.prepare(), write(),
    write_eof()) goes: to the host through `stream` (route_channel.py's), frame by frame, as it
    is written. A response the handler returns is not written here: the host writes it."""

    def __init__(self, transport):
        self.transport = transport
        self.stream = None
        self.length = None
        self.output_size = 0
        self.buffer_size = 0

    async def write_headers(self, status_line, headers):
        _, status, reason = (status_line.split(" ", 2) + [""])[:3]
        if status == "101":
            raise TypeError("a websocket (web.WebSocketResponse) cannot be served from an "
                            "isolated pack's worker: the connection is ComfyUI's")
        if self.stream is None:
            raise TypeError("a streamed response needs the route channel to send it")
        await self.stream.start(int(status), reason, [
            (k, v) for k, v in headers.items() if k.lower() not in _STREAM_SETS])

    def send_headers(self, *args, **kwargs):
        pass

    def enable_chunking(self):
        pass  # the host frames what it sends

    def enable_compression(self, *args, **kwargs):
        pass  # the host sends the bytes as they are; their Content-Encoding is left out

    async def write(self, chunk, *args, **kwargs):
        if chunk:
            self.output_size += len(chunk)
            await self.stream.write(bytes(chunk))

    async def write_eof(self, chunk=b""):
        await self.write(chunk)
        await self.stream.end()

    async def drain(self):
        pass


class _Protocol:
    """The connection a rebuilt request has, as aiohttp's request and StreamReader read it (the
    body is all here already). make_mocked_request makes one of unittest.mock objects by default,
    which took 0.9 ms of each request."""

    _reading_paused = False
    max_field_size = max_line_length = 8190
    max_headers = 128
    ssl_context = None

    def __init__(self, remote):
        self.peername = (remote, 0) if remote else None
        self.sockname = ("127.0.0.1", 0)
        self.transport = _Transport(self.peername)
        self.writer = _Writer(self.transport)

    def pause_reading(self, *args, **kwargs):
        pass

    def resume_reading(self, *args, **kwargs):
        pass


_application = None


def _app(web):
    # One Application stands for ComfyUI's (request.app) for the worker's life.
    global _application
    if _application is None:
        _application = web.Application()
    return _application


async def answer(handler, message, stream=None):
    """What `handler` answers to `message` (the host's request: "method", "path" with its
    query, "match_info", "headers" as pairs, "body", "remote"), as _plain() describes it; None
    where the handler streamed its response itself, through `stream` (route_channel.py)."""
    from aiohttp import streams, test_utils, web
    from multidict import CIMultiDict

    body = message["body"]
    protocol = _Protocol(message.get("remote"))
    payload = streams.StreamReader(protocol, 2 ** 16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    request = test_utils.make_mocked_request(
        message["method"], message["path"], headers=CIMultiDict(message["headers"]),
        match_info=message["match_info"], payload=payload, client_max_size=len(body) + 1,
        app=_app(web), writer=protocol.writer, protocol=protocol, transport=protocol.transport)
    protocol.writer.stream = stream
    try:
        response = handler(request)
        if inspect.isawaitable(response):  # a coroutine, or a class-based view; aiohttp 3
            response = await response      # still takes a plain function too
    except web.HTTPException as e:  # raised as aiohttp's way of answering 404, 400, ...
        response = e
    if response is not None and getattr(response, "prepared", False):
        await response.write_eof()  # as aiohttp's server does after a handler that streamed
        return None
    return _plain(response, web)


def _plain(response, web):
    """The response as the host rebuilds it: {"status", "reason", "headers", "body"}, or "file"
    in place of "body" for a web.FileResponse."""
    headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _FRAMING]
    headers += [("Set-Cookie", morsel.OutputString()) for morsel in response.cookies.values()]
    answer = {"status": response.status, "reason": response.reason, "headers": headers}
    if isinstance(response, web.FileResponse):
        # No public attribute names the file; the host serves it (its type guessed there).
        answer["file"] = os.path.abspath(str(response._path))
        return answer
    if not isinstance(response, web.Response):
        raise TypeError("the route's handler returned %s; an isolated pack's route can answer "
                        "with a web.Response, a web.FileResponse, a web.StreamResponse it has "
                        "prepared and written, or a raised web.HTTPException"
                        % type(response).__name__)
    body = response.body
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = getattr(body, "_value", None)  # a payload of bytes (aiohttp's BytesPayload)
        if not isinstance(body, (bytes, bytearray)):
            raise TypeError("the route's handler answered with a streamed body (%s); an "
                            "isolated pack's route can answer with bytes, text or JSON"
                            % type(response.body).__name__)
    answer["body"] = bytes(body or b"")
    return answer
