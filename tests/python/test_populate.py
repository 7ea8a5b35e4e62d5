"""isohost_worker.populate: threads fault a fresh mapping in ahead of a copy, read back from the
kernel's own count of the mapping's resident pages (/proc/self/smaps)."""

import ctypes
import mmap
import threading

import pytest

from isohost_worker import populate

MIB = 1 << 20


def resident_bytes(address):
    """Rss of the mapping that starts at `address`, from /proc/self/smaps."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == address
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("no mapping at %#x" % address)


def address_of(mapping):
    view = (ctypes.c_char * 1).from_buffer(mapping)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def populate_threads():
    return [t for t in threading.enumerate() if t.name.startswith("isohost-populate-")]


@pytest.mark.parametrize("threads", [1, 3])
def test_every_chunk_is_resident_once_ready(threads):
    mapping = mmap.mmap(-1, 8 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = address_of(mapping)
    assert resident_bytes(address) == 0
    populator = populate.Populator(address, 8 * MIB, MIB, threads)
    populator.ready(0, 3 * MIB)
    assert resident_bytes(address) >= 3 * MIB
    populator.ready(3 * MIB, 5 * MIB)
    assert resident_bytes(address) == 8 * MIB
    populator.close()
    assert populator.stopped_because is None
    assert populate_threads() == []
    mapping.close()


def test_a_range_the_kernel_cannot_fault_in_stops_the_threads_and_frees_the_waiters():
    # Made read-only: faulting it in for writing is refused (EFAULT), as an old kernel refuses
    # the advice itself (EINVAL); either way the copy must not wait forever.
    mapping = mmap.mmap(-1, 4 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = address_of(mapping)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(address, 4 * MIB, mmap.PROT_READ) == 0, ctypes.get_errno()
    populator = populate.Populator(address, 4 * MIB, MIB, 2)
    populator.ready(0, 4 * MIB)
    populator.close()
    assert populator.stopped_because  # the errno's words, for the log
    assert resident_bytes(address) == 0
    assert populate_threads() == []
    mapping.close()


def test_close_before_the_end_joins_every_thread():
    mapping = mmap.mmap(-1, 64 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    populator = populate.Populator(address_of(mapping), 64 * MIB, MIB, 2)
    populator.close()
    assert populate_threads() == []
    assert populator.stopped_because is None
    mapping.close()


def test_threads_from_the_environment(monkeypatch):
    monkeypatch.delenv(populate.THREADS_ENV, raising=False)
    assert populate.threads_wanted() == 0
    monkeypatch.setenv(populate.THREADS_ENV, "0")
    assert populate.threads_wanted() == 0
    monkeypatch.setenv(populate.THREADS_ENV, " 6 ")
    assert populate.threads_wanted() == 6
    for bad in ("-1", "two", "1.5"):
        monkeypatch.setenv(populate.THREADS_ENV, bad)
        with pytest.raises(ValueError, match="ISOHOST_SLEEP_POPULATE_THREADS=%r" % bad):
            populate.threads_wanted()
