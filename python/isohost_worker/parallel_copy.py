"""A large buffer copied into a memfd's mapping by several threads at once.

One thread's memmove of a 12 MiB IMAGE reaches a fraction of the machine's memory bandwidth,
and each isolated node pays such a copy on each side (the figures: at MIN_SLICE and
NATIVE_SLICE below). torch's copy_ on its intra-op threads is not used: its threads then
spin, by default, and held the cores the other process needed, so the isolated node took twice
as long (bench/results/h100-2026-12-06-copy).

Where a build put libisohost_copy.so beside the runtime's packages (build/python), the copy
runs on its threads (src/wire/parallel_copy.hpp), which never take the GIL; ctypes releases it
around the call. Elsewhere (the runtime in the source tree, a sanitizer build) on Python
threads: ctypes.memmove releases the GIL, so they copy in parallel, each a slice, but each
takes the GIL back to leave its slice and to sleep again, one after another. Standard library
only either way: the library has a C entry point and no Python ABI.

ISOHOST_COPY_THREADS sets how many threads copy (1: the caller alone); by default three for every
four CPUs this process may run on (default_count), at most NATIVE_MAX_THREADS of the library's
(MAX_THREADS of Python's).
The library's threads take slices of NATIVE_SLICE bytes until none is left; Python's each one
slice of at least MIN_SLICE.
ISOHOST_COPY_LIBRARY names the library to load instead (empty: none, Python threads).
"""

import ctypes
import os
import threading
import warnings

# Python threads: each copies at least MIN_SLICE (a smaller buffer is the caller's alone), and
# at most MAX_THREADS copy: waking one costs more than it saves on less, and on the H100 machine
# 12 MiB took 1.1 ms on one, 0.36 on four, as long on eight and 1.06 on sixteen (each takes the
# GIL), against 0.05 for a warm clone (bench/results/h100-2026-12-06-copy).
MIN_SLICE = 2 << 20
MAX_THREADS = 4
# The library's threads take no GIL and scale further: on the H100 machine 12 MiB back to back
# took 0.46 ms on four, 0.31 on eight, 0.19 on sixteen (a warm clone: 0.14), and in a call each
# side's copy took 0.54-0.62 ms on four, 0.19 on sixteen, beside a warm clone's 0.12
# (bench/results/h100-2026-12-06-copy-library). Woken at once, each taking slices of
# NATIVE_SLICE until none is left (those that wake first copy more), 0.15-0.17 ms a side,
# against a clone's 0.13 (h100-2026-12-06-copy-wake). A buffer of fewer than two slices is
# the caller's alone.
NATIVE_SLICE = 256 << 10
NATIVE_MAX_THREADS = 16


def copy(destination, source):
    """Copy the bytes of `source` into `destination`, writable buffers of one size (a
    memoryview of the source, a mapping); in slices on this process's copy threads when it is
    large. A read-only source is copied by the caller alone (ctypes cannot take its address).
    The caller must not hold a lock that a finalizer may take: a garbage collection may run on
    a copy thread while the caller waits for it."""
    view = memoryview(source).cast("B")
    size = len(view)
    if not view.readonly and size >= 2 * NATIVE_SLICE:
        # The ctypes objects hold exports of both buffers: neither can be closed or resized
        # while a thread still copies (a mapping closed meanwhile raises BufferError instead).
        target = (ctypes.c_char * size).from_buffer(destination)
        origin = (ctypes.c_char * size).from_buffer(source)
        if _copied_natively(ctypes.addressof(target), ctypes.addressof(origin), size):
            return
        threads = _threads_here()
        if threads.count > 1 and size >= 2 * MIN_SLICE:
            threads.run(ctypes.addressof(target), ctypes.addressof(origin), size)
            return
        del target, origin
    memoryview(destination).cast("B")[:] = view


def start(destination, source, notify_fd):
    """Start copying `source` into `destination` (as copy()) on the library's threads and
    return at once: the Started copy, whose finish() must follow; the thread that copies the
    last slice writes one byte on `notify_fd`. None where the copy cannot run on threads of
    the library's that the caller does not need (no library, one thread, a small or read-only
    source, threads that would not start): the caller copies with copy() then."""
    view = memoryview(source).cast("B")
    size = len(view)
    threads = _native_count()
    if view.readonly or size < 2 * NATIVE_SLICE or threads < 2:
        return None
    library = _library()
    if library is None:
        return None
    target = (ctypes.c_char * size).from_buffer(destination)
    origin = (ctypes.c_char * size).from_buffer(source)
    if library.start(ctypes.addressof(target), ctypes.addressof(origin), size,
                     size // NATIVE_SLICE, threads, notify_fd) != 0:
        return None
    return Started(library.finish, (target, origin), threads)


class Started:
    """A copy under way on the library's threads. It holds exports of both buffers, so that
    neither is closed or resized before finish() returns."""

    __slots__ = ("_finish", "_buffers", "_threads")

    def __init__(self, finish, buffers, threads):
        self._finish = finish
        self._buffers = buffers
        self._threads = threads

    def finish(self):
        """Take the slices left, with the threads; returns once every byte is copied, even
        through an exception raised in this thread meanwhile (ComfyUI's interrupt), which it
        raises after: the caller may unmap the destination once this returns."""
        error = None
        while self._buffers is not None:
            try:
                self._finish(self._threads)  # at once where it is finished already
                self._buffers = None
            except BaseException as e:
                error = e
        if error is not None:
            raise error


def _copied_natively(destination, source, size):
    """Whether the library copied `size` bytes between the two addresses (False where there is
    no library, or where its threads would not start)."""
    library = _library()
    if library is None:
        return False
    return library.copy(destination, source, size, size // NATIVE_SLICE, _native_count()) == 0


LIBRARY_NAME = "libisohost_copy.so"
_loaded = None  # [the library's functions, or None]: loaded once, a fork keeps it


class _Library:
    """libisohost_copy.so's entry points (src/wire/copy_library.cpp)."""

    __slots__ = ("copy", "start", "finish")

    def __init__(self, handle):
        self.copy = handle.isohost_copy_memory
        self.copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint,
                              ctypes.c_uint]
        self.copy.restype = ctypes.c_int
        self.start = handle.isohost_copy_start
        self.start.argtypes = self.copy.argtypes + [ctypes.c_int]
        self.start.restype = ctypes.c_int
        self.finish = handle.isohost_copy_finish
        self.finish.argtypes = [ctypes.c_uint]
        self.finish.restype = None


def _library():
    """libisohost_copy.so's functions, or None where there is none to load (or it would not
    load: a warning says why)."""
    global _loaded
    if _loaded is None:
        _loaded = [_load(os.environ.get("ISOHOST_COPY_LIBRARY"))]
    return _loaded[0]


def _load(named):
    if named is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            LIBRARY_NAME)
        if not os.path.exists(path):
            return None
    elif not named.strip():
        return None
    else:
        path = named
    try:
        return _Library(ctypes.CDLL(path))
    except (OSError, AttributeError) as e:
        warnings.warn("cannot load the copy library %s (%s); copying on Python threads"
                      % (path, e), RuntimeWarning, stacklevel=5)
        return None


class _Job:
    """One copy, in `slices` slices; `done`: the indexes of the copy threads' slices copied (a
    set, so that two threads given one index, after an interrupt mid-start, count once)."""

    __slots__ = ("destination", "source", "size", "slices", "done")

    def __init__(self, destination, source, size, slices):
        self.destination, self.source, self.size, self.slices = destination, source, size, slices
        self.done = set()

    def finished(self):
        return len(self.done) >= self.slices - 1


class _CopyThreads:
    """count - 1 daemon threads, started on first use, that wait for a copy and each take a
    slice of it; the caller takes the first. Thread safety: one copy at a time (a lock)."""

    def __init__(self, count):
        self.count = count
        self.pid = os.getpid()
        self._one_copy = threading.Lock()
        self._changed = threading.Condition()
        self._job = None  # the last copy posted; one object each, so that none is mistaken
        self._started = 0  # copy threads started

    def run(self, destination, source, size):
        with self._one_copy:
            self._start()
            job = _Job(destination, source, size, min(self._started + 1, size // MIN_SLICE))
            error = None
            try:
                with self._changed:
                    self._job = job  # posted in one step: an interrupt finds it posted or not
                    self._changed.notify_all()
                _copy_slice(0, job)
            except BaseException as e:  # an interrupt raised here: the posted slices still finish
                error = e
            error = self._wait_for_slices(job) or error
            if error is not None:
                raise error

    def _wait_for_slices(self, job):
        """Wait until the copy threads' slices of `job` are copied, if it was posted, even
        through an exception raised in this thread meanwhile (ComfyUI's interrupt): the caller
        may unmap the destination once this returns. Returns that exception, to raise after."""
        error = None
        while True:
            try:
                with self._changed:
                    if self._job is job:
                        # Again: an interrupt may have come between posting it and waking them.
                        self._changed.notify_all()
                        while not job.finished():
                            self._changed.wait()
                return error
            except BaseException as e:
                error = e

    def _start(self):
        while self._started < self.count - 1:
            index = self._started + 1
            try:
                threading.Thread(target=self._serve, args=(index,), daemon=True,
                                 name="isohost-copy-%d" % index).start()
            except RuntimeError:  # the system allows no more threads: copy with those there are
                self.count = self._started + 1
                return
            self._started = index

    def _serve(self, index):
        seen = None
        while True:
            with self._changed:
                while self._job is seen:
                    self._changed.wait()
                job = seen = self._job
            if index < job.slices:
                _copy_slice(index, job)
                with self._changed:
                    job.done.add(index)
                    if job.finished():
                        self._changed.notify_all()


def _copy_slice(index, job):
    step = -(-job.size // job.slices)
    begin = index * step
    if begin < job.size:
        ctypes.memmove(job.destination + begin, job.source + begin, min(step, job.size - begin))


def _configured_count(most):
    configured = os.environ.get("ISOHOST_COPY_THREADS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            warnings.warn("ISOHOST_COPY_THREADS=%r is not a whole number of threads; copying "
                          "with the default" % configured, RuntimeWarning, stacklevel=2)
    return default_count(len(os.sched_getaffinity(0)), most)


def default_count(cpus, most):
    """How many threads copy where ISOHOST_COPY_THREADS does not say: three of every four CPUs,
    at most `most`. The copy of a call's value runs while the other process reads the frame and
    decodes it, and the host's loop passes it on: those need cores too (docs/python-api.md,
    bench/results/h100-2026-12-07-copy-threads)."""
    return max(1, min(most, cpus - cpus // 4))


_native = None  # (pid, how many threads the library copies on in that process)


def _native_count():
    """How many threads the library copies on here (the caller's among them), read once in
    each process: the library's threads are as many as its first copy asked for."""
    global _native
    native = _native
    if native is None or native[0] != os.getpid():
        native = _native = (os.getpid(), _configured_count(NATIVE_MAX_THREADS))
    return native[1]


_threads = None
_threads_lock = threading.Lock()


def _threads_here():
    """This process's copy threads; a forked child (a zygote's worker) starts its own, as its
    parent's threads did not survive the fork."""
    global _threads
    threads = _threads
    if threads is None or threads.pid != os.getpid():
        with _threads_lock:
            if _threads is None or _threads.pid != os.getpid():
                _threads = _CopyThreads(_configured_count(MAX_THREADS))
            threads = _threads
    return threads
