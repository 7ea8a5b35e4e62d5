"""Fresh memory faulted in ahead of the copy that fills it (docs/sleep.md, "Faulting ahead").

The kernel gives a fresh anonymous mapping its pages on first write, each one faulted and
zeroed in line with the copy that writes it: on the H200 a sleep's copy out (into fresh memory)
took 51 ms/GiB where its copy in (from memory already there) took 24. Here threads ask the
kernel to fault the mapping in (`MADV_POPULATE_WRITE`, Linux 5.14) a chunk at a time, in the
order the copy goes, and the copy waits only for the chunk it is about to fill: the zeroing
runs beside the device's copies. Where the kernel cannot (older than 5.14, or out of memory),
the threads stop and the copy faults the rest in itself, as before.
"""

import ctypes
import itertools
import os
import threading

THREADS_ENV = "ISOHOST_SLEEP_POPULATE_THREADS"
MADV_POPULATE_WRITE = 23  # <sys/mman.h>; Python's mmap module does not name it

# libc's madvise through ctypes, which lets go of the GIL for the call: the threads fault in
# parallel while the main thread drives the copies. Resolved on first use.
_madvise = None


def threads_wanted():
    """How many threads fault ahead: $ISOHOST_SLEEP_POPULATE_THREADS, 0 (none) by default.
    Off until it is measured where it can pay: on the CPU machine, with no device copies to
    hide the zeroing behind, a sleep's copy ran slower with it (bench/gpu/sleep_out_probe.py
    measures both ways beside the pinned copy on the GPU machine)."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return 0
    try:
        threads = int(raw)
    except ValueError:
        threads = -1
    if threads < 0:
        raise ValueError("%s=%r: the number of threads that fault a sleep's host buffer in must "
                         "be a whole number, 0 for none" % (THREADS_ENV, raw))
    return threads


def libc_madvise():
    global _madvise
    if _madvise is None:
        function = ctypes.CDLL(None, use_errno=True).madvise
        function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        function.restype = ctypes.c_int
        _madvise = function
    return _madvise


class Populator:
    """Threads faulting [address, address + nbytes) in, `chunk` bytes at a time, in order."""

    def __init__(self, address, nbytes, chunk, threads):
        self._address, self._nbytes, self._chunk = address, nbytes, chunk
        self._done = [threading.Event() for _ in range(0, nbytes, chunk)]
        self._next = itertools.count()  # next() on it is atomic under the GIL
        self._stopped = False
        # Why the kernel stopped faulting ahead (an errno's words), or None.
        self.stopped_because = None
        madvise = libc_madvise()
        self._threads = [threading.Thread(target=self._run, args=(madvise,), daemon=True,
                                          name="isohost-populate-%d" % i)
                         for i in range(max(1, threads))]
        for thread in self._threads:
            thread.start()

    def ready(self, start, length):
        """Block until [start, start + length) is faulted in, or the threads stopped."""
        first, last = start // self._chunk, (start + length - 1) // self._chunk
        for k in range(first, last + 1):
            self._done[k].wait()

    def close(self):
        """Stop and join the threads; what they faulted in stays."""
        self._stop()
        for thread in self._threads:
            thread.join()

    def _run(self, madvise):
        while not self._stopped:
            k = next(self._next)
            if k >= len(self._done):
                return
            start = k * self._chunk
            length = min(self._chunk, self._nbytes - start)
            if madvise(self._address + start, length, MADV_POPULATE_WRITE) != 0:
                self.stopped_because = os.strerror(ctypes.get_errno())
                self._stop()
                return
            self._done[k].set()

    def _stop(self):
        # Whoever waits for a chunk no thread will fault goes on and faults it in itself.
        self._stopped = True
        for done in self._done:
            done.set()
