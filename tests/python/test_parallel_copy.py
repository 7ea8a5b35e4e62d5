"""isohost_worker.parallel_copy: a large buffer copied into a mapping by several threads. Each
case runs in a fresh interpreter, since the module's threads live as long as their process."""

import subprocess
import sys
import textwrap

from conftest import PACKAGE_PARENT

PREAMBLE = textwrap.dedent("""
    import mmap, os, random, sys, threading
    sys.path.insert(0, %r)
    from isohost_worker import parallel_copy
    def mapping(size):
        return mmap.mmap(-1, size)
    def random_bytes(size):
        return bytearray(random.Random(size).randbytes(size))
    def copy_threads():
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("isohost-copy"))
    def interrupted_copy(size):
        # A copy of `size` random bytes that must raise KeyboardInterrupt: (source, destination).
        source = random_bytes(size)
        destination = mapping(size)
        try:
            parallel_copy.copy(destination, memoryview(source))
        except KeyboardInterrupt:
            return source, destination
        raise AssertionError("the interrupt was lost")
""" % str(PACKAGE_PARENT))


def run(script, **env):
    import os

    done = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(script)],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_a_large_buffer_is_copied_whole_by_its_threads_in_slices_of_uneven_size():
    run("""
        assert "torch" not in sys.modules
        size = 5 * parallel_copy.MIN_SLICE + 7  # three slices, the last one short
        source = random_bytes(size)
        destination = mapping(size)
        parallel_copy.copy(destination, memoryview(source))
        assert destination[:] == source
        assert copy_threads() == ["isohost-copy-1", "isohost-copy-2"], copy_threads()
        source.reverse()
        parallel_copy.copy(destination, memoryview(source))  # the same threads, a second copy
        assert destination[:] == source
        assert len(copy_threads()) == 2
    """, ISOHOST_COPY_THREADS="3")


def test_small_read_only_or_single_thread_copies_start_no_thread():
    run("""
        small = random_bytes(parallel_copy.MIN_SLICE)
        destination = mapping(len(small))
        parallel_copy.copy(destination, memoryview(small))
        assert destination[:] == small
        large = bytes(random_bytes(3 * parallel_copy.MIN_SLICE))
        destination = mapping(len(large))
        parallel_copy.copy(destination, memoryview(large))  # read-only: the caller's alone
        assert destination[:] == large
        assert copy_threads() == [], copy_threads()
    """, ISOHOST_COPY_THREADS="4")
    run("""
        large = random_bytes(8 * parallel_copy.MIN_SLICE)
        destination = mapping(len(large))
        parallel_copy.copy(destination, memoryview(large))
        assert destination[:] == large
        assert parallel_copy._threads_here().count == 1 and copy_threads() == []
    """, ISOHOST_COPY_THREADS="1")


def test_a_bad_thread_count_warns_by_name_and_copies_with_the_default():
    done = run("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            count = parallel_copy._threads_here().count
        assert count == parallel_copy.default_count(len(os.sched_getaffinity(0)),
                                                     parallel_copy.MAX_THREADS)
        print(caught[0].message)
    """, ISOHOST_COPY_THREADS="lots")
    assert "ISOHOST_COPY_THREADS='lots' is not a whole number of threads" in done.stdout


def test_by_default_a_quarter_of_the_cpus_is_left_to_what_runs_beside_a_copy():
    from isohost_worker import parallel_copy  # pure arithmetic: no thread starts here

    counts = {cpus: parallel_copy.default_count(cpus, 16) for cpus in (1, 2, 3, 4, 8, 16, 64)}
    assert counts == {1: 1, 2: 2, 3: 3, 4: 3, 8: 6, 16: 12, 64: 16}
    assert parallel_copy.default_count(16, parallel_copy.MAX_THREADS) == 4


def test_an_exception_raised_in_the_caller_mid_copy_waits_for_every_slice():
    """ComfyUI's interrupt reaches a worker's main thread as an exception at any bytecode; the
    caller may unmap the destination once copy() returns, so no slice may still be running.
    The caller's own slice raises while the copy thread's is held; that one is let go only once
    the caller either waits on the copy's condition or has left copy()."""
    run("""
        import ctypes
        held, release, finished, settled = (threading.Event() for _ in range(4))
        in_own_slice, interrupt_sent = threading.Event(), threading.Event()
        real_slice = parallel_copy._copy_slice
        def held_slice(index, *args):
            real_slice(index, *args)
            if index == 1:
                held.set()
                release.wait()
                finished.set()
            else:
                in_own_slice.set()
                interrupt_sent.wait()
                for _ in range(100):  # bytecode: the pending interrupt is raised here
                    pass
        parallel_copy._copy_slice = held_slice
        main = threading.get_ident()
        condition = parallel_copy._threads_here()._changed
        real_wait = condition.wait
        def noted_wait(*args):
            if threading.get_ident() == main:
                settled.set()  # the copy thread's notify needs the lock this wait gives up
            return real_wait(*args)
        condition.wait = noted_wait
        def interrupt():
            held.wait()
            in_own_slice.wait()
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main),
                                                       ctypes.py_object(KeyboardInterrupt))
            interrupt_sent.set()
            settled.wait()
            release.set()
        threading.Thread(target=interrupt).start()
        source, destination = interrupted_copy(4 * parallel_copy.MIN_SLICE)
        slice_done_at_return = finished.is_set()
        settled.set()
        assert slice_done_at_return, "copy() returned while a slice was still copying"
        assert destination[:] == source
    """, ISOHOST_COPY_THREADS="2")


def test_a_forked_child_copies_on_threads_of_its_own():
    run("""
        size = 4 * parallel_copy.MIN_SLICE
        source = random_bytes(size)
        destination = mapping(size)
        parallel_copy.copy(destination, memoryview(source))
        pid = os.fork()
        if pid == 0:
            try:
                source.reverse()
                parallel_copy.copy(destination, memoryview(source))
                ok = destination[:] == source and copy_threads() == ["isohost-copy-1"]
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
    """, ISOHOST_COPY_THREADS="2")


def test_an_interrupt_between_posting_a_copy_and_waking_its_threads_still_finishes_it():
    """An exception raised in the caller after the copy is posted but before its threads are
    woken: the wait wakes them itself and returns once their slice is copied; the exception
    comes after (the caller's own slice is abandoned with the copy)."""
    run("""
        threads = parallel_copy._threads_here()
        condition = threads._changed
        real_notify = condition.notify_all
        calls = []
        def interrupted_once():
            calls.append(threading.current_thread().name)
            if len(calls) == 1:
                raise KeyboardInterrupt
            real_notify()
        condition.notify_all = interrupted_once
        size = 4 * parallel_copy.MIN_SLICE
        source, destination = interrupted_copy(size)
        assert threads._job.finished()
        half = size // 2
        assert destination[half:] == source[half:]  # the copy thread's slice, done before
        assert calls[:2] == ["MainThread", "MainThread"], calls
    """, ISOHOST_COPY_THREADS="2")


def test_a_copy_goes_on_with_the_threads_the_system_allows():
    run("""
        real_start = threading.Thread.start
        def one_thread_only(thread):
            if copy_threads():
                raise RuntimeError("can't start new thread")
            real_start(thread)
        threading.Thread.start = one_thread_only
        size = 8 * parallel_copy.MIN_SLICE
        source = random_bytes(size)
        destination = mapping(size)
        parallel_copy.copy(destination, memoryview(source))
        assert destination[:] == source
        assert copy_threads() == ["isohost-copy-1"] and parallel_copy._threads_here().count == 2
        source.reverse()
        parallel_copy.copy(destination, memoryview(source))  # no new try: two slices again
        assert destination[:] == source
    """, ISOHOST_COPY_THREADS="4")
