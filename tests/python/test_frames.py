"""The frame layer on its own, over a real socketpair in this process."""

import json
import os
import socket
import struct
import threading

import pytest

from conftest import frames


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    yield a, b
    a.close()
    b.close()


def header(magic=b"ISOH", version=frames.VERSION, flags=0, json_length=2, buffer_count=0):
    return struct.pack("<4sHHII", magic, version, flags, json_length, buffer_count)


def test_header_layout_is_pinned():
    data = frames.encode({"op": "ping", "id": 7}, buffer_count=2)
    body = b'{"op":"ping","id":7}'
    assert data[:4] == b"ISOH"
    assert data[4:6] == b"\x02\x00"  # version 2, little-endian
    assert data[6:8] == b"\x00\x00"  # flags
    assert data[8:12] == len(body).to_bytes(4, "little")
    assert data[12:16] == (2).to_bytes(4, "little")
    assert data[16:] == body
    assert frames.HEADER.size == 16


def test_body_is_strict_utf8_json():
    data = frames.encode({"text": "naïve ☃"})
    assert data[16:].decode("utf-8") == '{"text":"naïve ☃"}'
    with pytest.raises(ValueError):
        frames.encode({"x": float("nan")})
    with pytest.raises(UnicodeEncodeError):
        frames.encode({"x": "\ud800"})
    with pytest.raises(TypeError):
        frames.encode({"x": object()})


def test_reader_reassembles_frames_split_and_merged(pair):
    a, b = pair
    stream = b"".join(frames.encode({"n": n, "pad": "x" * (n * 1000)}) for n in range(50))
    sender = threading.Thread(target=lambda: [a.sendall(stream[i:i + 777])
                                              for i in range(0, len(stream), 777)])
    sender.start()
    reader = frames.Reader(b)
    for n in range(50):
        body, fds = reader.read()
        assert body["n"] == n and len(body["pad"]) == n * 1000 and fds == []
    sender.join()


def test_large_body_round_trips(pair):
    a, b = pair
    big = {"blob": "y" * (8 * 1024 * 1024)}
    sender = threading.Thread(target=frames.send, args=(a, frames.encode(big)))
    sender.start()
    assert frames.Reader(b).read()[0] == big
    sender.join()


def test_descriptors_are_handed_to_the_frame_that_announces_them(pair):
    a, b = pair
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        frames.send(a, frames.encode({"n": 1}))
        frames.send(a, frames.encode({"n": 2}, buffer_count=2), [r1, r2])
        reader = frames.Reader(b)
        assert reader.read() == ({"n": 1}, [])
        body, fds = reader.read()
        assert body == {"n": 2} and len(fds) == 2
        os.write(w1, b"first")
        os.write(w2, b"second")
        assert os.read(fds[0], 10) == b"first" and os.read(fds[1], 10) == b"second"
        for fd in fds:
            os.close(fd)
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_a_frame_with_descriptors_that_fits_goes_out_in_one_system_call(pair):
    a, b = pair
    calls = []

    class Counting(socket.socket):
        def sendmsg(self, *args):
            calls.append("sendmsg")
            return super().sendmsg(*args)

        def sendall(self, *args):  # makes a system call even for nothing
            calls.append("sendall")
            return super().sendall(*args)

    r, w = os.pipe()
    counting = Counting(fileno=os.dup(a.fileno()))
    try:
        frames.send(counting, frames.encode({"n": 1}, buffer_count=1), [r])
        assert calls == ["sendmsg"]
        body, fds = frames.Reader(b).read()
        assert body == {"n": 1} and len(fds) == 1
        os.close(fds[0])
    finally:
        counting.close()
        os.close(r)
        os.close(w)


def _violation(b):
    with pytest.raises(frames.ProtocolError) as info:
        frames.Reader(b).read()
    return str(info.value)


@pytest.mark.parametrize("raw, says", [
    (header(magic=b"HTTP") + b"{}", "magic"),
    (header(version=7) + b"{}", "version"),
    (header(flags=1) + b"{}", "flags"),
    (header(json_length=0), "json_length"),
    (header(json_length=64 * 1024 * 1024 + 1), "json_length"),
    (header(buffer_count=65) + b"{}", "buffer_count"),
    (header(json_length=2) + b"[]", "not an object"),
    (header(json_length=3) + b"{x}", "JSON"),
    (header(json_length=4) + b'"\xff" ', "UTF-8"),
    (header(json_length=11) + b'{"x": NaN }', "JSON"),
    (header(json_length=9) + b'{"x":1} x', "JSON"),
    (header(json_length=7) + b'{"x":1 ', "JSON"),
    (header(json_length=200001) + b'{"x":' * 40000 + b"1", "JSON"),
    (header(buffer_count=1) + b"{}", "descriptors"),
])
def test_violations_are_protocol_errors(pair, raw, says):
    a, b = pair
    a.sendall(raw)
    assert says in _violation(b)


def test_whitespace_around_the_body_is_json_too(pair):
    a, b = pair
    a.sendall(header(json_length=12) + b' \n{"x": 1}\t ')
    assert frames.Reader(b).read() == ({"x": 1}, [])


def test_a_polling_reader_reads_what_comes_within_and_after_its_window(pair):
    a, b = pair
    reader = frames.Reader(b, poll_window=0.05)
    r, w = os.pipe()
    try:
        for n, delay in enumerate((0, 0.01, 0.2)):  # at once, within the window, after it
            timer = threading.Timer(delay, frames.send, (a, frames.encode({"n": n}, 1), [r]))
            timer.start()
            body, fds = reader.read()
            timer.join()
            assert body == {"n": n} and len(fds) == 1
            os.close(fds[0])
    finally:
        os.close(r)
        os.close(w)
    a.close()
    with pytest.raises(EOFError):
        reader.read()


def test_end_of_file_is_eof_not_a_violation(pair):
    a, b = pair
    a.sendall(header(json_length=10) + b"{")
    a.close()
    with pytest.raises(EOFError):
        frames.Reader(b).read()


def test_frame_limits_on_send():
    with pytest.raises(frames.FrameTooLarge):
        frames.encode({"x": "z" * (64 * 1024 * 1024)})
    with pytest.raises(ValueError):
        frames.encode({}, buffer_count=65)
    assert json.loads(frames.encode({})[16:]) == {}
