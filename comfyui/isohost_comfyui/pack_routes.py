"""An isolated pack's HTTP routes in the host's ComfyUI (docs/comfyui.md, "Routes").

The scan lists the routes a pack adds at import (isohost_comfy_worker/routes.py). Each gets a
proxy here, under its method and path in ComfyUI's route table (so ComfyUI also serves it under
/api, as a pack's route in process): the proxy reads the request and sends it to the route
channel of the pack's worker (isohost_comfy_worker/route_channel.py), which answers it on its
server loop while its nodes run, as ComfyUI answers a pack's routes in process; ComfyUI's event
loop is not held meanwhile. The first request for a pack opens the channel with a call. A static
directory is served here directly, as in process."""

import asyncio
import json
import logging
import struct

from aiohttp import web

import isohost
import server

_OPEN = "isohost_comfy_worker.route_channel:open_channel"
_LENGTH = struct.Struct(">I")
_log = logging.getLogger("isohost")


class _WorkerEnded(Exception):
    """The worker serving a request ended before it answered."""


class PackRoutes:
    """The proxies of every isolated pack's routes. A request that has no answer within
    `timeout` seconds is answered 504 and its handler cancelled in the worker (a channel still
    to open is interrupted as a node is, its worker killed if it has not stopped `grace`
    seconds later)."""

    def __init__(self, host, timeout, grace):
        self.host = host
        self.timeout = timeout
        self.grace = grace
        self._channels = {}  # (env, pack directory): the address its worker listens on

    def register(self, env, worker_settings, pack_dir, routes):
        """Adds the `routes` of the pack at `pack_dir` (its scan's "routes") to ComfyUI's table;
        one that ComfyUI or a pack loaded earlier already serves is left out (logged). Returns
        how many were added."""
        table = server.PromptServer.instance.routes
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
                table.route(method, path)(self._proxy(env, worker_settings, pack_dir, path))
            added += 1
        return added

    def _proxy(self, env, worker_settings, pack_dir, route_path):
        async def handler(request):
            message = {"pack": pack_dir, "method": request.method, "route": route_path,
                       "path": request.path_qs, "match_info": dict(request.match_info),
                       "headers": list(request.headers.items())}
            body = await request.read()
            where = "%s %s of %s" % (request.method, request.path, pack_dir)
            try:
                answer, payload = await asyncio.wait_for(
                    self._forward(env, worker_settings, pack_dir, message, body), self.timeout)
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
            return _response(answer, payload)
        handler.__name__ = "isohost_route"
        return handler

    async def _forward(self, env, worker_settings, pack_dir, message, body):
        key = (env, pack_dir)
        address = self._channels.get(key)
        if address is not None:
            try:
                return await _exchange(address, message, body, env)
            except (ConnectionRefusedError, FileNotFoundError):
                pass  # that worker has ended: open the channel of the next
        self._channels.pop(key, None)
        call = self.host.start(env, _OPEN, pack_dir, worker_settings)
        try:
            address = await call.result_async()
        except asyncio.CancelledError:  # the route timeout, or ComfyUI's request gone
            call.interrupt(self.grace)
            raise
        self._channels[key] = address
        return await _exchange(address, message, body, env)


async def _exchange(address, message, body, env):
    """(answer header, body) of one request on the channel at `address`. Cancelling it closes
    the connection, which cancels the handler there."""
    reader, writer = await asyncio.open_unix_connection(address)
    try:
        header = json.dumps(dict(message, body_length=len(body))).encode()
        try:
            writer.write(_LENGTH.pack(len(header)) + header)
            writer.write(body)
            await writer.drain()
            (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            answer = json.loads(await reader.readexactly(size))
            payload = await reader.readexactly(answer.get("body_length", 0))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise _WorkerEnded("the worker of environment '%s' ended before it answered this "
                               "route (%s); the next request gets a fresh one" % (env, e)) from None
        return answer, payload
    finally:
        writer.close()


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
