"""GET /isohost/status on ComfyUI's own server: the isolated workers' states and memory, for the
adapter's side panel (web/isohost_panel.js; docs/comfyui.md, "The side panel").

The answer is `isohost.Host.ps()`, the object `isohost ps --json` prints (workers, zygotes,
devices, the host), with what the panel needs beside it:

    available     true when the pool answered; false with `reason` before the host exists (no
                  isohost.toml, a refused configuration) or once it has closed
    reason        why there is no view (only when `available` is false)
    machine       {"total", "available"}: MemTotal and MemAvailable in bytes, from /proc/meminfo
                  (kept as the pool gives it where ps carries it itself)
    environments  [{"name", "packs"}]: the configured environments, a worker running or not
    not_loaded    [{"environment", "pack", "reason"}]: the packs left out at start, and why (the
                  same words as ComfyUI's log; "pack" is null for an environment refused whole)
    sampled_at    seconds since the epoch when the pool was asked

Read-only: nothing here starts, wakes or ends a worker, and nothing is sent to one (ps reads
/proc and the GPU from outside). The pool's status is taken on a thread of its own, so ComfyUI's
event loop waits for no smaps_rollup walk; requests arriving while one is taken share it.
"""

import asyncio
import concurrent.futures
import logging
import time

ROUTE = "/isohost/status"
# A status not answered within this is reported as such, not waited for.
ANSWER_TIMEOUT_SECONDS = 10.0

_log = logging.getLogger("isohost")


def machine_memory(path="/proc/meminfo"):
    """{"total", "available"}: the machine's MemTotal and MemAvailable in bytes (None where the
    file lacks one)."""
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    fields[key] = int(rest.split()[0]) * 1024  # kB
    except OSError:
        pass
    return {"total": fields.get("MemTotal"), "available": fields.get("MemAvailable")}


class StatusSource:
    """What the route answers, from the adapter's host once it has one."""

    def __init__(self):
        self._host = None
        self._reason = "the isohost adapter has not started yet"
        self._environments = []
        self._not_loaded = []
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="isohost-status")
        self._pending = None  # the asyncio future of the status being taken

    def started(self, host, env_names, packs):
        """The adapter made `host` with the environments `env_names`; `packs` is [(environment,
        pack directory)]."""
        environments = {name: [] for name in env_names}
        for env, pack in packs:
            environments.setdefault(env, []).append(pack)
        self._environments = [{"name": n, "packs": p} for n, p in environments.items()]
        self._host = host

    def not_loaded(self, env, pack, reason):
        """A pack (None: every pack of `env`) was left out at start for `reason`."""
        self._not_loaded.append({"environment": env, "pack": pack, "reason": reason})

    def unavailable(self, reason):
        """The adapter has no host, and why (for the panel to say)."""
        self._host = None
        self._reason = reason

    def empty(self, reason):
        return {"available": False, "reason": reason, "workers": [], "zygotes": [],
                "devices": [], "machine": machine_memory(),
                "environments": self._environments, "not_loaded": self._not_loaded,
                "sampled_at": time.time()}

    def take(self):
        """The status now; blocks while the pool samples memory (run it off the event loop)."""
        host = self._host
        if host is None:
            return self.empty(self._reason)
        sampled_at = time.time()
        try:
            status = host.ps()
        except Exception as e:  # HostShuttingDown once ComfyUI exits; anything else, said
            return self.empty("the pool did not answer: %s: %s"
                              % (getattr(e, "kind", type(e).__name__), e))
        status["available"] = True
        status.setdefault("machine", machine_memory())
        status["environments"] = self._environments
        status["not_loaded"] = self._not_loaded
        status["sampled_at"] = sampled_at
        return status

    async def answer(self):
        """take(), on the status thread; concurrent requests share one."""
        if self._pending is None:
            pending = asyncio.get_running_loop().run_in_executor(self._executor, self.take)
            self._pending = pending

            def done(_):
                if self._pending is pending:
                    self._pending = None

            pending.add_done_callback(done)
        try:
            return await asyncio.wait_for(asyncio.shield(self._pending), ANSWER_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            return self.empty("the pool has not answered for %.0f s" % ANSWER_TIMEOUT_SECONDS)


SOURCE = StatusSource()


def serve(source=SOURCE):
    """Adds GET /isohost/status (and /api/isohost/status, as ComfyUI prefixes its routes) to
    ComfyUI's server. Call before ComfyUI adds its routes to the app (while custom nodes load)."""
    from aiohttp import web

    try:
        from server import PromptServer

        routes = PromptServer.instance.routes
    except (ImportError, AttributeError):
        _log.warning("isohost: no ComfyUI server to add %s to; the side panel shows nothing",
                     ROUTE)
        return

    @routes.get(ROUTE)
    async def isohost_status(request):
        return web.json_response(await source.answer(), headers={"Cache-Control": "no-store"})
