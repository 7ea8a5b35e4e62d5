"""An isolated pack's HTTP routes in the host's ComfyUI (docs/comfyui.md, "Routes").

The scan lists the routes a pack adds at import (isohost_comfy_worker/routes.py). Each gets a
proxy here, under its method and path in ComfyUI's route table (so ComfyUI also serves it under
/api, as a pack's route in process): the proxy reads the request, has the pack's worker run its
handler (Call.result_async: ComfyUI's event loop is not held meanwhile) and answers with what it
answered. A static directory is served here directly, as in process."""

import asyncio
import logging

from aiohttp import web

import isohost
import server

_WORKER = "isohost_comfy_worker.routes:serve"
_log = logging.getLogger("isohost")


class PackRoutes:
    """The proxies of every isolated pack's routes. A request that has no answer within
    `timeout` seconds (its wait behind a node running in the worker included) is interrupted,
    its worker killed if it has not stopped `grace` seconds later, and answered 504: a handler
    that hangs must not hold its environment's worker, and so its nodes, for good."""

    def __init__(self, host, timeout, grace):
        self.host = host
        self.timeout = timeout
        self.grace = grace

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
            message = {"method": request.method, "route": route_path, "path": request.path_qs,
                       "match_info": dict(request.match_info),
                       "headers": list(request.headers.items()), "body": await request.read()}
            where = "%s %s of %s" % (request.method, request.path, pack_dir)
            try:
                call = self.host.start(env, _WORKER, pack_dir, message, worker_settings)
                answer = await asyncio.wait_for(call.result_async(), self.timeout)
            except asyncio.TimeoutError:
                call.interrupt(self.grace)
                _log.error("isohost: %s had no answer within %g s; interrupted", where,
                           self.timeout)
                return web.Response(status=504, text="isohost: environment '%s' did not answer "
                                    "this route within %g s (route_timeout_seconds)"
                                    % (env, self.timeout))
            except isohost.WorkerException as e:
                text = "%s: %s" % (e.type_name, e.detail.get("message", ""))
                _log.error("isohost: %s failed in its worker: %s\n%s", where, text,
                           e.traceback_text or "")
                return web.Response(status=500, text=text)
            except isohost.Error as e:
                _log.error("isohost: %s: environment '%s' could not serve it: %s", where, env, e)
                return web.Response(status=503, text="isohost: environment '%s' could not serve "
                                    "this route: %s" % (env, e))
            return _response(answer)
        handler.__name__ = "isohost_route"
        return handler


def _key(route):
    if isinstance(route, web.RouteDef):
        return (route.method.upper(), route.path)
    return ("STATIC", getattr(route, "prefix", None))


def _response(answer):
    headers = [(k, v) for k, v in answer["headers"]]
    if "file" in answer:
        return web.FileResponse(answer["file"], status=answer["status"], reason=answer["reason"],
                                headers=headers)
    return web.Response(status=answer["status"], reason=answer["reason"], headers=headers,
                        body=answer["body"])
