"""An isolated pack's HTTP requests answered beside its nodes (docs/comfyui.md, "Routes").

A worker runs its calls one at a time, so a route request sent as a call would wait behind the
node in flight, for as long as a sampler runs. In process, ComfyUI answers a pack's routes on its
server loop while nodes run on another thread; the channel does the same here. The host's first
request for a pack opens it with a call (`open_channel`: the pack imported, the worker listening
on a unix socket of the abstract namespace, on its server loop, server_loop.py), and every request
after goes there directly, one per connection, while the main thread runs nodes:

    request: 4-byte big-endian length, JSON {"pack", "method", "route", "path", "match_info",
             "headers", "body_length"}, then the body
    answer:  4-byte length, JSON {"status", "reason", "headers", "body_length"} (or "file" for
             a FileResponse, or {"error": {"type", "message", "traceback"}}), then the body;
             or, for a response the handler streams itself (StreamResponse.prepare(), write()),
             JSON {"status", "reason", "headers", "stream": true} when it is prepared, then each
             chunk as it is written (4-byte length, bytes), then a frame of length 0 at its end.
             A handler that fails midway ends the connection before that last frame.

The pack's on-prompt handlers are called the same way: a request {"kind": "on_prompt", "pack",
"body_length"} whose body is the prompt's JSON, answered {"failures": [traceback, ...],
"body_length"} and the JSON they made of it (a handler that raises is skipped, as ComfyUI skips
it).

The host closing its end before the answer (its route timeout) cancels the handler. An abstract
socket leaves no file behind, even after a kill -9; any process of this machine's network
namespace may connect to it, as it may to ComfyUI's own port, which serves the same routes.
Bytes that are not a request close the connection; the worker serves on.
"""

import asyncio
import json
import logging
import os
import secrets
import struct
import traceback

from isohost_worker import errors

from isohost_comfy_worker import comfy_env, packs, routes, server_loop

MAX_HEADER = 1 << 20
MAX_BODY = 1 << 30
_LENGTH = struct.Struct(">I")
_server = None
_address = None


def open_channel(pack_dir, settings):
    """A call from the host: imports the pack at `pack_dir` with ComfyUI's state from
    `settings`, listens once per worker, and returns the channel's address."""
    global _server, _address
    comfy_env.prepare(settings)
    packs.load(pack_dir)
    if _server is None:
        address = "\0isohost-routes-%d-%s" % (os.getpid(), secrets.token_hex(8))
        _server = server_loop.run(asyncio.start_unix_server(_serve_connection, path=address))
        _address = address
    return _address


async def _serve_connection(reader, writer):
    try:
        request, body = await _read_request(reader)
    except (asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
        logging.warning("isohost: the route channel dropped a connection: %s", e)
        writer.close()
        return
    stream = _Stream(writer)
    answering = asyncio.ensure_future(_answer(request, body, stream))
    hung_up = asyncio.ensure_future(reader.read(1))  # the host sends nothing more, or closes
    done, _ = await asyncio.wait({answering, hung_up}, return_when=asyncio.FIRST_COMPLETED)
    hung_up.cancel()
    if answering not in done or stream.started:
        # The host gave up (its route timeout, its client gone): stop the handler. Or the handler
        # streamed its response: all of it has been sent, or it failed midway (logged).
        answering.cancel()
        await asyncio.wait({answering})
        writer.close()
        return
    header, payload = answering.result()
    try:
        writer.write(_LENGTH.pack(len(header)) + header)
        writer.write(payload)
        await writer.drain()
    except ConnectionError:
        pass
    writer.close()


async def _read_request(reader):
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if size > MAX_HEADER:
        raise ValueError("a request header of %d bytes (at most %d)" % (size, MAX_HEADER))
    request = json.loads(await reader.readexactly(size))
    if not isinstance(request, dict):
        raise ValueError("a request header must be a JSON object")
    length = request.get("body_length")
    if type(length) is not int or not 0 <= length <= MAX_BODY:
        raise ValueError("a request body of %r bytes (at most %d)" % (length, MAX_BODY))
    keys = (("pack", str),) if request.get("kind") == "on_prompt" else (
        ("pack", str), ("method", str), ("route", str), ("path", str), ("match_info", dict),
        ("headers", list))
    for key, kind in keys:
        if not isinstance(request.get(key), kind):
            raise ValueError("a request needs %r as a %s" % (key, kind.__name__))
    return request, await reader.readexactly(length)


class _Stream:
    """A response the handler streams, on its way to the host: its header once it is prepared,
    then each chunk framed by its length, then an empty frame (routes._Writer writes here)."""

    def __init__(self, writer):
        self._writer = writer
        self.started = False

    async def start(self, status, reason, headers):
        self.started = True
        await self._send(json.dumps({"status": status, "reason": reason, "headers": headers,
                                     "stream": True}).encode())

    async def write(self, data):
        await self._send(data)

    async def end(self):
        await self._send(b"")

    async def _send(self, data):
        self._writer.write(_LENGTH.pack(len(data)))
        self._writer.write(data)
        await self._writer.drain()  # a slow client holds the handler here, as in process


async def _answer(request, body, stream):
    """(header, body) of the pack's answer, or of the error its handler raised; None where the
    handler streamed its response through `stream`."""
    if request.get("kind") == "on_prompt":
        return _on_prompt(request["pack"], body)
    try:
        handler = routes.find_handler(request["pack"], request["method"], request["route"])
        answer = await routes.answer(handler, dict(request, body=body), stream)
    except Exception as e:  # the handler's, or a route this worker does not have
        if stream.started:
            logging.error("isohost: %s %s failed after its response began; it ends there",
                          request["method"], request["path"], exc_info=True)
            return None
        error = {"type": errors.type_name(type(e)), "message": str(e),
                 "traceback": traceback.format_exc()}
        return json.dumps({"error": error}).encode(), b""
    if answer is None:
        return None
    payload = answer.pop("body", b"")
    answer["body_length"] = len(payload)
    return json.dumps(answer).encode(), payload


def _on_prompt(pack_dir, body):
    """The pack's on-prompt handlers run in turn on the prompt, on this loop as ComfyUI runs them
    on its own."""
    failures = []
    try:
        data = json.loads(body)
    except ValueError as e:
        return json.dumps({"error": {"type": "ValueError", "message": str(e),
                                     "traceback": ""}}).encode(), b""
    for handler in routes.on_prompt_handlers(pack_dir):
        try:
            data = handler(data)
        except Exception:
            failures.append(traceback.format_exc())
    try:
        payload = json.dumps(data).encode()
    except (TypeError, ValueError) as e:
        return json.dumps({"error": {"type": type(e).__name__, "message": str(e),
                                     "traceback": ""}}).encode(), b""
    return json.dumps({"failures": failures, "body_length": len(payload)}).encode(), payload
