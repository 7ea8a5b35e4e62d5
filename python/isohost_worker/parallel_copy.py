"""A large buffer copied into a memfd's mapping by several threads at once.

One thread's memmove of a 12 MiB IMAGE reaches a fraction of the machine's memory bandwidth,
and each isolated node pays such a copy on each side: on the H100 machine (16 cores) 1.1 ms
alone, 0.36 ms on four threads (bench/gpu/copy_probe.py); in an isolated node's call each
side's encoding fell from 1.1 to 0.68 ms and the node from 4.4 to 3.3 ms
(bench/results/h100-2026-12-06-copy). ctypes.memmove releases the GIL, so plain threads copy
in parallel, each a slice; they block between copies. torch's copy_ on its intra-op threads
copies faster alone (0.06 ms on 16), but its threads then spin, by default, and held the cores
the other process needed: the isolated node took twice as long. Standard library only.

ISOHOST_COPY_THREADS sets how many threads copy (1: the caller alone); by default one per CPU
this process may run on, at most MAX_THREADS, and no more than one per MIN_SLICE bytes.
"""

import ctypes
import os
import threading
import warnings

# Each thread copies at least this much (a smaller buffer is the caller's alone): waking a
# thread costs more than it saves on less. Four threads copied as fast as eight on the H100
# machine (0.36 ms for 12 MiB), sixteen slower (1.06).
MIN_SLICE = 2 << 20
MAX_THREADS = 4


def copy(destination, source):
    """Copy the bytes of `source` into `destination`, writable buffers of one size (a
    memoryview of the source, a mapping); in slices on this process's copy threads when it is
    large. A read-only source is copied by the caller alone (ctypes cannot take its address).
    The caller must not hold a lock that a finalizer may take: a garbage collection may run on
    a copy thread while the caller waits for it."""
    size = len(memoryview(source).cast("B"))
    threads = _threads_here()
    if threads.count == 1 or size < 2 * MIN_SLICE or memoryview(source).readonly:
        memoryview(destination).cast("B")[:] = memoryview(source).cast("B")
        return
    # The ctypes objects hold exports of both buffers: neither can be closed or resized while
    # a thread still copies (a mapping closed meanwhile raises BufferError instead).
    target = (ctypes.c_char * size).from_buffer(destination)
    origin = (ctypes.c_char * size).from_buffer(source)
    threads.run(ctypes.addressof(target), ctypes.addressof(origin), size)


def thread_count():
    """How many threads copy a large buffer in this process."""
    return _threads_here().count


class _CopyThreads:
    """count - 1 daemon threads, started on first use, that wait for a copy and each take a
    slice of it; the caller takes the first. Thread safety: one copy at a time (a lock)."""

    def __init__(self, count):
        self.count = count
        self.pid = os.getpid()
        self._one_copy = threading.Lock()
        self._changed = threading.Condition()
        self._job = None
        self._generation = 0
        self._pending = 0
        self._started = False

    def run(self, destination, source, size):
        slices = min(self.count, size // MIN_SLICE)
        with self._one_copy:
            self._start()
            with self._changed:
                self._job = (destination, source, size, slices)
                self._pending = slices - 1
                self._generation += 1
                self._changed.notify_all()
            error = None
            try:
                _copy_slice(0, destination, source, size, slices)
            except BaseException as e:  # an interrupt raised here: the slices still finish
                error = e
            error = self._wait_for_slices() or error
            if error is not None:
                raise error

    def _wait_for_slices(self):
        """Wait until every other slice is copied, even through an exception raised in this
        thread meanwhile (ComfyUI's interrupt): the caller may unmap the destination once this
        returns. Returns that exception, to raise after."""
        error = None
        while True:
            try:
                with self._changed:
                    while self._pending:
                        self._changed.wait()
                return error
            except BaseException as e:
                error = e

    def _start(self):
        if self._started:
            return
        for index in range(1, self.count):
            threading.Thread(target=self._serve, args=(index,), daemon=True,
                             name="isohost-copy-%d" % index).start()
        self._started = True

    def _serve(self, index):
        seen = 0
        while True:
            with self._changed:
                while self._generation == seen:
                    self._changed.wait()
                seen = self._generation
                destination, source, size, slices = self._job
            if index < slices:
                _copy_slice(index, destination, source, size, slices)
                with self._changed:
                    self._pending -= 1
                    if not self._pending:
                        self._changed.notify_all()


def _copy_slice(index, destination, source, size, slices):
    step = -(-size // slices)
    begin = index * step
    if begin < size:
        ctypes.memmove(destination + begin, source + begin, min(step, size - begin))


def _configured_count():
    configured = os.environ.get("ISOHOST_COPY_THREADS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            warnings.warn("ISOHOST_COPY_THREADS=%r is not a whole number of threads; copying "
                          "with the default" % configured, RuntimeWarning, stacklevel=2)
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


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
                _threads = _CopyThreads(_configured_count())
            threads = _threads
    return threads
