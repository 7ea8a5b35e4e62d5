"""Values in messages, shared by the host's Python API and the worker (docs/protocol.md,
"Values").

A value that is plain JSON travels as JSON. Anything else travels as a pickle (protocol 5)
whose large buffers go out of band, each in its own sealed memfd passed as a descriptor:

    encoded = encode(value)          # the one copy: each large buffer into its memfd
    body["pickle"] = encoded.description
    send(body, encoded.fds); encoded.close()
    ...
    value = decode(body["pickle"], fds)   # maps each memfd (no copy), closes every fd

What travels out of band: buffers that pickle itself hands out (numpy arrays, anything whose
__reduce_ex__ gives a PickleBuffer), torch tensors (CPU; CUDA ones through host memory), and
bytes, bytearray and memoryview objects. Buffers under INLINE_LIMIT bytes stay in the stream.
A received array or tensor wraps its mapping; the mapping is unmapped when the last object
using it is collected. bytes and bytearray own their memory in CPython, so those two are
copied out of the mapping once on receipt; a memoryview wraps the mapping.

Standard library only, Python 3.9+: the worker runs under any environment's interpreter.
numpy and torch are used only when the value holds their objects (they are never imported
here).
"""

import base64
import fcntl
import functools
import io
import math
import mmap
import os
import pickle
import select
import stat
import sys
import threading
import warnings
import weakref

from isohost_worker import frames, parallel_copy

PICKLE5 = "pickle5"
# Buffers smaller than this are copied into the pickle stream: a memfd costs a few system
# calls on each side, more than copying a few pages.
INLINE_LIMIT = 64 * 1024
# A stream up to this size travels base64-encoded in the JSON body, larger in a memfd. Small:
# the host's core parses and writes each JSON body again (nlohmann, about 100 MB/s), so a 48 KiB
# tensor's stream inline took a call 4.7 ms there and back, 0.8 ms in a memfd.
STREAM_INLINE_LIMIT = 4 * 1024
# What one frame carries; one descriptor may be the stream's.
MAX_DESCRIPTORS = frames.MAX_BUFFERS
MAX_OUT_OF_BAND = MAX_DESCRIPTORS - 1

# Spare memfds (see _Spares): buffers smaller than this are not kept for reuse; each process
# keeps at most MAX_SPARES (and MAX_SPARE_BYTES) free ones and as many waiting to go back to
# each peer, and holds the descriptors of at most MAX_TRACKED received buffers still mapped.
# Every buffer that travels in a memfd may be reused: a new memfd of 576 KiB (a 256x192 IMAGE)
# cost its sender 0.4 ms and its receiver 0.15 ms where a rewritten one with kept mappings costs
# 0.12 and 0.09. Sixteen, not four: a ComfyUI prompt keeps ten crossing outputs alive at once,
# and with four the mappings were lost before their memfds came back (docs/comfyui.md).
SPARE_MIN = INLINE_LIMIT
# A buffer copied while its frame travels (encode(pipelined=True)) is at least this large: the
# pipe and the receiver's wait for a copy thread cost more than the overlap saves on a small
# one (a chain of ten 256x192 IMAGE nodes with every output crossing took 3 ms longer on the
# 2-core CPU machine with 576 KiB buffers pipelined), where a 12 MiB IMAGE's copy took as long
# as the rest of its way to the other side.
PIPELINED_MIN = 4 << 20
MAX_SPARES = 16
MAX_SPARE_BYTES = 256 << 20
MAX_TRACKED = 64
# The peer of a worker: its host.
HOST = "host"

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_PERSISTENT_TAG = "isohost"
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


class DecodeError(Exception):
    """A pickled value's description does not match what came with it: a buffer announced
    but missing, a size that differs, an unknown buffer kind, a descriptor that is not a
    sealed memfd."""


class DeviceFallbackWarning(UserWarning):
    """A CUDA tensor arrived where its device is not available; it was delivered on the CPU."""


def is_plain_json(value):
    """Whether `value` survives a JSON round trip unchanged: dicts with str keys, lists, str,
    int within 64 bits, finite float, bool, None, and no container twice (JSON cannot say that
    two places hold the same list). Tuples are not plain: they would come back as lists."""
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif t is int:
            if not _INT_MIN <= v <= _INT_MAX:
                return False
        elif t is float:
            if not math.isfinite(v):
                return False
        elif v is None or t is bool:
            pass
        elif t is list or t is dict:
            if id(v) in seen:
                return False
            seen.add(id(v))
            if t is dict:
                if not all(type(k) is str for k in v):
                    return False
                stack.extend(v.keys())
                stack.extend(v.values())
            else:
                stack.extend(v)
        else:
            return False
    return True


class Encoded:
    """A pickled value ready to send: `description` goes in the message body, `fds` (owned
    here) ride with the frame in that order. close() after sending. A pipelined encoding
    (encode(pipelined=True)) may still be copying its last large buffer on the copy threads:
    send it, then wait_copied() (close() does), before the value may change or go."""

    __slots__ = ("description", "fds", "_copying")

    def __init__(self, description, fds, copying=None):
        self.description = description
        self.fds = fds
        self._copying = copying

    def wait_copied(self):
        """Returns once every buffer is copied (at once where nothing was left copying)."""
        copying, self._copying = self._copying, None
        if copying is not None:
            copying.finish()

    def close(self):
        self.wait_copied()
        fds, self.fds = self.fds, []
        for fd in fds:
            _close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def encode(value, peer=None, pipelined=False):
    """Pickle `value` with its large buffers in memfds, for `peer` (a hashable that names the
    process it goes to: spare memfds that came from there ride back with it; one whose `open`
    attribute turns false gets none back any more). Raises what pickle raises
    for a value it cannot pickle (TypeError, pickle.PicklingError, AttributeError, ...); no
    descriptor is left open then.

    `pipelined`: the last large buffer that goes into a spare may still be copying on the copy
    threads when this returns, so that the receiver reads and decodes the frame meanwhile; the
    description then says "ready" and a pipe's read end rides last, told once every byte is
    there (docs/protocol.md). The caller sends, then calls wait_copied() or close()."""
    sink = _BufferSink(pipelined)
    stream = io.BytesIO()
    try:
        _Pickler(stream, sink).dump(value)
        data = stream.getbuffer()
        if len(data) <= STREAM_INLINE_LIMIT:
            stream_description = {"kind": "inline", "data": base64.b64encode(data).decode("ascii")}
            fds = sink.fds
        else:
            stream_description = {"kind": "memfd", "size": len(data)}
            fds = [_memfd_with(data)] + sink.fds
        del data
        copying = sink.copy_deferred()  # last: nothing after it can fail and leave it running
    except BaseException:
        sink.close()
        raise
    description = {"stream": stream_description, "buffers": sink.entries}
    ready = [] if copying is None else [copying.ready_fd]
    returned = _spares_here().returns_for(peer, MAX_DESCRIPTORS - len(fds) - len(ready))
    if returned:
        description["returned"] = len(returned)
    if ready:
        description["ready"] = True
    return Encoded(description, fds + returned + ready, copying)


def has_returns(peer):
    """Whether spare memfds wait to go back to `peer` (a reason to send a value pickled)."""
    return _spares_here().has_returns(peer)


def drop_spares(peer=None):
    """Close the spare memfds kept for reuse (and, with `peer`, only those waiting to go back
    to it): their memory goes back to the system."""
    _spares_here().drop(peer)


def decode(description, fds, peer=None):
    """The value that `description` and `fds` carry, from `peer`. Always closes or keeps every
    descriptor in `fds`. Raises DecodeError when they do not match, and whatever unpickling
    raises (a class the receiving side cannot import, say). A value whose last buffer was
    still copying when it was sent ("ready") is returned once its sender says it is there."""
    kept = set()  # the descriptors kept as they came (spares, tracked buffers): not closed here
    ready_fd = None
    try:
        ready = description.get("ready", False) if isinstance(description, dict) else False
        if ready is not False:
            if ready is not True or not fds:
                raise DecodeError("'ready' must be true and come with a descriptor, not %r with "
                                  "%d descriptor(s)" % (ready, len(fds)))
            ready_fd = fds[-1]
            kept.add(ready_fd)  # closed once waited on
        fds_here = fds[:-1] if ready_fd is not None else fds
        returned = description.get("returned", 0) if isinstance(description, dict) else 0
        if type(returned) is not int or not 0 <= returned <= len(fds_here):
            raise DecodeError("the value returns %r spare buffer(s) of %d descriptor(s)"
                              % (returned, len(fds_here)))
        value_fds = fds_here[:len(fds_here) - returned]
        _spares_here().accept(fds_here[len(value_fds):], kept)
        stream, maps = _map_all(description, value_fds, peer, kept)
    except BaseException:
        if ready_fd is not None:
            _close(ready_fd)
        raise
    finally:
        for fd in fds:
            if fd not in kept:
                _close(fd)
    try:
        value = _Unpickler(stream, maps).load()
        if ready_fd is not None:
            _wait_ready(ready_fd, sum(entry.get("size", 0) for entry in description["buffers"]))
        return value
    finally:
        if ready_fd is not None:
            _close(ready_fd)
        _close_map(stream)  # copied into the unpickler; the buffers live on in the value


# How long a receiver waits for the sender's copy of a "ready" value: at least this, and as
# long as copying its bytes at READY_SLOWEST_BYTES_PER_SECOND would take (a copy runs at
# gigabytes a second; a sender that takes longer is stuck or hostile).
READY_TIMEOUT_SECONDS = 10.0
READY_SLOWEST_BYTES_PER_SECOND = 50 << 20


def _wait_ready(fd, nbytes):
    """Returns once the sender's copy threads said, on the pipe `fd`, that every byte is there;
    DecodeError if the pipe is no pipe, says something else, closes first (its sender ended
    before its copy was done) or stays silent past the timeout."""
    try:
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError as e:
        raise DecodeError("the value's 'ready' descriptor is unusable: %s" % e) from None
    if not is_pipe:
        raise DecodeError("the value's 'ready' descriptor is not a pipe")
    timeout = max(READY_TIMEOUT_SECONDS, nbytes / READY_SLOWEST_BYTES_PER_SECOND)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(timeout * 1000):
        raise DecodeError("the sender did not finish copying the value's %d bytes within %g s"
                          % (nbytes, timeout))
    told = os.read(fd, 1)
    if told != b"r":
        raise DecodeError("the sender ended before it finished copying the value's buffers"
                          if not told else "the value's 'ready' pipe said %r, not b'r'" % told)


def buffer_count(description):
    """How many descriptors a description announces (the stream's, then each buffer's)."""
    stream = description.get("stream") if isinstance(description, dict) else None
    buffers = description.get("buffers") if isinstance(description, dict) else None
    if not isinstance(stream, dict) or not isinstance(buffers, list):
        raise DecodeError("a pickled value needs a 'stream' object and a 'buffers' array")
    return (stream.get("kind") == "memfd") + len(buffers)


# --- sending -------------------------------------------------------------------------------

class _BufferSink:
    """Collects the out-of-band buffers of one value, each in its own memfd. Pipelined, the
    copies into spares wait until the whole value is pickled (copy_deferred)."""

    def __init__(self, pipelined=False):
        self.entries = []
        self.fds = []
        # Temporaries whose memory a buffer points at (contiguous copies, CPU copies of CUDA
        # tensors): they live until every copy from them is done.
        self.keep = []
        self._deferred = [] if pipelined else None  # [(mapping, view, keep_mapping)]
        # ids of the buffers whose copy may be deferred: CPU tensors' (_reduce_tensor), which
        # unpickling wraps and does not read; anything else may be read as it is unpickled
        # (bytes are copied out, a CUDA tensor moved to its device, a class's own reduction).
        self.deferrable = set()
        # The ready pipe's one descriptor: the last out-of-band buffer leaves room for it.
        self._most = MAX_OUT_OF_BAND - (1 if pipelined else 0)

    def take(self, view, readonly, deferrable=False):
        """Index of a new out-of-band buffer holding `view`'s bytes, or None when it should
        stay in the stream (small, or no descriptor left in this frame)."""
        if view.nbytes < INLINE_LIMIT or len(self.fds) >= self._most:
            return None
        late = deferrable and view.nbytes >= PIPELINED_MIN
        self.fds.append(_memfd_with(view, self._deferred if late else None))
        self.entries.append({"kind": "memfd", "size": view.nbytes, "readonly": bool(readonly)})
        return len(self.entries) - 1

    def copy_deferred(self):
        """Copies every deferred buffer but the last, and starts the last on the copy threads:
        returns its _Copying, or None where it was copied here (nothing deferred, or no
        threads to copy it on)."""
        deferred, self._deferred = self._deferred or [], None
        for index, (mapping, view, keep_mapping) in enumerate(deferred):
            try:
                if index == len(deferred) - 1:
                    copying = _Copying.start(mapping, view, keep_mapping, self.keep)
                    if copying is not None:
                        return copying
                parallel_copy.copy(mapping, view)
            except BaseException:
                for unused, _, _ in deferred[index:]:
                    _close_map(unused)
                raise
            keep_mapping()
        return None

    def pickle_buffer(self, buffer):
        """pickle's buffer_callback: a false return sends `buffer` out of band."""
        try:
            view = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it into the stream
            return True
        return self.take(view, view.readonly, id(buffer) in self.deferrable) is None

    def close(self):
        for mapping, _, _ in self._deferred or []:
            _close_map(mapping)
        self._deferred = None
        for fd in self.fds:
            _close(fd)
        self.fds = []


class _Copying:
    """A value's last large buffer copying on the copy threads while its frame travels
    (encode(pipelined=True)). `ready_fd` is the read end of the pipe the copy threads tell once
    it is done; it rides with the frame, and the receiver waits on it before the value is read
    (decode). finish() waits for the copy, then keeps the spare's mapping for its next use."""

    __slots__ = ("ready_fd", "_write_fd", "_started", "_keep_mapping", "_keep")

    @classmethod
    def start(cls, mapping, view, keep_mapping, keep):
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            started = parallel_copy.start(mapping, view, write_fd)
        except BaseException:
            _close(read_fd)
            _close(write_fd)
            raise
        if started is None:
            _close(read_fd)
            _close(write_fd)
            return None
        copying = cls()
        copying.ready_fd, copying._write_fd = read_fd, write_fd
        copying._started, copying._keep_mapping, copying._keep = started, keep_mapping, keep
        return copying

    def finish(self):
        try:
            self._started.finish()
        finally:
            _close(self._write_fd)
        self._keep_mapping()
        self._keep = None


def _memfd_with(view, deferred=None):
    """A sealed memfd holding a copy of `view`: a spare of the same size, copied into through
    the mapping kept for it (or, with a `deferred` list, later: copy_deferred), else a fresh
    one filled with write(), which beats mmap and copy there since a new mapping faults each
    page in (docs/python-api.md has the figures)."""
    view = memoryview(view).cast("B")
    size = view.nbytes
    fd = _spares_here().take(size)
    if fd is not None:
        try:
            _spares_here().copy_into(fd, view, deferred)
        except BaseException:
            os.close(fd)
            raise
        return fd
    fd = os.memfd_create("isohost-value", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        done = 0
        while done < size:
            done += os.pwrite(fd, view[done:], done)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Pickler(pickle.Pickler):
    """pickle.Pickler with this module's hooks. They are methods of a separate _Reductions,
    set on the instance before __init__ looks them up, so that no reference cycle runs through
    the pickler: its memo, which holds the value, goes when encode() returns rather than at the
    next garbage collection."""

    def __init__(self, file, sink):
        reductions = _Reductions(sink)
        self.persistent_id = reductions.persistent_id
        self.reducer_override = reductions.reducer_override
        super().__init__(file, protocol=5, buffer_callback=sink.pickle_buffer)


class _Reductions:
    def __init__(self, sink):
        self._sink = sink
        # Temporaries whose memory a PickleBuffer points at (contiguous copies, CPU copies of
        # CUDA tensors) must live until they are copied: the sink's.
        self._keep = sink.keep
        self._memo_ids = {}

    def persistent_id(self, obj):
        # bytes, bytearray and memoryview never reach reducer_override: pickle writes them
        # itself (memoryview not at all), so they are taken here.
        t = type(obj)
        if t is not bytes and t is not bytearray and t is not memoryview:
            return None
        known = self._memo_ids.get(id(obj))
        if known is not None:
            return known[0]
        pid = self._bytes_like_id(obj, t)
        self._memo_ids[id(obj)] = (pid, obj)
        return pid

    def _bytes_like_id(self, obj, t):
        if t is memoryview:
            if len(obj.format.lstrip("@")) != 1:
                raise TypeError("cannot pickle a memoryview of format %r" % obj.format)
            shape = list(obj.shape)
            data = obj if obj.c_contiguous else memoryview(obj.tobytes())
            index = self._sink.take(data, obj.readonly)
            if index is None:
                return (_PERSISTENT_TAG, "inline", bytes(data.cast("B")), obj.format, shape,
                        obj.readonly)
            return (_PERSISTENT_TAG, index, "memoryview", obj.format, shape)
        # Copied out of the mapping on receipt either way, so it is mapped read-only.
        index = self._sink.take(memoryview(obj), True)
        if index is None:
            return None
        return (_PERSISTENT_TAG, index, t.__name__, "B", None)

    def reducer_override(self, obj):
        numpy = sys.modules.get("numpy")
        if numpy is not None and type(obj) is numpy.ndarray:
            if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
                # A permuted view (`transpose`, `moveaxis`: an HWC image as CHW) goes as the
                # C-ordered array it permutes, out of band, and is permuted back on receipt:
                # no copy, and the receiver gets the sender's layout.
                axes = sorted(range(obj.ndim), key=lambda axis: -obj.strides[axis])
                ordered = obj.transpose(axes)
                if obj.size and ordered.flags.c_contiguous:
                    return (_transposed_array, (ordered, sorted(range(obj.ndim),
                                                                key=axes.__getitem__)))
                # numpy copies any other strided array into the stream, and again out of it;
                # a contiguous copy goes out of band instead.
                copy = numpy.ascontiguousarray(obj)
                self._keep.append(copy)
                return copy.__reduce_ex__(5)
            return NotImplemented
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor and _plain_tensor(torch, obj):
            return self._reduce_tensor(obj)
        return NotImplemented

    def _reduce_tensor(self, tensor):
        # Each torch call here costs a few microseconds, and several times that where a large
        # copy has just left the caches cold, as in a call: a CPU tensor that needs none of
        # these steps (the usual case) goes through the checks alone.
        device = tensor.device
        t = tensor
        if device.type != "cpu":
            t = t.detach().cpu()  # CUDA: through host memory (CUDA IPC is a later step)
        # Lazy bits (torch 1.10+) made real.
        if getattr(t, "is_conj", None) is not None and t.is_conj():
            t = t.resolve_conj()
        if getattr(t, "is_neg", None) is not None and t.is_neg():
            t = t.resolve_neg()
        # A permuted view whose elements fill their memory once (ComfyUI's images after
        # `movedim` or `permute`, as the post-processing pack's Blur returns) travels as that
        # memory and its strides: made contiguous, it cost one more copy in a different order
        # (1024x1024 RGB: slower than the copy into the memfd), and the receiver got another
        # layout than the node gave.
        strides = None
        if not t.is_contiguous():
            if t.numel() and fills_its_span(t.shape, t.stride()):
                strides = list(t.stride())
            else:
                t = t.contiguous()
        self._keep.append(t)
        nbytes = t.numel() * t.element_size()
        import ctypes

        memory = (ctypes.c_char * nbytes).from_address(t.data_ptr()) if nbytes else bytearray()
        buffer = pickle.PickleBuffer(memory)
        if device.type == "cpu":
            self._keep.append(buffer)  # its id stays its own
            self._sink.deferrable.add(id(buffer))
        args = (buffer, str(t.dtype).rpartition(".")[2], list(t.shape),
                bool(tensor.requires_grad), str(device))
        return (_rebuild_tensor, args if strides is None else args + (strides,))


def fills_its_span(shape, strides):
    """Whether a view of `shape` and `strides` (in elements) covers each element of the memory
    from its first element to its last exactly once, in some order of its dimensions: then that
    memory is the whole value, and the strides say how to read it."""
    expected = 1
    for stride, size in sorted((stride, size) for size, stride in zip(shape, strides)
                               if size != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _plain_tensor(torch, t):
    """A dense CPU or CUDA tensor without autograd history: one this module can carry. Others
    (sparse, quantized, non-leaf) go through torch's own pickling."""
    return (t.layout == torch.strided and not t.is_quantized
            and t.device.type in ("cpu", "cuda") and t.grad_fn is None)


class _Spares:
    """Memfds kept for reuse. Allocating and freeing the pages of a fresh memfd costs several
    times the copy into it (64 MiB: about 40 ms here against 11 ms to rewrite one), so a
    receiver keeps each large buffer's descriptor while its mapping lives, and once the mapping
    is collected sends the memfd back to the process it came from with its next value to it
    ("returned" in docs/protocol.md). That process rewrites it for its next value of the same
    size. Bounded everywhere; drop() (a worker's release) gives the memory back.
    Thread safety: a lock; finalizers run on whichever thread drops a value."""

    def __init__(self):
        # Reentrant: a garbage collection while the lock is held may run a finalizer here.
        self._lock = threading.RLock()
        self._free = []  # (size, fd), oldest first
        self._returns = {}  # peer -> [(size, fd)]
        self._tracked = 0
        # Writable mappings of reused memfds, by inode, least recently used first: copying
        # into a mapping whose pages are in place is a memcpy (6 ms for 64 MiB here), where a
        # write() walks the page cache page by page (12 ms) and a new mapping faults each page.
        self._mappings = {}
        # The receiver's mappings of buffers it gave back, by (device, inode, read-only), least
        # recently used first: (address, size). The sender rewrites such a memfd for its next
        # value of that size; mapped again, its pages would fault in one by one (12 MiB: 1.3 ms
        # here, six times the copy), where a kept mapping sees the new bytes with none. The
        # mapping keeps the file alive, so no other memfd can have its inode meanwhile.
        self._received = {}
        # How many times drop() gave everything back: a copy that began before one keeps
        # nothing after it.
        self._drops = 0
        self.pid = os.getpid()

    def track(self, fd, size, peer, kept):
        """Keep the received `fd` (added to `kept`: the caller no longer closes it); returns
        what to call once its mapping is gone (it queues the memfd for `peer`), or None when it
        is not kept. Kept as it came, not duplicated: each system call of a call's way costs
        several microseconds there, where the caches are cold after the copies."""
        with self._lock:
            if size < SPARE_MIN or self._tracked >= MAX_TRACKED:
                return None
            self._tracked += 1
            kept.add(fd)
        return functools.partial(self._released, fd, size, peer)

    def _released(self, fd, size, peer):
        if not getattr(peer, "open", True):  # a closed host's worker: nobody to send it to
            with self._lock:
                self._tracked -= 1
            _close(fd)
            return
        with self._lock:
            self._tracked -= 1
            queue = self._returns.setdefault(peer, [])
            queue.append((size, fd))
            surplus = _trim(queue)
        _close_pairs(surplus)

    def has_returns(self, peer):
        with self._lock:
            return bool(self._returns.get(peer))

    def returns_for(self, peer, limit):
        """Up to `limit` descriptors waiting to go back to `peer`, now the caller's."""
        with self._lock:
            queue = self._returns.get(peer, [])
            taken, queue[:] = queue[:max(limit, 0)], queue[max(limit, 0):]
        return [fd for _, fd in taken]

    def accept(self, fds, kept):
        """Take spare memfds a peer sent back: keep those fit for reuse (a memfd of fixed size
        that can still be written), adding them to `kept`; the caller closes the rest."""
        fit = []
        for fd in fds:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
                size = os.fstat(fd).st_size
            except OSError:
                continue
            if seals & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) == (
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) and not seals & fcntl.F_SEAL_WRITE:
                fit.append((size, fd))
        with self._lock:
            self._free.extend(fit)
            kept.update(fd for _, fd in fit)
            surplus = _trim(self._free)
        _close_pairs(surplus)

    def take(self, size):
        """A free spare of exactly `size` bytes (the seals fix its size), or None."""
        if size < SPARE_MIN:
            return None
        with self._lock:
            for i, (spare_size, fd) in enumerate(self._free):
                if spare_size == size:
                    del self._free[i]
                    return fd
        return None

    def copy_into(self, fd, view, deferred=None):
        """Copy `view` into the spare `fd` (of exactly its size) through a writable shared
        mapping kept for the next reuse; at most MAX_SPARES (and MAX_SPARE_BYTES) are kept,
        older ones unmapped. The mapping is out of the table while the copy runs, so no other
        thread unmaps it meanwhile; the lock is not held during the copy, since a finalizer
        that a garbage collection runs on a copy thread may need it (parallel_copy). With a
        `deferred` list, the copy is not made here: (mapping, view, what keeps the mapping
        after it) is added to the list."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            mapping = self._mappings.pop(key, None)
            drops = self._drops
        if mapping is None or len(mapping) != view.nbytes:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mapping = mmap.mmap(fd, view.nbytes, flags=flags,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE)
        if deferred is not None:
            deferred.append((mapping, view, functools.partial(self._keep_mapping, key, mapping,
                                                              drops)))
            return
        parallel_copy.copy(mapping, view)
        self._keep_mapping(key, mapping, drops)

    def _keep_mapping(self, key, mapping, drops):
        with self._lock:
            if drops != self._drops:  # released meanwhile: keep nothing
                _close_map(mapping)
                return
            self._mappings[key] = mapping
            while (len(self._mappings) > MAX_SPARES
                   or sum(len(m) for m in self._mappings.values()) > MAX_SPARE_BYTES):
                _close_map(self._mappings.pop(next(iter(self._mappings))))

    def map_received(self, fd, st, readonly, peer, on_unmap):
        """A mapping of the received, tracked memfd `fd` (`st` its fstat): the one kept from its
        last visit if there is one, else a new shared one. Shared even where the value is
        writable: the receiver has the memfd to itself until it gives it back (the sender only
        rewrites a spare that came back), so its writes are seen by nobody, as with a private
        mapping, and a kept mapping never holds stale private pages."""
        key = (st.st_dev, st.st_ino, bool(readonly))
        with self._lock:
            kept = self._received.pop(key, None)
        if kept is not None and kept[1] != st.st_size:
            _unmap(kept[0], kept[1], None)
            kept = None
        if kept is None:
            address = _mmap(fd, st.st_size, readonly, shared=True)
        else:
            address = kept[0]
        return _memory_at(address, st.st_size,
                          functools.partial(self._keep_received, key, address, st.st_size,
                                            peer, on_unmap))

    def _keep_received(self, key, address, size, peer, on_unmap):
        """The value over a received mapping was collected: keep the mapping for the memfd's
        next visit (within the spares' bounds), then give the memfd back. A closed host's
        worker has nobody to give it to: nothing is kept."""
        if not getattr(peer, "open", True):
            _unmap(address, size, on_unmap)
            return
        with self._lock:
            stale = [self._received.pop(key)] if key in self._received else []
            self._received[key] = (address, size)
            while (len(self._received) > MAX_SPARES
                   or sum(s for _, s in self._received.values()) > MAX_SPARE_BYTES):
                stale.append(self._received.pop(next(iter(self._received))))
        for kept_address, kept_size in stale:
            _unmap(kept_address, kept_size, None)
        on_unmap()

    def drop(self, peer=None):
        mappings = []
        received = []
        with self._lock:
            if peer is None:
                self._drops += 1
                dropped, self._free = self._free, []
                for queue in self._returns.values():
                    dropped.extend(queue)
                self._returns = {}
                mappings, self._mappings = list(self._mappings.values()), {}
                received, self._received = list(self._received.values()), {}
            else:
                dropped = self._returns.pop(peer, [])
        _close_pairs(dropped)
        for m in mappings:
            _close_map(m)
        for address, size in received:
            _unmap(address, size, None)


def _trim(pairs):
    """Remove the oldest (size, fd) pairs past the bounds; returns them for closing."""
    surplus = []
    while pairs and (len(pairs) > MAX_SPARES or sum(size for size, _ in pairs) > MAX_SPARE_BYTES):
        surplus.append(pairs.pop(0))
    return surplus


def _close_pairs(pairs):
    for _, fd in pairs:
        _close(fd)


_spares = _Spares()


def _spares_here():
    """This process's spares. A forked child starts with none: it must never rewrite a memfd
    its parent may also reuse (checked here rather than in an at-fork handler, so that nothing
    of this module runs in a child between fork and exec)."""
    global _spares
    spares = _spares
    if spares.pid != os.getpid():
        spares = _spares = _Spares()
    return spares


# --- receiving -----------------------------------------------------------------------------

def _map_all(description, fds, peer, kept):
    """The stream (bytes or a read-only mapping) and one mapping per buffer; the descriptors
    kept for their return (Spares.track) are added to `kept`."""
    expected = buffer_count(description)
    if len(fds) != expected:
        raise DecodeError("the value announces %d buffer(s) but %d descriptor(s) came with it"
                          % (expected, len(fds)))
    stream_description = description["stream"]
    descriptors = iter(fds)
    maps = []
    try:
        kind = stream_description.get("kind")
        if kind == "inline":
            try:
                stream = base64.b64decode(stream_description.get("data", ""), validate=True)
            except (ValueError, TypeError) as e:
                raise DecodeError("the inline pickle stream is not base64: %s" % e) from None
        elif kind == "memfd":
            stream = _map(next(descriptors), stream_description, True, "the stream", peer, kept)
        else:
            raise DecodeError("unknown stream kind %r" % (kind,))
        for index, entry in enumerate(description["buffers"]):
            if not isinstance(entry, dict) or entry.get("kind") != "memfd":
                raise DecodeError("buffer %d has unknown kind %r (this side knows 'memfd')"
                                  % (index, entry.get("kind") if isinstance(entry, dict) else entry))
            maps.append(_map(next(descriptors), entry, bool(entry.get("readonly")),
                             "buffer %d" % index, peer, kept))
    except BaseException:
        for m in maps:
            _close_map(m)
        raise
    return stream, maps


def _map(fd, entry, readonly, what, peer, kept):
    """A mapping of a received memfd: read-only, or writable without a copy up front (private
    copy-on-write, or shared where the memfd goes back to its sender: Spares.map_received)."""
    size = entry.get("size")
    if type(size) is not int or size < 0:
        raise DecodeError("%s has no valid size" % what)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        st = os.fstat(fd)
    except OSError as e:
        raise DecodeError("%s is not a sealed memfd: %s" % (what, e)) from None
    if not seals & fcntl.F_SEAL_SHRINK:
        # A file the sender could still shrink would fault the receiver's mapping (SIGBUS).
        raise DecodeError("%s is not sealed against shrinking" % what)
    if st.st_size != size:
        raise DecodeError("%s holds %d bytes but is described as %d" % (what, st.st_size, size))
    if size == 0:
        return b"" if readonly else bytearray()
    spares = _spares_here()
    on_unmap = spares.track(fd, size, peer, kept) if peer is not None else None
    try:
        if on_unmap is not None:
            memory = spares.map_received(fd, st, readonly, peer, on_unmap)
        else:
            memory = _map_memory(fd, size, readonly)
    except BaseException:
        if on_unmap is not None:
            on_unmap()
        raise
    view = pickle.PickleBuffer(memory).raw()
    return view.toreadonly() if readonly else view


@functools.lru_cache(maxsize=None)
def _libc():
    """libc's mmap and munmap through ctypes, loaded on first use: importing ctypes would add
    a few milliseconds to every worker's start."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return libc


def _map_memory(fd, size, readonly):
    """A ctypes array over a new mapping of `fd` (read-only, or private copy-on-write), unmapped
    when the array is collected. Not Python's mmap, which keeps a duplicate of the descriptor
    for as long as the mapping lives: a host holding thousands of received arrays would run out
    of descriptors. Every object that uses the memory holds the array, through the buffer it
    exports."""
    address = _mmap(fd, size, readonly, shared=readonly)
    return _memory_at(address, size, functools.partial(_unmap, address, size, None))


def _mmap(fd, size, readonly, shared):
    """The address of a new mapping of `fd`: read-only, or writable, shared or private."""
    import ctypes

    prot = mmap.PROT_READ if readonly else mmap.PROT_READ | mmap.PROT_WRITE
    flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
    address = _libc().mmap(None, size, prot, flags, fd, 0)
    if address is None or address == ctypes.c_void_p(-1).value:  # MAP_FAILED
        error = ctypes.get_errno()
        raise OSError(error, "mmap: %s" % os.strerror(error))
    return address


def _memory_at(address, size, collected):
    """A ctypes array over `size` bytes at `address`; `collected()` runs once it is collected."""
    import ctypes

    memory = (ctypes.c_char * size).from_address(address)
    weakref.finalize(memory, collected).atexit = False
    return memory


def _unmap(address, size, on_unmap):
    _libc().munmap(address, size)
    if on_unmap is not None:
        on_unmap()


def _close_map(m):
    if isinstance(m, memoryview):
        m.release()  # the mapping goes once nothing else uses it
    elif isinstance(m, mmap.mmap):
        try:
            m.close()
        except BufferError:
            pass  # still exported by an object; unmapped when that is collected


class _Unpickler(pickle.Unpickler):
    """pickle.Unpickler over received buffers. As with _Pickler, the hooks belong to a separate
    _BufferTable so that no cycle keeps the mappings alive after load() returns."""

    def __init__(self, stream, maps):
        table = _BufferTable(maps)
        self.persistent_load = table.persistent_load
        super().__init__(io.BytesIO(stream), buffers=table.pickle_buffers())

    def find_class(self, module, name):
        return super().find_class(_numpy_module(module), name)


def _numpy_module(module):
    """`module` as numpy here names it. numpy 2 renamed numpy.core numpy._core, and each numpy
    pickles its arrays and scalars under its own name, where a pack's environment may have the
    other numpy than ComfyUI's: numpy 1 has only stubs of a few numpy._core modules, and numpy 2
    warns on each use of a numpy.core one."""
    top, _, rest = module.partition(".")
    package, dot, inner = rest.partition(".")
    if top != "numpy" or package not in ("core", "_core"):
        return module
    return ("numpy._core" if _numpy_major() >= 2 else "numpy.core") + dot + inner


@functools.lru_cache(maxsize=None)
def _numpy_major():
    import numpy

    return int(numpy.__version__.split(".")[0])


class _BufferTable:
    def __init__(self, maps):
        self._maps = maps
        self._taken = set()
        self._by_persistent_id = {}

    def pickle_buffers(self):
        # Buffers are listed in the order the pickler met them; those not taken by a
        # persistent id are pickle's own, consumed in that same order.
        index = 0
        while True:
            while index in self._taken:
                index += 1
            if index >= len(self._maps):
                raise DecodeError("the pickle stream asks for more buffers than were sent")
            self._taken.add(index)
            yield self._maps[index]
            index += 1

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == _PERSISTENT_TAG):
            raise pickle.UnpicklingError("unknown persistent id %r" % (pid,))
        if pid[1] == "inline":
            _, _, data, fmt, shape, readonly = pid
            return _as_memoryview(data if readonly else bytearray(data), fmt, shape)
        _, index, type_name, fmt, shape = pid
        if type(index) is not int or not 0 <= index < len(self._maps):
            raise DecodeError("the pickle stream refers to buffer %r of %d" % (index, len(self._maps)))
        if index in self._by_persistent_id:
            return self._by_persistent_id[index]
        if index in self._taken:
            raise DecodeError("buffer %d is referred to twice in different ways" % index)
        self._taken.add(index)
        buffer = self._maps[index]
        if type_name == "bytes":
            value = bytes(buffer)
        elif type_name == "bytearray":
            value = bytearray(buffer)
        elif type_name == "memoryview":
            value = _as_memoryview(buffer, fmt, shape)
        else:
            raise DecodeError("unknown buffer type %r" % (type_name,))
        self._by_persistent_id[index] = value
        return value


def _as_memoryview(buffer, fmt, shape):
    view = memoryview(buffer)
    if fmt.lstrip("@") == "B" and shape is not None and len(shape) == 1:
        return view
    return view.cast("B").cast(fmt, shape)


def _rebuild_tensor(buffer, dtype_name, shape, requires_grad, device, strides=None):
    """A tensor around a received buffer (no copy), with the sender's `strides` where it was a
    permuted view, moved to its CUDA device when this side has it. Named in pickle streams:
    keep its name, and add parameters only at the end, with defaults."""
    import torch

    dtype = getattr(torch, dtype_name)
    if memoryview(buffer).nbytes == 0:
        tensor = torch.empty(shape, dtype=dtype)
    elif strides is None:
        tensor = torch.frombuffer(buffer, dtype=dtype).view(shape)
    else:
        tensor = _strided_view(torch.frombuffer(buffer, dtype=dtype), shape, strides)
    if device.startswith("cuda"):
        tensor = _to_cuda(torch, tensor, device)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _transposed_array(array, axes):
    """A permuted numpy view as its sender had it: `array` (C-ordered) with its axes put back
    in their order. Named in pickle streams: keep its name and signature."""
    import numpy

    if type(array) is not numpy.ndarray:
        raise ValueError("a transposed array must come as an array, not %s"
                         % type(array).__name__)
    return array.transpose(axes)


def _strided_view(flat, shape, strides):
    """`flat` read as `shape` with `strides`, which must cover it exactly (a stream could
    say anything: a view past the buffer would read outside the mapping)."""
    if (len(strides) != len(shape) or not all(type(v) is int and v >= 0 for v in strides)
            or math.prod(shape) != flat.numel() or not fills_its_span(shape, strides)):
        raise ValueError("a tensor's strides %r do not cover its %d elements as shape %r"
                         % (strides, flat.numel(), shape))
    return flat.as_strided(shape, strides)


def _to_cuda(torch, tensor, device):
    index = int(device.partition(":")[2] or 0)
    if torch.cuda.is_available() and index < torch.cuda.device_count():
        return tensor.to(device)
    warnings.warn("a tensor from %s arrived where that device is not available; it is on the "
                  "CPU" % device, DeviceFallbackWarning, stacklevel=2)
    return tensor


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass
