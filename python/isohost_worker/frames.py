"""Frames as docs/protocol.md lays them out: a 16-byte header, one UTF-8 JSON object, and
memfd buffers passed alongside as descriptors.

Both sides of the tests use this module, so it knows nothing about ops or lanes.
"""

import array
import collections
import itertools
import json
import os
import re
import socket
import struct
import time

MAGIC = b"ISOH"
VERSION = 2
HEADER = struct.Struct("<4sHHII")  # magic, version, flags, json_length, buffer_count
MAX_JSON = 64 * 1024 * 1024
MAX_BUFFERS = 64
# Descriptors received and not yet claimed by a frame: the frame being read's and the next's.
MAX_PENDING_FDS = 2 * MAX_BUFFERS
# Arrays and objects inside one another: the host refuses deeper bodies (docs/protocol.md,
# "Limits"), so the worker refuses to send one and its caller gets an error, not a dead worker.
MAX_DEPTH = 256

_FD = array.array("i")
# One recvmsg never returns descriptors from more than one sendmsg (the kernel ends the
# read there), and one frame carries at most MAX_BUFFERS of them.
_CONTROL_SPACE = socket.CMSG_SPACE(MAX_BUFFERS * _FD.itemsize)
# Descriptors we receive must not leak into programs the user's code starts. Plain ints: the
# socket module's flags are enums, whose operators cost a microsecond on every read.
_RECV_FLAGS = int(getattr(socket, "MSG_CMSG_CLOEXEC", 0))
_POLL_FLAGS = _RECV_FLAGS | int(socket.MSG_DONTWAIT)
_MSG_CTRUNC = int(socket.MSG_CTRUNC)
_CHUNK = 1 << 20


# Where a receiver keeps the descriptors that came with a frame, beside its body's JSON fields:
# a key that no JSON object can hold.
DESCRIPTORS = ("isohost", "descriptors")


def take_descriptors(body):
    """The descriptors kept with `body` under DESCRIPTORS, now the caller's to close."""
    return body.pop(DESCRIPTORS, None) or []


class ProtocolError(Exception):
    """The peer broke the framing rules; the connection cannot be trusted any further."""


class FrameTooLarge(ValueError):
    """A body we were about to send exceeds what the peer is allowed to accept."""


# Built once: json.dumps and json.loads build a new encoder or decoder on every call that
# passes options, which doubles their cost on a small frame.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def depth(text):
    """How deeply arrays and objects nest in JSON `text` (brackets in strings do not count)."""
    # Without escaped quotes, every other piece between quotes is outside a string: a split is
    # several times cheaper than the regular expression.
    outside = "".join(text.split('"')[::2]) if '\\"' not in text else _STRING.sub("", text)
    return max(itertools.accumulate(map(_STEP.__getitem__, _BRACKET.findall(outside))), default=0)


def encode(body, buffer_count=0):
    """The bytes of one frame. Raises TypeError/ValueError when `body` is not strict JSON
    (NaN and lone surrogates included: the host's parser rejects both) or nests deeper than
    MAX_DEPTH."""
    text = _ENCODER.encode(body)
    # Only a body with that many brackets in all can nest that deep: most pay one count.
    if text.count("[") + text.count("{") > MAX_DEPTH and depth(text) > MAX_DEPTH:
        raise ValueError("the value nests arrays and objects more than %d levels deep (the limit)"
                         % MAX_DEPTH)
    data = text.encode("utf-8")
    if len(data) > MAX_JSON:
        raise FrameTooLarge("a %d-byte body exceeds the %d-byte frame limit" % (len(data), MAX_JSON))
    if not 0 <= buffer_count <= MAX_BUFFERS:
        raise ValueError("%d buffers exceed the limit of %d" % (buffer_count, MAX_BUFFERS))
    return HEADER.pack(MAGIC, VERSION, 0, len(data), buffer_count) + data


def send(sock, data, fds=()):
    """Send one encoded frame, `fds` riding on the sendmsg that carries its first byte.
    Callers serialise sends themselves."""
    if fds:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sent = sock.sendmsg([data], rights)
        data = data[sent:]
    if data:  # sendall of nothing would still make a system call
        sock.sendall(data)


def parse_header(data):
    """(json_length, buffer_count) of the 16-byte header `data` starts with, or ProtocolError."""
    magic, version, flags, json_length, buffer_count = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError("bad magic %r" % bytes(magic))
    if version != VERSION:
        raise ProtocolError("unsupported protocol version %d (this worker speaks %d)" % (version, VERSION))
    if flags != 0:
        raise ProtocolError("non-zero flags 0x%04x" % flags)
    if not 1 <= json_length <= MAX_JSON:
        raise ProtocolError("json_length %d out of bounds 1..%d" % (json_length, MAX_JSON))
    if buffer_count > MAX_BUFFERS:
        raise ProtocolError("buffer_count %d exceeds %d" % (buffer_count, MAX_BUFFERS))
    return json_length, buffer_count


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


# Built once, like _ENCODER.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_body(data):
    """The JSON object in a frame's body, or ProtocolError."""
    try:
        text = data.decode("utf-8")
        # The scanner alone reads a body as our encoders write it, at half the cost of
        # decode(), which takes over where whitespace surrounds the body.
        body, end = _DECODER.scan_once(text, 0) if text[:1] == "{" else (None, 0)
        if end != len(text):
            body = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ProtocolError("body is not valid UTF-8 JSON: %s" % e) from None
    if not isinstance(body, dict):
        raise ProtocolError("body is a JSON %s, not an object" % type(body).__name__)
    return body


class Reader:
    """Reads frames from a stream socket, keeping received descriptors in arrival order
    because they may arrive in a recvmsg that also ends the previous frame.

    With a `poll_window` (seconds), each read polls the socket that long before it sleeps in
    the kernel: a sleeping reader's wake-up costs more than the whole of a small call, and a
    caller's next request usually comes within a window of the last reply."""

    def __init__(self, sock, poll_window=0.0):
        self._sock = sock
        self._poll_window = poll_window
        self._data = bytearray()
        self._fds = collections.deque()

    def read(self):
        """The next (body, fds). The caller owns `fds`. Raises EOFError when the peer has
        closed the connection and ProtocolError on any violation."""
        self._fill(HEADER.size)
        json_length, buffer_count = parse_header(self._data)
        end = HEADER.size + json_length
        self._fill(end)
        body = parse_body(self._data[HEADER.size:end])
        del self._data[:end]
        # The descriptors came with the frame's first byte, which has been read by now.
        if len(self._fds) < buffer_count:
            raise ProtocolError("frame announces %d buffers but %d descriptors arrived"
                                % (buffer_count, len(self._fds)))
        return body, [self._fds.popleft() for _ in range(buffer_count)]

    def close_pending(self):
        """Close descriptors received for frames that will never be read."""
        while self._fds:
            _close(self._fds.popleft())

    def _fill(self, size):
        while len(self._data) < size:
            want = max(65536, min(size - len(self._data), _CHUNK))
            data, ancillary, flags, _ = self._receive(want)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
                    self._fds.extend(fds)
            if len(self._fds) > MAX_PENDING_FDS:
                self.close_pending()
                raise ProtocolError("more than %d descriptors arrived that no frame announced"
                                    % MAX_PENDING_FDS)
            if flags & _MSG_CTRUNC:
                raise ProtocolError("more descriptors arrived than one frame may carry")
            if not data:
                raise EOFError("connection closed" if not self._data else
                               "connection closed inside a frame")
            self._data += data

    def _receive(self, want):
        if self._poll_window > 0:
            until = time.monotonic() + self._poll_window
            while True:
                try:
                    return self._sock.recvmsg(want, _CONTROL_SPACE, _POLL_FLAGS)
                except BlockingIOError:
                    if time.monotonic() >= until:
                        break
                    os.sched_yield()  # whatever else is runnable on this core goes first
        return self._sock.recvmsg(want, _CONTROL_SPACE, _RECV_FLAGS)


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def close_all(fds):
    """Close descriptors that nobody will use, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
