"""A large CPU tensor's last copy running while its frame travels (values.encode(pipelined=True),
docs/protocol.md, "Values": `ready`), on libisohost_copy.so's threads as a build puts it beside
the runtime, in this process; tests/python_host/test_values.py carries it through a real
worker both ways."""

import gc
import io
import os
import threading
from pathlib import Path

import pytest
import torch

from isohost_worker import parallel_copy, values

MIB = 1 << 20


class Peer:
    open = True


def fd_count():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def library(monkeypatch):
    """The build's copy library on four threads (this suite imports the runtime from the source
    tree, which has none)."""
    build = Path(os.environ["ISOHOST_BINARY"]).resolve().parent
    path = build / "python" / parallel_copy.LIBRARY_NAME
    assert path.exists(), "build the copy library first (make build): %s" % path
    monkeypatch.setattr(parallel_copy, "_loaded", [parallel_copy._load(str(path))])
    monkeypatch.setattr(parallel_copy, "_native", (os.getpid(), 4))
    values.drop_spares()
    yield
    gc.collect()
    values.drop_spares()


def send(value, peer):
    """encode(pipelined=True) as a sender does: the descriptors go (duplicated, as sendmsg
    does), then the copy is waited for. Returns (description, the receiver's fds)."""
    encoded = values.encode(value, peer, pipelined=True)
    fds = [os.dup(fd) for fd in encoded.fds]
    encoded.close()
    return encoded.description, fds


def spare_for(peer, tensor):
    """Send `tensor` once and hand its memfd back to this process as a spare, so that the next
    value of that size is copied into a spare (the case that is pipelined). Returns the
    description it went with."""
    description, fds = send((tensor,), peer)
    received = values.decode(description, fds, peer)
    del received
    gc.collect()
    with values.encode(b"", peer) as reply:
        returned = [os.dup(fd) for fd in reply.fds]
        values.decode(reply.description, returned)
    assert returned, "the memfd did not come back"
    return description


def test_a_tensor_copied_into_a_spare_is_sent_before_its_copy_and_arrives_whole(library):
    peer = Peer()
    first = spare_for(peer, torch.zeros(1024, 1024, 3))
    assert "ready" not in first, "a fresh memfd is written at once, never late"
    before = fd_count()
    for round_ in range(20):
        image = torch.full((1024, 1024, 3), float(round_)) + torch.arange(3.0)
        encoded = values.encode((image, "label"), peer, pipelined=True)
        assert encoded.description.get("ready") is True
        # Decoded before the sender waits for its copy: the receiver waits for the pipe.
        got, label = values.decode(encoded.description, [os.dup(fd) for fd in encoded.fds], peer)
        # The last slice first: it is copied last (it held the round before's bytes).
        last_ok = bool(got.flatten()[-1] == image.flatten()[-1])
        whole = torch.equal(got, image)
        encoded.close()
        assert label == "label" and last_ok and whole, "round %d: read before copied" % round_
        del got
        gc.collect()
        with values.encode(b"", peer) as reply:  # its memfd back, for the next round
            values.decode(reply.description, [os.dup(fd) for fd in reply.fds])
    values.drop_spares()
    assert fd_count() <= before


def test_a_small_tensor_is_copied_before_its_frame_goes(library):
    """Under PIPELINED_MIN (a 256x192 IMAGE) the pipe would cost more than the overlap saves."""
    peer = Peer()
    small = torch.ones(192, 256, 3)
    spare_for(peer, small)
    description, fds = send((small,), peer)
    assert "ready" not in description and len(fds) == 1
    got, = values.decode(description, fds, peer)
    assert torch.equal(got, small)


def test_only_cpu_tensors_copy_late():
    """bytes are copied out as they are unpickled, before the receiver could wait: never late."""
    sink = values._BufferSink(pipelined=True)
    values._Pickler(io.BytesIO(), sink).dump((b"x" * MIB, torch.ones(MIB)))
    tensor_buffers = len(sink.deferrable)
    sink.close()
    assert tensor_buffers == 1


def ready_value(tensor, peer):
    """A description of `tensor` as a pipelined sender makes it, and its fds, where the last
    (the ready pipe) is replaced by what the caller gives in place of the pipe's read end."""
    spare_for(peer, tensor)
    description, fds = send((tensor,), peer)
    assert description.get("ready") is True
    os.close(fds.pop())
    return description, fds


def test_a_ready_descriptor_that_is_not_a_pipe_fails_and_closes_everything(library):
    peer = Peer()
    description, fds = ready_value(torch.ones(1024, 1024), peer)
    before = fd_count() - len(fds)
    fds.append(os.memfd_create("not-a-pipe"))
    with pytest.raises(values.DecodeError, match="'ready' descriptor is not a pipe"):
        values.decode(description, fds, peer)
    gc.collect()
    values.drop_spares()
    assert fd_count() <= before


@pytest.mark.parametrize("told, message", [(None, "ended before it finished copying"),
                                           (b"x", "said b'x'")])
def test_a_sender_that_ends_or_says_something_else_fails_the_value(library, told, message):
    peer = Peer()
    description, fds = ready_value(torch.ones(1024, 1024), peer)
    read_end, write_end = os.pipe()
    if told is not None:
        os.write(write_end, told)
    os.close(write_end)
    with pytest.raises(values.DecodeError, match=message):
        values.decode(description, fds + [read_end], peer)
    with pytest.raises(OSError):
        os.fstat(read_end)  # closed


def test_a_silent_sender_times_out(library, monkeypatch):
    monkeypatch.setattr(values, "READY_TIMEOUT_SECONDS", 0.05)
    monkeypatch.setattr(values, "READY_SLOWEST_BYTES_PER_SECOND", 1 << 40)
    peer = Peer()
    description, fds = ready_value(torch.ones(1024, 1024), peer)
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(values.DecodeError, match="did not finish copying .* within 0.05 s"):
            values.decode(description, fds + [read_end], peer)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("ready", [None, "yes", 1])
def test_a_malformed_ready_is_refused(library, ready):
    with pytest.raises(values.DecodeError, match="'ready' must be true"):
        values.decode({"stream": {"kind": "inline", "data": ""}, "buffers": [], "ready": ready},
                      [])
    with pytest.raises(values.DecodeError, match="'ready' must be true and come with a descr"):
        values.decode({"stream": {"kind": "inline", "data": ""}, "buffers": [], "ready": True},
                      [])


def test_an_interrupt_in_the_sender_waits_for_the_copy_and_then_raises(library):
    """finish() returns only once every byte is copied, even where an exception is raised in
    its thread meanwhile (ComfyUI's interrupt): the caller may unmap the destination after."""
    source = bytearray(b"s" * (8 * MIB))
    destination = bytearray(8 * MIB)
    read_end, write_end = os.pipe()
    started = parallel_copy.start(destination, source, write_end)
    assert started is not None
    calls = []
    real = started._finish

    def interrupted_once(threads):
        if not calls:
            calls.append("interrupted")
            raise KeyboardInterrupt
        real(threads)

    started._finish = interrupted_once
    with pytest.raises(KeyboardInterrupt):
        started.finish()
    assert destination == source and os.read(read_end, 1) == b"r"
    os.close(read_end)
    os.close(write_end)


def test_callers_on_two_threads_each_get_their_bytes(library):
    """One copy at a time per process: a second start waits for the first's finish."""
    peer_a, peer_b = Peer(), Peer()
    spare_for(peer_a, torch.zeros(1 << 20))
    spare_for(peer_b, torch.zeros(1 << 20))
    failures = []

    def send_many(peer, value):
        for _ in range(30):
            tensor = torch.full((1 << 20,), value)
            description, fds = send((tensor,), peer)
            got, = values.decode(description, fds, peer)
            if not torch.equal(got, tensor):
                failures.append(value)
            del got
            gc.collect()
            with values.encode(b"", peer) as reply:
                values.decode(reply.description, [os.dup(fd) for fd in reply.fds])

    threads = [threading.Thread(target=send_many, args=(peer_a, 1.0)),
               threading.Thread(target=send_many, args=(peer_b, 2.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
