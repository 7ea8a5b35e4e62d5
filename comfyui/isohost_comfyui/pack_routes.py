"""An isolated pack's HTTP routes in the host's ComfyUI (docs/comfyui.md, "Routes").

The scan lists the routes a pack adds at import (isohost_comfy_worker/routes.py). Each gets a
proxy here, under its method and path in ComfyUI's route table (so ComfyUI also serves it under
/api, as a pack's route in process): the proxy reads the request and sends it to the route
channel of the pack's worker (isohost_comfy_worker/route_channel.py), which answers it on its
server loop while its nodes run, as ComfyUI answers a pack's routes in process; ComfyUI's event
loop is not held meanwhile. The first request for a pack opens the channel with a call. A static
directory is served here directly, as in process. A pack's on-prompt handlers are called through
the same channel, from one proxy ComfyUI calls for each prompt."""

import asyncio
import json
import logging
import socket
import struct
import time

from aiohttp import web

import isohost

from .prompt_server import running as running_server

_OPEN = "isohost_comfy_worker.route_channel:open_channel"
_LENGTH = struct.Struct(">I")
_log = logging.getLogger("isohost")


class _WorkerEnded(Exception):
    """The worker serving a request ended before it answered."""


class PackRoutes:
    """The proxies of every isolated pack's routes and on-prompt handlers. A request that has
    no answer within `timeout` seconds is answered 504 and its handler cancelled in the
    worker. A prompt whose on-prompt handlers (their channel opened first, if need be) have not
    answered within `on_prompt_timeout` seconds goes on without them, logged: ComfyUI calls them
    inside POST /prompt on its event loop, where nothing else is served meanwhile."""

    def __init__(self, host, worker_settings, timeout, on_prompt_timeout=10.0):
        self.host = host
        # {env: its worker's settings}, looked up as a route is first served (WorkerSettings).
        self.worker_settings = worker_settings
        self.timeout = timeout
        self.on_prompt_timeout = on_prompt_timeout
        self._channels = {}  # (env, pack directory): the address its worker listens on
        self._opening = {}  # (env, pack directory): the call opening it for on-prompt handlers

    def register(self, env, pack_dir, routes):
        """Adds the `routes` of the pack at `pack_dir` (its scan's "routes") to ComfyUI's table;
        one that ComfyUI or a pack loaded earlier already serves is left out (logged). Returns
        how many were added."""
        prompt_server = running_server()
        if prompt_server is None:
            if routes:
                _log.warning("isohost: the %d routes of %s are not served: no ComfyUI server "
                             "runs in this process", len(routes), pack_dir)
            return 0
        table = prompt_server.routes
        taken = {_key(r) for r in table}
        added = 0
        for route in routes:
            method, path = route["method"], route["path"]
            if (method, path) in taken or ("*", path) in taken or (method == "*" and any(
                    p == path for _, p in taken)):
                _log.warning("isohost: %s %s of %s is not served: that route is already taken",
                             method, path, pack_dir)
                continue
            taken.add((method, path))
            if method == "STATIC":
                table.static(path, route["directory"], **route.get("options", {}))
            else:
                table.route(method, path)(self._proxy(env, pack_dir, path))
            added += 1
        return added

    def _proxy(self, env, pack_dir, route_path):
        async def handler(request):
            message = {"pack": pack_dir, "method": request.method, "route": route_path,
                       "path": request.path_qs, "match_info": dict(request.match_info),
                       "headers": list(request.headers.items()), "remote": request.remote}
            body = await request.read()
            where = "%s %s of %s" % (request.method, request.path, pack_dir)
            try:
                answer, payload = await asyncio.wait_for(
                    self._forward(env, pack_dir, message, body), self.timeout)
            except asyncio.TimeoutError:
                _log.error("isohost: %s had no answer within %g s; cancelled", where,
                           self.timeout)
                return web.Response(status=504, text="isohost: environment '%s' did not answer "
                                    "this route within %g s (route_timeout_seconds)"
                                    % (env, self.timeout))
            except isohost.Error as e:
                _log.error("isohost: %s: environment '%s' could not serve it: %s", where, env, e)
                return web.Response(status=503, text="isohost: environment '%s' could not serve "
                                    "this route: %s" % (env, e))
            except _WorkerEnded as e:
                _log.error("isohost: %s: %s", where, e)
                return web.Response(status=503, text="isohost: %s" % e)
            if "error" in answer:
                error = answer["error"]
                text = "%s: %s" % (error.get("type"), error.get("message", ""))
                _log.error("isohost: %s failed in its worker: %s\n%s", where, text,
                           error.get("traceback") or "")
                return web.Response(status=500, text=text)
            if isinstance(payload, _Chunks):
                return await _stream(request, answer, payload, where)
            return _response(answer, payload)
        handler.__name__ = "isohost_route"
        return handler

    def register_on_prompt(self, env, pack_dir):
        """Has ComfyUI call the on-prompt handlers of the pack at `pack_dir`, in its worker,
        for each prompt, in the place among ComfyUI's handlers that the pack's import order
        gives it."""
        prompt_server = running_server()
        if prompt_server is None:
            _log.warning("isohost: the on-prompt handlers of %s are not called: no ComfyUI "
                         "server runs in this process", pack_dir)
            return
        prompt_server.add_on_prompt_handler(self._on_prompt_proxy(env, pack_dir))

    def _on_prompt_proxy(self, env, pack_dir):
        def on_prompt(json_data):
            try:
                answer, payload = self._on_prompt_exchange(
                    env, pack_dir, json.dumps(json_data).encode())
                if "error" in answer:
                    raise ValueError("%s: %s" % (answer["error"].get("type"),
                                                 answer["error"].get("message")))
                result = json.loads(payload)
            except (OSError, ValueError, TimeoutError, isohost.Error, _WorkerEnded) as e:
                _log.error("isohost: the prompt goes on without the on-prompt handlers of %s: "
                           "%s", pack_dir, e)
                return json_data
            for failure in answer.get("failures", []):
                _log.warning("isohost: an on-prompt handler of %s failed in its worker:\n%s",
                             pack_dir, failure)
            return result
        on_prompt.__name__ = "isohost_on_prompt"
        return on_prompt

    def _on_prompt_exchange(self, env, pack_dir, body):
        key = (env, pack_dir)
        message = {"kind": "on_prompt", "pack": pack_dir}
        deadline = time.monotonic() + self.on_prompt_timeout
        address = self._channels.get(key)
        if address is not None:
            try:
                return _exchange_blocking(address, message, body, env, self.on_prompt_timeout)
            except ConnectionRefusedError:
                pass  # that worker has ended: open the channel of the next
        self._channels.pop(key, None)
        # A slow start (a pack importing torch) outlasts one prompt's wait: the call runs on and
        # the next prompt waits for the same one.
        call = self._opening.get(key) or self.host.start(env, _OPEN, pack_dir,
                                                              self.worker_settings[env])
        self._opening[key] = call
        try:
            address = call.result(timeout=self.on_prompt_timeout)
        except TimeoutError:
            raise  # still opening
        except BaseException:
            del self._opening[key]  # failed: the next prompt tries again
            raise
        del self._opening[key]
        self._channels[key] = address
        return _exchange_blocking(address, message, body, env,
                                  max(deadline - time.monotonic(), 0.001))

    async def _forward(self, env, pack_dir, message, body):
        key = (env, pack_dir)
        address = self._channels.get(key)
        if address is not None:
            try:
                return await _exchange(address, message, body, env)
            except (ConnectionRefusedError, FileNotFoundError):
                pass  # that worker has ended: open the channel of the next
        self._channels.pop(key, None)
        # The settings are made at their first use (63 ms), here off the event loop.
        settings = await asyncio.to_thread(self.worker_settings.__getitem__, env)
        # Cancelled (the route timeout, ComfyUI's request gone), the call runs on: opening is
        # harmless, and the next request opens again at once.
        address = await self.host.start(env, _OPEN, pack_dir, settings).result_async()
        self._channels[key] = address
        return await _exchange(address, message, body, env)


async def _exchange(address, message, body, env):
    """(answer header, body) of one request on the channel at `address`, or (header, _Chunks)
    for a response the handler streams. Cancelling it closes the connection, which cancels the
    handler there."""
    reader, writer = await asyncio.open_unix_connection(address)
    chunks = None
    try:
        try:
            writer.write(_framed(message, body))
            writer.write(body)
            await writer.drain()
            (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            answer = json.loads(await reader.readexactly(size))
            if answer.get("stream"):
                chunks = _Chunks(reader, writer, env)
                return answer, chunks
            payload = await reader.readexactly(answer.get("body_length", 0))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise _ended(env, e) from None
        return answer, payload
    finally:
        if chunks is None:
            writer.close()


class _Chunks:
    """A streamed response's chunks as the worker sends them; close() hangs up, which cancels
    the handler there if it is still running."""

    def __init__(self, reader, writer, env):
        self._reader, self._writer, self._env = reader, writer, env

    async def next(self):
        """The next chunk, or None after the last."""
        try:
            (size,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
            return await self._reader.readexactly(size) if size else None
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise _WorkerEnded("the stream of environment '%s' ended before its last chunk "
                               "(its handler failed, or its worker ended: %s)"
                               % (self._env, e)) from None

    def close(self):
        self._writer.close()


async def _stream(request, answer, chunks, where):
    """Sends ComfyUI's client a response the pack's handler streams, chunk by chunk as it comes.
    The route timeout ends at its header (a stream may last as long as the handler wants);
    the client hanging up closes the channel, which cancels the handler in the worker. A worker
    that ends midway cuts the response short: the client sees it end early, not complete."""
    response = web.StreamResponse(status=answer["status"], reason=answer["reason"],
                                  headers=answer["headers"])
    try:
        await response.prepare(request)
        while True:
            data = await chunks.next()
            if data is None:
                break
            await response.write(data)
        await response.write_eof()
    except _WorkerEnded as e:
        _log.error("isohost: %s: %s; the response is cut short", where, e)
        raise
    finally:
        chunks.close()
    return response


def _exchange_blocking(address, message, body, env, timeout):
    """_exchange() for a caller on ComfyUI's loop that cannot await, within `timeout` seconds
    for each operation on the socket (socket.timeout, an OSError, past it)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(address)
        try:
            connection.sendall(_framed(message, body) + body)
            with connection.makefile("rb") as answers:
                (size,) = _LENGTH.unpack(_read_exactly(answers, _LENGTH.size))
                answer = json.loads(_read_exactly(answers, size))
                return answer, _read_exactly(answers, answer.get("body_length", 0))
        except (EOFError, ConnectionError) as e:
            raise _ended(env, e) from None


def _framed(message, body):
    header = json.dumps(dict(message, body_length=len(body))).encode()
    return _LENGTH.pack(len(header)) + header


def _read_exactly(stream, size):
    data = stream.read(size)
    if len(data) != size:
        raise EOFError("%d of %d bytes" % (len(data), size))
    return data


def _ended(env, cause):
    return _WorkerEnded("the worker of environment '%s' ended before it answered (%s); the next "
                        "request gets a fresh one" % (env, cause))


def _key(route):
    if isinstance(route, web.RouteDef):
        return (route.method.upper(), route.path)
    return ("STATIC", getattr(route, "prefix", None))


def _response(answer, payload):
    headers = [(k, v) for k, v in answer["headers"]]
    if "file" in answer:
        return web.FileResponse(answer["file"], status=answer["status"], reason=answer["reason"],
                                headers=headers)
    return web.Response(status=answer["status"], reason=answer["reason"], headers=headers,
                        body=payload)
