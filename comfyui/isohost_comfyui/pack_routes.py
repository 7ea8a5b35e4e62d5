"""An isolated pack's HTTP routes in the host's ComfyUI (docs/comfyui.md, "Routes").

The scan lists the routes a pack adds at import (isohost_comfy_worker/routes.py). Each gets a
proxy here, under its method and path in ComfyUI's route table (so ComfyUI also serves it under
/api, as a pack's route in process): the proxy reads the request, has the pack's worker run its
handler (Host.call_async: ComfyUI's event loop is not held meanwhile) and answers with what it
answered. A static directory is served here directly, as in process."""

import logging

from aiohttp import web

import isohost
import server

_WORKER = "isohost_comfy_worker.routes:serve"
_log = logging.getLogger("isohost")


def register(host, settings, env, pack_dir, routes):
    """Adds the `routes` of the pack at `pack_dir` (its scan's "routes") to ComfyUI's table;
    one that ComfyUI or a pack loaded earlier already serves is left out (logged). Returns how
    many were added."""
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
            table.route(method, path)(_proxy(host, settings, env, pack_dir, route))
        added += 1
    return added


def _key(route):
    if isinstance(route, web.RouteDef):
        return (route.method.upper(), route.path)
    return ("STATIC", getattr(route, "prefix", None))


def _proxy(host, settings, env, pack_dir, route):
    async def handler(request):
        message = {"method": request.method, "route": route["path"], "path": request.path_qs,
                   "match_info": dict(request.match_info),
                   "headers": list(request.headers.items()), "body": await request.read()}
        try:
            answer = await host.call_async(env, _WORKER, pack_dir, message, settings)
        except isohost.WorkerException as e:
            _log.error("isohost: %s %s of %s failed in its worker: %s: %s\n%s", request.method,
                       request.path, pack_dir, e.type_name, e.detail.get("message", ""),
                       e.traceback_text or "")
            return web.Response(status=500, text="%s: %s" % (e.type_name,
                                                             e.detail.get("message", "")))
        except isohost.Error as e:
            _log.error("isohost: %s %s of %s: environment '%s' could not serve it: %s",
                       request.method, request.path, pack_dir, env, e)
            return web.Response(status=503, text="isohost: environment '%s' could not serve "
                                "this route: %s" % (env, e))
        return _response(answer)
    handler.__name__ = "isohost_route"
    return handler


def _response(answer):
    headers = [(k, v) for k, v in answer["headers"]]
    if "file" in answer:
        return web.FileResponse(answer["file"], status=answer["status"], reason=answer["reason"],
                                headers=headers)
    return web.Response(status=answer["status"], reason=answer["reason"], headers=headers,
                        body=answer["body"])
