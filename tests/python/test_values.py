"""values.py on its own, and a pickled call through a real worker with this suite's tiny host."""

import base64
import fcntl
import gc
import os
import pickle

import pytest

from isohost_worker import values

MIB = 1 << 20


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def round_trip(value, peer=None):
    encoded = values.encode(value)
    fds = [os.dup(fd) for fd in encoded.fds]
    encoded.close()
    return values.decode(encoded.description, fds, peer)


def test_large_buffers_travel_as_sealed_memfds():
    data = bytes(range(256)) * (MIB // 256)
    with values.encode([data, bytearray(data)]) as encoded:
        assert [b["size"] for b in encoded.description["buffers"]] == [MIB, MIB]
        for fd in encoded.fds:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    assert round_trip([data, bytearray(data)]) == [data, bytearray(data)]


def test_small_values_stay_in_the_stream():
    with values.encode({"a": b"x" * 100, "b": (1, 2)}) as encoded:
        assert encoded.fds == [] and encoded.description["stream"]["kind"] == "inline"


def test_a_stream_over_four_kib_travels_in_a_memfd_not_in_the_json_the_core_parses():
    small_buffers = [b"%d" % i * 1000 for i in range(16)]  # each under INLINE_LIMIT
    with values.encode(small_buffers) as encoded:
        assert encoded.description["stream"] == {"kind": "memfd", "size": os.fstat(encoded.fds[0]).st_size}
        assert encoded.description["buffers"] == [] and len(encoded.fds) == 1
    assert round_trip(small_buffers) == small_buffers
    with values.encode(b"x" * 3000) as encoded:
        assert encoded.fds == [] and encoded.description["stream"]["kind"] == "inline"


def test_every_descriptor_is_closed_when_decoding_fails():
    before = fd_count()
    with values.encode(b"y" * MIB) as encoded:
        fds = [os.dup(fd) for fd in encoded.fds]
        description = dict(encoded.description, buffers=[dict(encoded.description["buffers"][0], size=5)])
    with pytest.raises(values.DecodeError, match="described as 5"):
        values.decode(description, fds)
    assert fd_count() == before
    with pytest.raises(values.DecodeError, match="returns 3 spare"):
        values.decode({"stream": {"kind": "inline", "data": ""}, "buffers": [], "returned": 3}, [])
    with pytest.raises(values.DecodeError, match="'stream' object"):
        values.decode("not a description", [])


# Every size that travels in a memfd: the smallest, a 256x192 IMAGE, and larger.
@pytest.mark.parametrize("size", [values.INLINE_LIMIT, 256 * 192 * 3 * 4, 2 * MIB])
def test_spares_go_back_to_their_sender_and_are_reused(size):
    peer = object()
    data = b"z" * size
    received = round_trip(data, peer)  # tracked: its memfd waits to go back to `peer`
    assert received == data and values.has_returns(peer)
    with values.encode(b"", peer) as reply:
        assert reply.description["returned"] == 1 and len(reply.fds) == 1
        returned = [os.dup(fd) for fd in reply.fds]
    assert not values.has_returns(peer)
    before = fd_count()
    spare = os.fstat(returned[0]).st_ino
    values.decode(reply.description, returned)  # the sender keeps the spare
    with values.encode(b"w" * size) as again:  # same size: the spare is rewritten
        assert len(again.fds) == 1
        assert os.fstat(again.fds[0]).st_ino == spare
    values.drop_spares()
    assert fd_count() <= before


def memfd_mappings():
    with open("/proc/self/maps") as maps:
        return sum("isohost-value" in line for line in maps)


def give_back(peer):
    """What the receiver's next value to `peer` carries back, accepted by the sender."""
    with values.encode(b"", peer) as reply:
        returned = [os.dup(fd) for fd in reply.fds]
        values.decode(reply.description, returned)
    return len(returned)


def test_a_buffer_sent_again_is_read_through_the_mapping_kept_from_its_last_visit():
    import ctypes

    values.drop_spares()
    before = memfd_mappings()
    peer = object()
    received = round_trip(memoryview(bytearray(b"a" * (2 * MIB))), peer)
    address = ctypes.addressof(ctypes.c_char.from_buffer(received))
    received[:4] = b"cccc"  # the receiver writes to its own value: nobody else sees it
    del received
    gc.collect()
    assert give_back(peer) == 1
    again = round_trip(memoryview(bytearray(b"d" * (2 * MIB))), peer)  # rewrites the spare
    assert ctypes.addressof(ctypes.c_char.from_buffer(again)) == address, "mapped anew"
    assert bytes(again) == b"d" * (2 * MIB), "the kept mapping showed stale bytes"
    del again
    gc.collect()
    values.drop_spares()
    assert memfd_mappings() == before


def test_a_release_while_a_spare_is_copied_into_keeps_no_mapping_of_it(monkeypatch):
    """The copy runs outside the spares' lock (parallel_copy's threads may run a finalizer that
    takes it); a release (drop_spares) that comes meanwhile must still leave nothing mapped."""
    values.drop_spares()
    before = memfd_mappings()
    peer = object()
    assert round_trip(b"a" * (2 * MIB), peer) == b"a" * (2 * MIB)  # copied out: mapping gone
    assert give_back(peer) == 1
    real_copy = values.parallel_copy.copy

    def copy_with_a_release_meanwhile(destination, source):
        values.drop_spares()
        real_copy(destination, source)

    monkeypatch.setattr(values.parallel_copy, "copy", copy_with_a_release_meanwhile)
    with values.encode(b"w" * (2 * MIB)) as again:  # rewrites the spare
        assert len(again.fds) == 1
        assert memfd_mappings() == before
    monkeypatch.undo()
    with values.encode(b"x" * (2 * MIB)) as fresh:  # the spare went with the release: a new one
        assert len(fresh.fds) == 1
    assert memfd_mappings() == before


def test_kept_mappings_are_bounded_and_a_read_only_one_stays_read_only():
    values.drop_spares()
    before = memfd_mappings()
    peer = object()
    kept = []
    for i in range(values.MAX_SPARES + 3):  # all alive at once: distinct memfds
        kept.append(round_trip(memoryview(bytes([65 + i]) * (2 * MIB)), peer))
    assert all(view.readonly for view in kept)
    del kept
    gc.collect()
    assert len(values._spares_here()._received) == values.MAX_SPARES
    assert memfd_mappings() - before == values.MAX_SPARES
    values.drop_spares()
    assert memfd_mappings() == before


def test_spares_that_cannot_be_reused_are_not_kept():
    read_end, write_end = os.pipe()
    kept = set()
    free_before = len(values._spares_here()._free)
    values._spares_here().accept([read_end, write_end], kept)  # not memfds: left to the caller
    assert kept == set()
    assert len(values._spares_here()._free) == free_before
    os.close(read_end)
    os.close(write_end)


def test_a_value_keeps_the_descriptors_it_came_with_and_closes_the_rest():
    # Its buffer's memfd is kept as it came (to go back to its sender), a spare sent back is
    # kept for reuse, and one that cannot be reused (a pipe) is closed: no descriptor is
    # duplicated or left open.
    class Peer:
        open = True

    values.drop_spares()
    peer = Peer()
    encoded = values.encode(bytearray(os.urandom(1 << 20)), peer)
    spare = os.memfd_create("spare", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(spare, 1 << 20)
    fcntl.fcntl(spare, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    read_end, write_end = os.pipe()
    os.close(write_end)
    description = dict(encoded.description, returned=2)
    fds = encoded.fds + [spare, read_end]
    before = fd_count()
    value = values.decode(description, fds, peer)
    assert fd_count() == before - 1  # the pipe
    assert os.fstat(fds[0]).st_size == 1 << 20  # the value's memfd, open, tracked
    assert values._spares_here().take(1 << 20) == spare
    os.close(spare)
    del value
    gc.collect()
    assert values.has_returns(peer)  # the value's memfd, queued to go back
    values.drop_spares()
    assert fd_count() == before - 3


def test_plain_json():
    assert values.is_plain_json({"a": [1, 2.5, None, True, "s", {"b": []}]})
    shared = [1]
    for value in [(1,), {1: 2}, float("inf"), 1 << 64, "\ud800", [shared, shared], b"x", {1, 2}]:
        assert not values.is_plain_json(value), value


def test_pickled_call_through_a_worker(worker):
    data = b"q" * (3 * MIB)
    encoded = values.encode(((data,), {"extra": (1, 2)}))
    request_id = worker.new_id()
    worker.send({"op": "call", "id": request_id, "target": "isohost_test_funcs:kwargs_echo",
                 "args": [], "kwargs": {}, "accept": values.PICKLE5,
                 "pickle": encoded.description}, encoded.fds)
    encoded.close()
    worker.sock.settimeout(10)
    reply, fds = worker.reader.read()
    assert reply["ok"] is False and reply["error"]["type"] == "TypeError"  # one positional too many
    for fd in fds:
        os.close(fd)
    encoded = values.encode(((), {"payload": data}))
    request_id = worker.new_id()
    worker.send({"op": "call", "id": request_id, "target": "isohost_test_funcs:kwargs_echo",
                 "args": [], "kwargs": {}, "accept": values.PICKLE5,
                 "pickle": encoded.description}, encoded.fds)
    encoded.close()
    reply, fds = worker.reader.read()
    assert reply["id"] == request_id and reply["ok"], reply
    assert values.decode(reply["pickle"], fds) == {"payload": data}


def test_a_forked_child_never_reuses_its_parents_spares():
    values.drop_spares()
    with values.encode(b"s" * (2 * MIB)) as encoded:
        fds = [os.dup(fd) for fd in encoded.fds]
    none = base64.b64encode(pickle.dumps(None, protocol=5)).decode()
    values.decode({"stream": {"kind": "inline", "data": none}, "buffers": [], "returned": 1}, fds)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write_end, b"%d" % len(values._spares_here()._free))
        os._exit(0)
    os.close(write_end)
    seen = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(child, 0)
    assert seen == b"0" and len(values._spares_here()._free) == 1
    values.drop_spares()
