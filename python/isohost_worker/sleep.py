"""Sleep: an idle worker moves its own torch storages off the card into its host RAM, and back
(docs/sleep.md, "In the worker").

The driver's checkpoint moves a whole process at a fraction of the bus's speed; the worker can
do better for what torch allocated, because torch knows every storage and a storage can be
emptied (`resize_(0)`) and refilled without any tensor noticing: tensors, parameters and views
hold the storage, not its address. So sleep walks the live objects for the device's storages,
copies them into one anonymous mapping through a small pinned staging area, frees them and
empties the allocator's cache; wake grows them back and copies them in.

Both directions are transactional: sleep frees nothing until every byte is in host memory, and
a wake that cannot grow every storage back leaves the worker asleep with nothing lost.

Nothing here imports torch on import: the runtime imports this module in every worker.
"""

import contextlib
import ctypes
import functools
import gc
import itertools
import mmap
import os
import resource
import sys
import time
import weakref

from isohost_worker import errors, memory, populate

STAGING_ENV = "ISOHOST_SLEEP_STAGING_MIB"
# Set to 1 on machines without a GPU, by tests only: the `sleep` op then moves the worker's CPU
# storages, standing in for CUDA ones, so the host's asleep path runs through a real worker.
CPU_STAND_IN_ENV = "ISOHOST_SLEEP_CPU_STAND_IN"
DEFAULT_STAGING_MIB = 64
MIB = 1 << 20

# Each storage starts at a multiple of this in the host buffer, as the caching allocator aligns
# blocks on the card, so a chunk boundary (a multiple of it) splits a storage at an aligned
# offset and every copy starts aligned on both sides.
_ALIGN = 512

NOT_RESIZABLE = "not resizable"
NO_STORAGE = "no storage of its own (a wrapper tensor subclass, or another opaque tensor)"

# A sparse tensor has no storage of its own, but its parts are ordinary tensors that share
# theirs with it (the methods return aliases): moving their storages moves the sparse tensor.
_SPARSE_PARTS = {
    "torch.sparse_coo": ("_indices", "_values"),
    "torch.sparse_csr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_bsr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_csc": ("ccol_indices", "row_indices", "values"),
    "torch.sparse_bsc": ("ccol_indices", "row_indices", "values"),
}

# The worker's sleep while it sleeps (an _Asleep), else None. Written only by the main thread,
# read by the side lane for the memory report.
_asleep = None
# The staging area: made by the first sleep and kept for the worker's life, because pinning
# host memory costs far more than the copies it serves (573 ms/GiB on the H200).
_staging = None
# What the walk must see besides gc.get_objects(): the tensors, storages and graphs alive when
# the objects of torch's import were frozen out of the collector's lists (freeze.py), each as a
# weak reference (a strong one for a type that takes none).
_frozen = []
# The host buffer the next sleep copies into (a _HostBuffer): the last wake's, or one faulted in
# while the worker idled (sleep_prepare.py), its pages left to the kernel to take back when it
# needs them (MADV_FREE) and otherwise rewritten by the next sleep without a fault: a copy into
# fresh memory faults and zeroes every page, 59-65 ms/GiB on the H100 against 33-43 into
# memory already in place and 20 for the pinned copy itself (docs/sleep.md). None when there
# is none; a release leaves it (the kernel counts its pages as available). Written by the main
# thread, or by the preparer's thread while the main lane waits for it (sleep_prepare.stop),
# never by both at once.
_kept = None


class SleepFailed(RuntimeError):
    """Copying the storages into host memory failed; nothing was freed."""


class WakeFailed(RuntimeError):
    """The storages could not be put back on the card; the worker is still asleep and its
    bytes are still in host memory, so a later wake can try again."""


def sleep_op(request):
    """The `sleep` op: move this worker's CUDA storages into host memory, or say why not."""
    if sys.modules.get("torch") is None:
        return _refused("torch is not imported")
    if _asleep is not None:
        return _refused("already asleep")
    others = _threads_of_its_own()
    if others:
        return _refused("%d thread%s of its own %s alive (%s), which could launch kernels on memory "
                        "sleep frees; the driver's checkpoint keeps them safe"
                        % (len(others), "" if len(others) == 1 else "s",
                           "is" if len(others) == 1 else "are", ", ".join(sorted(others))))
    device_type = device_type_to_sleep()
    if device_type is None:
        return _refused("CUDA is not initialised in this worker")
    return sleep_storages(device_type)


def device_type_to_sleep():
    """What a sleep would move now: "cuda" once CUDA is initialised, "cpu" under the tests'
    stand-in, else None."""
    if os.environ.get(CPU_STAND_IN_ENV) == "1":
        return "cpu"
    return None if memory._initialised_cuda() is None else "cuda"


def wake_op(request):
    """The `wake` op: put back what the last sleep moved."""
    return wake_storages()


def wake_before(what):
    """The safeguard for user code about to run in a sleeping worker (`what`: "a call", "a
    release", whose callbacks are user code): its tensors have no memory behind them, and
    touching one would crash the process. The host wakes a worker before it runs anything
    there, so this says so on stderr when it has to act."""
    if _asleep is None:
        return
    errors.say("%s arrived while this worker was asleep; waking it first "
               "(the host should have sent wake)" % what)
    wake_storages()


def summary():
    """What the memory report says about sleep: None while awake."""
    state = _asleep
    if state is None:
        return None
    return {"bytes": state.nbytes, "storages": state.count,
            "seconds_asleep": time.monotonic() - state.since}


def is_asleep():
    return _asleep is not None


def sleep_storages(device_type="cuda", chunk_bytes=None):
    """Move every resizable storage of `device_type` into host memory and free it. "cpu" is a
    stand-in for tests on machines without a GPU: its staging is not pinned and its copies run
    in line. `chunk_bytes` overrides the staging chunk ($ISOHOST_SLEEP_STAGING_MIB, else 64 MiB)."""
    global _asleep
    started = time.monotonic()
    import torch

    _check_device_type(device_type)
    if _asleep is not None:
        return _refused("already asleep")
    chunk = _chunk_bytes(chunk_bytes)
    populate_threads = populate.threads_wanted()
    found = _find(torch, device_type, _own_storages())
    find_seconds = time.monotonic() - started
    if found.graphs:
        return _refused("a CUDA graph is alive (%d torch.cuda.CUDAGraph object%s, which hold raw "
                        "addresses into memory sleep would move; the driver's checkpoint keeps "
                        "them correct)" % (found.graphs, "" if found.graphs == 1 else "s"))
    staging = _staging_for(torch, device_type, chunk)
    reserved_before = _reserved(device_type)
    groups = _layout(found.storages)
    copy_started = time.monotonic()
    faults_before = _minor_faults()
    host, host_was = _copy_all_out(torch, groups, staging, populate_threads)
    faults = _minor_faults() - faults_before
    copy_seconds = time.monotonic() - copy_started
    state = _Asleep(device_type, groups, host, staging)
    free_started = time.monotonic()
    _free(state)
    _asleep = state
    receipt = {
        "asleep": True,
        "bytes": state.nbytes,
        "storages": state.count,
        "left_on_card": found.left_on_card(),
        "reserved_before": reserved_before,
        "reserved_after": _reserved(device_type),
        "seconds": time.monotonic() - started,
        # Where the seconds went: the walk for storages, the copy (the host buffer mapped and
        # filled), and the storages freed with the allocator's cache emptied.
        "find_seconds": find_seconds,
        "copy_seconds": copy_seconds,
        "free_seconds": time.monotonic() - free_started,
        "staging_bytes": staging.nbytes,
        # Where the bytes went: a buffer mapped for this sleep ("new"), the last wake's
        # ("kept"), or one faulted in while the worker idled ("prepared"); and the page faults
        # the process took meanwhile, which a buffer already in place spares.
        "host_buffer": host_was,
        "minor_faults": faults,
    }
    if populate_threads:
        receipt["populate"] = {"threads": populate_threads,
                               "stopped_because": host.populate_stopped}
    return receipt


def wake_storages():
    """Grow every storage the sleep freed back and copy its bytes in; then free the host
    buffer. All or nothing: a failure leaves the worker asleep, its bytes in host memory."""
    global _asleep
    state = _asleep
    if state is None:
        return {"woken": False, "reason": "not asleep"}
    started = time.monotonic()
    import torch

    _regrow(state)
    copy_started = time.monotonic()
    grow_seconds = copy_started - started
    try:
        for group in state.groups:
            _copy_in(torch, group, state.host, state.staging)
    except BaseException as e:
        _shrink(state.storages())
        _empty_cache(state.device_type)
        _raise_as(WakeFailed, e, "copying %d storages (%s) back onto the card failed; "
                  "the worker is still asleep" % (state.count, _size(state.nbytes)))
    copy_seconds = time.monotonic() - copy_started
    _asleep = None
    _keep(state.host)
    return {"woken": True, "bytes": state.nbytes, "storages": state.count,
            "seconds": time.monotonic() - started, "grow_seconds": grow_seconds,
            "copy_seconds": copy_seconds}


def _threads_of_its_own():
    """The names of the Python threads alive besides the runtime's (the main thread, which runs
    this, and isohost-* lanes) and tqdm's progress monitor, which only sleeps and reads clocks."""
    import threading

    return [t.name for t in threading.enumerate()
            if t is not threading.main_thread() and not t.name.startswith("isohost-")
            and type(t).__name__ != "TMonitor"]


def _refused(reason):
    return {"asleep": False, "reason": reason}


def _check_device_type(device_type):
    if device_type not in ("cuda", "cpu"):
        raise ValueError("sleep moves 'cuda' storages (or 'cpu' ones, as a stand-in for tests), "
                         "not %r" % (device_type,))


def _chunk_bytes(explicit):
    """The staging chunk: `explicit`, else $ISOHOST_SLEEP_STAGING_MIB MiB, else 64 MiB."""
    if explicit is not None:
        if int(explicit) < 1:
            raise ValueError("the staging chunk must be at least 1 byte, not %r" % (explicit,))
        return int(explicit)
    raw = os.environ.get(STAGING_ENV, "").strip()
    if not raw:
        return DEFAULT_STAGING_MIB * MIB
    try:
        mib = int(raw)
    except ValueError:
        mib = 0
    if mib < 1:
        raise ValueError("%s=%r: the staging chunk must be a whole number of MiB, at least 1"
                         % (STAGING_ENV, raw))
    return mib * MIB


# --- finding the storages -----------------------------------------------------------------

# _OTHER is 0, so that a kind reads as whether the walk wants the object.
_OTHER, _TENSOR, _STORAGE, _TYPED_STORAGE, _GRAPH = range(5)


class _Found:
    """What one walk over the live objects found: the storages to move (one per storage, however
    many tensors share it), the ones that stay and why, and the CUDA graphs alive."""

    def __init__(self, device_type, exclude):
        self.device_type = device_type
        self.storages = {}  # key -> storage, in the order met
        self.exclude = exclude
        self.left = {}  # reason -> [count, bytes]
        self.left_keys = set()
        self.graphs = 0

    def add_tensor(self, tensor):
        try:
            if tensor.device.type != self.device_type:
                return
        except Exception:
            return  # a tensor-like object that cannot say where it is: nothing to move
        parts = _SPARSE_PARTS.get(str(tensor.layout))
        if parts is not None:
            for name in parts:
                self.add_tensor(getattr(tensor, name)())
            return
        try:
            storage = tensor.untyped_storage()
        except Exception:
            self._leave(NO_STORAGE, 0)
            return
        self.add_storage(storage)
        # A gradient may have no Python object of its own until asked for.
        if tensor.requires_grad and tensor.is_leaf and tensor.grad is not None:
            self.add_tensor(tensor.grad)

    def add_storage(self, storage):
        if storage.device.type != self.device_type:
            return
        nbytes = storage.nbytes()
        key = _key(storage)
        if nbytes == 0 or key in self.exclude or key in self.storages or key in self.left_keys:
            return
        reason = _cannot_move(storage)
        if reason is not None:
            self.left_keys.add(key)
            self._leave(reason, 0 if reason == NO_STORAGE else nbytes)
            return
        self.storages[key] = storage

    def _leave(self, reason, nbytes):
        entry = self.left.setdefault(reason, [0, 0])
        entry[0] += 1
        entry[1] += nbytes

    def left_on_card(self):
        return {"storages": sum(count for count, _ in self.left.values()),
                "bytes": sum(nbytes for _, nbytes in self.left.values()),
                "reasons": {reason: nbytes for reason, (_, nbytes) in self.left.items()}}


def _cannot_move(storage):
    """Why `storage` must stay where it is, or None."""
    try:
        # A wrapper subclass's storage has a size but no memory: asking for it raises.
        if storage.data_ptr() == 0:
            return NO_STORAGE
    except Exception:
        return NO_STORAGE
    return None if storage.resizable() else NOT_RESIZABLE


def _key(storage):
    # The StorageImpl's address: the same for every Python wrapper of one storage, which
    # untyped_storage() makes anew on each call.
    return storage._cdata


def _find(torch, device_type, exclude):
    found = _Found(device_type, exclude)
    kinds = _Kinds(torch)
    # Subclasses' __torch_function__ (quantised weights in packs, say) must not run for .device
    # or .untyped_storage(): the walk wants the tensor's own storage.
    disable = getattr(torch._C, "DisableTorchFunctionSubclass", contextlib.nullcontext)
    objects = gc.get_objects()
    objects.extend(_still_frozen())
    try:
        # A worker with torch imported holds some 200,000 objects and a few hundred tensors:
        # the types are looked up at C speed (map, compress) and only the objects of interest
        # reach Python, which halves the walk.
        picked = list(_picked(kinds, objects))
    finally:
        del objects
    with disable():
        for obj in picked:
            kind = kinds[type(obj)]
            if kind == _TENSOR:
                found.add_tensor(obj)
            elif kind == _STORAGE:
                found.add_storage(obj)
            elif kind == _TYPED_STORAGE:
                found.add_storage(obj._untyped_storage)
            elif kind == _GRAPH:
                found.graphs += 1
    return found


def remember_frozen(torch, objects):
    """Keep the tensors, storages and graphs among `objects`, which gc.freeze() has just taken
    out of gc.get_objects(), for every later walk (freeze.py)."""
    for obj in _picked(_Kinds(torch), objects):
        try:
            _frozen.append(weakref.ref(obj))
        except TypeError:
            _frozen.append(functools.partial(_same, obj))


def _picked(kinds, objects):
    """The tensors, storages and graphs among `objects`, their types looked up at C speed."""
    return itertools.compress(objects, map(kinds.__getitem__, map(type, objects)))


def _same(obj):
    return obj


def _still_frozen():
    """The remembered frozen objects still alive; the dead ones' references are dropped."""
    alive = [ref() for ref in _frozen]
    if None in alive:
        _frozen[:] = [ref for ref, obj in zip(_frozen, alive) if obj is not None]
        alive = [obj for obj in alive if obj is not None]
    return alive


class _Kinds(dict):
    """Type -> kind, each type classified once, on its first lookup."""

    def __init__(self, torch):
        super().__init__()
        self._torch = torch
        self._graph_types = _graph_types(torch)

    def __missing__(self, cls):
        kind = self[cls] = _kind(self._torch, cls, self._graph_types)
        return kind


def _kind(torch, cls, graph_types):
    # By type, never isinstance: isinstance reads `__class__`, which some proxies compute (and
    # torch.distributed's deprecated names warn on).
    try:
        if issubclass(cls, torch.Tensor):
            return _TENSOR
        if issubclass(cls, torch.UntypedStorage):
            return _STORAGE
        if issubclass(cls, torch.storage.TypedStorage):
            return _TYPED_STORAGE
        if graph_types and issubclass(cls, graph_types):
            return _GRAPH
    except TypeError:
        pass
    return _OTHER


def _graph_types(torch):
    """The classes whose live objects forbid a sleep (a seam for tests without CUDA)."""
    graph = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    return (graph,) if isinstance(graph, type) else ()


def _own_storages():
    # With the "cpu" stand-in the staging buffers and the kept host buffer are storages of the
    # moved kind themselves.
    own = set() if _staging is None else _staging.keys()
    kept = _kept
    if kept is not None and kept.tensor is not None:
        own.add(_key(kept.tensor.untyped_storage()))
    return own


# --- where the bytes go -------------------------------------------------------------------

class _Group:
    """One device's storages and their places in the host buffer, [start, end)."""

    def __init__(self, device, storages, start):
        self.device = device
        self.storages = storages
        self.sizes = [s.nbytes() for s in storages]
        self.offsets = []
        position = start = _aligned(start)
        for size in self.sizes:
            position = _aligned(position)
            self.offsets.append(position)
            position += size
        self.start, self.end = start, position


def _layout(storages):
    """Groups by device, one after another in the host buffer: one device's copies go on one
    stream, so they are synchronised by one lane's events."""
    by_device = {}
    for storage in storages.values():
        by_device.setdefault(storage.device, []).append(storage)
    groups = []
    end = 0
    for device in sorted(by_device, key=lambda d: (d.type, d.index if d.index is not None else -1)):
        group = _Group(device, by_device[device], end)
        groups.append(group)
        end = group.end
    return groups


def _aligned(position):
    return (position + _ALIGN - 1) // _ALIGN * _ALIGN


def _chunks(group, chunk):
    """The group's host range cut into chunks: (start, length, pieces), where each piece is
    (storage index, offset in the storage, length, offset in the staging buffer). The staging
    buffer mirrors the host range byte for byte, so the CPU copies each chunk in one piece
    however many storages it holds; a storage larger than a chunk spans several."""
    index, count = 0, len(group.storages)
    position = group.start
    while position < group.end:
        stop = min(position + chunk, group.end)
        pieces = []
        while index < count:
            offset, size = group.offsets[index], group.sizes[index]
            if offset >= stop:
                break
            begin, end = max(offset, position), min(offset + size, stop)
            pieces.append((index, begin - offset, end - begin, begin - position))
            if offset + size > stop:
                break
            index += 1
        yield position, stop - position, pieces
        position = stop


class _HostBuffer:
    """The destination: one anonymous mapping, made by a sleep and kept after the wake for the
    next one (_kept). Ordinary memory, which the host counts in the worker's RSS and PSS; huge
    pages where the kernel offers them, so the copy into it faults once per 2 MiB instead of
    once per 4 KiB. `nbytes` of its `capacity` hold the sleep's bytes."""

    def __init__(self, torch, nbytes):
        self.nbytes = self.capacity = nbytes
        # How many bytes from the start were written or faulted in.
        self.faulted = 0
        # What the next sleep that takes it finds: "new" (mapped for it), "kept" (by the last
        # wake) or "prepared" (faulted in while the worker idled).
        self.origin = "new"
        self._map = None
        self._populator = None
        # Why the kernel would not fault the buffer in ahead (an errno's words), or None.
        self.populate_stopped = None
        if nbytes == 0:
            self.tensor = torch.empty(0, dtype=torch.uint8)
            return
        self._map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advice = getattr(mmap, "MADV_HUGEPAGE", None)
        if advice is not None:
            try:
                self._map.madvise(advice)
            except OSError:
                pass  # a kernel without transparent huge pages: small pages, slower faults
        # A CPU tensor over the mapping, so the CPU side of each copy is torch's own
        # multi-threaded copy_.
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8)

    def populate_ahead(self, chunk, threads):
        """Threads fault the buffer in, chunk by chunk, ahead of the copy (populate.py)."""
        if self._map is not None and threads > 0:
            self._populator = populate.Populator(self.tensor.data_ptr(), self.nbytes, chunk,
                                                 threads)

    def fault_in(self, chunk, stopped, upto):
        """Fault the buffer in from `faulted` on, `chunk` bytes at a time, up to `upto` bytes
        (or its end) unless `stopped()`; None, or why the kernel would not (an errno's words)."""
        if self._map is None:
            return None
        madvise = populate.libc_madvise()
        address = self.tensor.data_ptr()
        end = min(upto, self.capacity)
        while self.faulted < end and not stopped():
            length = min(chunk, end - self.faulted)
            if madvise(address + self.faulted, length, populate.MADV_POPULATE_WRITE) != 0:
                return os.strerror(ctypes.get_errno())
            self.faulted += length
        return None

    def ready(self, start, length):
        """Block until the copy can fill [start, start + length) without faulting."""
        if self._populator is not None:
            self._populator.ready(start, length)

    def stop_populating(self):
        if self._populator is not None:
            self._populator.close()
            if self._populator.stopped_because is not None:
                self.populate_stopped = self._populator.stopped_because
            self._populator = None

    def free_lazily(self):
        """Give the pages to the kernel to take back when it needs memory (MADV_FREE); until
        then they stay in place. False where the kernel cannot (the buffer is unchanged)."""
        advice = getattr(mmap, "MADV_FREE", None)
        if self._map is None or advice is None:
            return False
        try:
            self._map.madvise(advice)
        except OSError:
            return False
        return True

    def close(self):
        self.stop_populating()
        # frombuffer keeps no export of the mapping, so the tensor must go before the mapping.
        self.tensor = None
        if self._map is not None:
            self._map.close()
            self._map = None


class _Lane:
    """Where one device's copies run. For CUDA, a stream of its own with an event per staging
    buffer, so the device copies one chunk while the CPU copies the other; for the CPU
    stand-in, in line."""

    def __init__(self, torch, device):
        self._torch = torch
        self._device = device
        self._stream = None
        self._events = [None, None]
        if device.type == "cuda":
            self._stream = torch.cuda.Stream(device=device)
            self._events = [torch.cuda.Event(), torch.cuda.Event()]

    def begin(self):
        """Wait for everything already queued on the device, on any stream."""
        if self._stream is not None:
            self._torch.cuda.synchronize(self._device)

    def running(self):
        """Copies issued inside this context run on the lane."""
        if self._stream is None:
            return contextlib.nullcontext()
        return self._torch.cuda.stream(self._stream)

    def record(self, buffer):
        if self._stream is not None:
            self._events[buffer].record(self._stream)

    def wait(self, buffer):
        """Block until the device is done with what was last recorded for `buffer`."""
        if self._stream is not None:
            self._events[buffer].synchronize()

    def finish(self):
        if self._stream is not None:
            self._stream.synchronize()


class _Staging:
    """Two buffers of one chunk each, pinned for a GPU (the bus reaches full speed only from
    pinned memory), and a lane per device."""

    def __init__(self, torch, device_type, chunk):
        self.device_type = device_type
        self.chunk = chunk
        pin = device_type != "cpu"
        self.buffers = [torch.empty(chunk, dtype=torch.uint8, pin_memory=pin) for _ in range(2)]
        self.nbytes = 2 * chunk
        self._torch = torch
        self._lanes = {}

    def lane(self, device):
        lane = self._lanes.get(device)
        if lane is None:
            lane = self._lanes[device] = _Lane(self._torch, device)
        return lane

    def keys(self):
        return {_key(b.untyped_storage()) for b in self.buffers}


def _staging_for(torch, device_type, chunk):
    global _staging
    if _staging is None or (_staging.device_type, _staging.chunk) != (device_type, chunk):
        _staging = None  # the old buffers go before the new ones are pinned
        _staging = _Staging(torch, device_type, chunk)
    return _staging


# --- the copies ---------------------------------------------------------------------------

def _views(torch, storages):
    """A flat uint8 tensor over each storage as it is now."""
    return [torch.empty(0, dtype=torch.uint8, device=s.device).set_(s, 0, (s.nbytes(),), (1,))
            for s in storages]


def _gather(pieces, views, buffer):
    """Queue one chunk's copies from the storages into a staging buffer."""
    for index, at, length, into in pieces:
        buffer[into:into + length].copy_(views[index][at:at + length], non_blocking=True)


def _scatter(pieces, views, buffer):
    """Queue one chunk's copies from a staging buffer into the storages."""
    for index, at, length, into in pieces:
        views[index][at:at + length].copy_(buffer[into:into + length], non_blocking=True)


def _copy_all_out(torch, groups, staging, populate_threads):
    """A host buffer holding every group's bytes, faulted in ahead of the copies by
    `populate_threads` threads, and where it came from (_HostBuffer.origin); on any failure,
    none (and nothing freed)."""
    nbytes = _end(groups)
    try:
        host = _host_buffer(torch, nbytes)
        host_was = host.origin
    except (OSError, ValueError) as e:
        raise SleepFailed("cannot map %s of host memory to sleep into: %s"
                          % (_size(nbytes), e)) from e
    try:
        host.populate_ahead(staging.chunk, populate_threads)
        for group in groups:
            _copy_out(torch, group, host, staging)
        host.stop_populating()
    except BaseException as e:
        host.close()
        _raise_as(SleepFailed, e, "copying %d storages (%s) into host memory failed; nothing "
                  "was freed" % (sum(len(g.storages) for g in groups), _size(nbytes)))
    host.faulted = max(host.faulted, nbytes)
    return host, host_was


def _end(groups):
    """How many bytes of host buffer the groups need."""
    return groups[-1].end if groups else 0


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _host_buffer(torch, nbytes):
    """A host buffer of at least `nbytes`: the kept one where it is large enough, else new."""
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        if kept.capacity >= nbytes:
            kept.nbytes = nbytes
            return kept
        kept.close()
    return _HostBuffer(torch, nbytes)


def _keep(host):
    """Keep the woken worker's host buffer for the next sleep, its pages the kernel's to take
    back; where the kernel cannot take them so (no MADV_FREE), free it now."""
    global _kept
    if not host.free_lazily():
        host.close()
        return
    host.origin = "kept"
    if _kept is not host:
        drop_kept()
        _kept = host


def bytes_to_sleep(torch, device_type):
    """How much host buffer a sleep would fill now (the walk and the layout a sleep makes)."""
    return _end(_layout(_find(torch, device_type, _own_storages()).storages))


def kept_capacity():
    kept = _kept
    return 0 if kept is None else kept.capacity


def kept_faulted():
    """How many of the kept buffer's bytes, from its start, were faulted in (the kernel may
    have taken some back since)."""
    kept = _kept
    return 0 if kept is None else kept.faulted


def staging_bytes():
    """The staging area's size, made or to be made ($ISOHOST_SLEEP_STAGING_MIB)."""
    return 2 * _chunk_bytes(None)


def prepare_staging(torch, device_type):
    """Make the staging area the next sleep would make (sleep_prepare.py)."""
    _staging_for(torch, device_type, _chunk_bytes(None))


def buffer_to_prepare(torch, nbytes):
    """The host buffer an idle worker faults in for a sleep of `nbytes` (sleep_prepare.py): the
    kept one where it is large enough, else a new one that replaces it, kept from now on. A new
    one has a sixteenth more room, not faulted in, so that a model that grows a little between
    calls does not have its buffer mapped and faulted in again each time."""
    global _kept
    if _kept is not None and _kept.capacity >= nbytes:
        return _kept
    drop_kept()
    _kept = _HostBuffer(torch, _aligned(nbytes + nbytes // 16))
    _kept.origin = "prepared"
    return _kept


def drop_kept():
    """Unmap the host buffer kept for the next sleep."""
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        kept.close()


def _copy_out(torch, group, host, staging):
    """Device to host, double-buffered: while the device copies chunk k into one staging
    buffer, the CPU copies chunk k-1 out of the other into the host buffer."""
    lane = staging.lane(group.device)
    lane.begin()
    views = _views(torch, group.storages)
    pending = None
    for k, (start, length, pieces) in enumerate(_chunks(group, staging.chunk)):
        buffer = k % 2
        # The CPU finished reading this buffer (chunk k-2) in the previous turn.
        with lane.running():
            _gather(pieces, views, staging.buffers[buffer])
            lane.record(buffer)
        if pending is not None:
            _drain(pending, host, staging, lane)
        pending = (buffer, start, length)
    if pending is not None:
        _drain(pending, host, staging, lane)


def _drain(pending, host, staging, lane):
    buffer, start, length = pending
    host.ready(start, length)
    lane.wait(buffer)
    host.tensor[start:start + length].copy_(staging.buffers[buffer][:length])


def _copy_in(torch, group, host, staging):
    """Host to device, double-buffered: while the device copies chunk k-1 out of one staging
    buffer into the storages, the CPU copies chunk k into the other."""
    lane = staging.lane(group.device)
    lane.begin()
    views = _views(torch, group.storages)
    for k, (start, length, pieces) in enumerate(_chunks(group, staging.chunk)):
        buffer = k % 2
        lane.wait(buffer)  # the device is done reading chunk k-2 from this buffer
        staging.buffers[buffer][:length].copy_(host.tensor[start:start + length])
        with lane.running():
            _scatter(pieces, views, staging.buffers[buffer])
            lane.record(buffer)
    # Every byte is on the card before the reply, and the staging is free for the next group.
    lane.finish()


# --- freeing and growing back -------------------------------------------------------------

class _Asleep:
    """A sleep in progress: strong references to the storages (not the tensors, which may
    come and go), their places in the host buffer, and the buffer."""

    def __init__(self, device_type, groups, host, staging):
        self.device_type = device_type
        self.groups = groups
        self.host = host
        self.staging = staging
        self.nbytes = sum(sum(g.sizes) for g in groups)
        self.count = sum(len(g.storages) for g in groups)
        self.since = time.monotonic()

    def storages(self):
        return [s for g in self.groups for s in g.storages]

    def entries(self):
        return [(s, size) for g in self.groups for s, size in zip(g.storages, g.sizes)]


def _free(state):
    global _asleep
    try:
        _shrink(state.storages())
    except BaseException:
        # Some storages are freed, their bytes only in the host buffer: put every one back,
        # so the worker is as it was. Should that fail too, it stays asleep, nothing lost.
        _asleep = state
        wake_storages()
        raise
    _empty_cache(state.device_type)


def _regrow(state):
    """Grow every freed storage back to its size; if one cannot be (the card is full), shrink
    the ones already grown and raise, leaving the worker asleep."""
    grown = []
    try:
        for storage, size in state.entries():
            if storage.nbytes() != size:
                _resize(storage, size)
                grown.append(storage)
    except BaseException as e:
        _shrink(grown)
        _empty_cache(state.device_type)
        _raise_as(WakeFailed, e, "cannot put %d storages (%s) back on the card (%d were back "
                  "when it failed); the worker is still asleep, nothing is lost"
                  % (state.count, _size(state.nbytes), len(grown)))


def _resize(storage, nbytes):
    storage.resize_(nbytes)


def _shrink(storages):
    for storage in storages:
        storage.resize_(0)


def _empty_cache(device_type):
    if device_type == "cuda":
        import torch

        torch.cuda.empty_cache()


def _reserved(device_type):
    return memory._reserved() if device_type == "cuda" else None


def _raise_as(kind, error, message):
    """Raise `kind` with `message` and the error's own words; an interruption (not an
    Exception) goes on as it is."""
    if not isinstance(error, Exception):
        raise error
    raise kind("%s: %s: %s" % (message, errors.type_name(type(error)), error)) from error


def _size(nbytes):
    if nbytes >= 1 << 30:
        return "%.2f GiB" % (nbytes / float(1 << 30))
    return "%.1f MiB" % (nbytes / float(MIB))
