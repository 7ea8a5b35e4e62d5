"""Sleep and wake (python/isohost_worker/sleep.py, docs/sleep.md).

The mechanism is device-generic; this machine has no GPU, so the in-process tests run it on CPU
tensors with the "cpu" stand-in (plain staging, no streams), and the worker tests check what the
`sleep` and `wake` ops answer where there is no CUDA, and a real worker put to sleep with the
stand-in. While asleep a tensor has no memory behind it: these tests only look at storage sizes
then, never at values.
"""

import errno
import gc
import os
import re
import threading
import warnings

import pytest
import torch

from conftest import live
from isohost_worker import populate, sleep

KIB = 1024
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def awake():
    """Every test starts and ends with this process awake, whatever it broke."""
    assert not sleep.is_asleep()
    yield
    if sleep.is_asleep():
        sleep.wake_storages()


def _make_closure(tensor):
    return lambda: tensor


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 32)
        self.register_buffer("running", torch.randn(100))


def _holders():
    """Every kind of holder sleep must bring back: parameters (with a gradient), a buffer, a
    view of a parameter, tensors in a dict and a list, one held only by a closure, one made
    under inference mode, and several dtypes."""
    model = _Model()
    model.linear.weight.sum().backward()
    with torch.inference_mode():
        inference = torch.randn(300)
    return {
        "model": model,
        "view": model.linear.weight[3:7],
        "dict": {"a": torch.randn(1000), "b": torch.arange(77, dtype=torch.int16)},
        "list": [torch.rand(5, 7, dtype=torch.float64), torch.ones(3, dtype=torch.bool)],
        "closure": _make_closure(torch.randn(129)),
        "inference": inference,
    }


def _tensors(holders):
    model = holders["model"]
    return [model.linear.weight, model.linear.bias, model.linear.weight.grad, model.running,
            holders["view"], holders["dict"]["a"], holders["dict"]["b"], holders["list"][0],
            holders["list"][1], holders["closure"](), holders["inference"]]


def _snapshot(tensors):
    return [t.detach().clone() for t in tensors]


def _assert_equal(tensors, expected):
    for t, e in zip(tensors, expected):
        assert torch.equal(t.detach(), e)


def _storage_sizes(tensors):
    return [t.untyped_storage().nbytes() for t in tensors]


def test_every_holder_comes_back_with_the_same_values_and_objects():
    holders = _holders()
    tensors = _tensors(holders)
    ids = [id(t) for t in tensors]
    expected = _snapshot(tensors)
    sizes = _storage_sizes(tensors)
    distinct = {sleep._key(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}
    assert len(distinct) == len(tensors) - 1  # the view shares the weight's storage

    receipt = sleep.sleep_storages("cpu")
    assert receipt["asleep"] is True
    assert _storage_sizes(tensors) == [0] * len(tensors)  # freed, not copied beside
    assert receipt["bytes"] >= sum(distinct.values())
    assert receipt["storages"] >= len(distinct)
    summary = sleep.summary()
    assert summary["bytes"] == receipt["bytes"] and summary["storages"] == receipt["storages"]

    woken = sleep.wake_storages()
    assert woken["woken"] is True
    assert (woken["bytes"], woken["storages"]) == (receipt["bytes"], receipt["storages"])
    assert sleep.summary() is None
    again = _tensors(holders)
    assert [id(t) for t in again] == ids
    assert holders["model"].linear.weight is tensors[0]
    assert _storage_sizes(again) == sizes
    _assert_equal(again, expected)
    # The view still views the parameter.
    holders["model"].linear.weight.data[4, 0] = 42.0
    assert holders["view"][1, 0].item() == 42.0


def test_receipt_fields():
    receipt = sleep.sleep_storages("cpu")
    assert set(receipt) == {"asleep", "bytes", "storages", "left_on_card", "reserved_before",
                            "reserved_after", "seconds", "find_seconds", "copy_seconds",
                            "free_seconds", "staging_bytes", "host_buffer", "minor_faults"}
    assert receipt["host_buffer"] in ("new", "kept") and receipt["minor_faults"] >= 0
    assert set(receipt["left_on_card"]) == {"storages", "bytes", "reasons"}
    assert receipt["reserved_before"] is None and receipt["reserved_after"] is None
    parts = [receipt[k] for k in ("find_seconds", "copy_seconds", "free_seconds")]
    assert all(p >= 0 for p in parts) and sum(parts) <= receipt["seconds"]
    assert receipt["staging_bytes"] == 2 * sleep.DEFAULT_STAGING_MIB * MIB
    woken = sleep.wake_storages()
    assert set(woken) == {"woken", "bytes", "storages", "seconds", "grow_seconds", "copy_seconds"}
    assert woken["grow_seconds"] + woken["copy_seconds"] <= woken["seconds"]


def test_shared_storage_is_moved_once():
    base = torch.randn(1000)
    sharers = [base[1:], base.view(10, 100), base[::2], base.untyped_storage()]
    key = sleep._key(base.untyped_storage())
    sleep.sleep_storages("cpu")
    entries = [(s, size) for s, size in sleep._asleep.entries() if sleep._key(s) == key]
    assert [size for _, size in entries] == [4000]
    sleep.wake_storages()
    assert torch.equal(sharers[1].flatten(), base)


def test_storages_are_held_not_tensors():
    # A tensor dropped while asleep must not take its storage's bytes with it.
    holder = {"t": torch.arange(1000, dtype=torch.float32)}
    view = holder["t"][10:20]
    sleep.sleep_storages("cpu")
    del holder["t"]
    gc.collect()
    sleep.wake_storages()
    assert torch.equal(view, torch.arange(10, 20, dtype=torch.float32))


def test_non_resizable_storage_is_left_and_reported():
    backing = bytearray(range(256)) * 32
    outside = torch.frombuffer(backing, dtype=torch.uint8)
    receipt = sleep.sleep_storages("cpu")
    left = receipt["left_on_card"]
    assert left["reasons"][sleep.NOT_RESIZABLE] >= len(backing)
    assert left["storages"] >= 1 and left["bytes"] >= len(backing)
    assert outside.untyped_storage().nbytes() == len(backing)  # not moved
    sleep.wake_storages()
    assert bytes(outside.tolist()) == bytes(backing)


def test_sparse_tensors_move_by_their_parts():
    dense = torch.zeros(20, 30)
    dense[3, 4], dense[7, 29], dense[19, 0] = 1.5, -2.0, 3.25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Sparse CSR tensor support is in beta state"
        coo, csr, csc = dense.to_sparse(), dense.to_sparse_csr(), dense.to_sparse_csc()
    receipt = sleep.sleep_storages("cpu")
    assert sleep.NO_STORAGE not in receipt["left_on_card"]["reasons"]
    assert coo._values().untyped_storage().nbytes() == 0
    assert csr.values().untyped_storage().nbytes() == 0
    assert csc.row_indices().untyped_storage().nbytes() == 0
    sleep.wake_storages()
    for sparse in (coo, csr, csc):
        assert torch.equal(sparse.to_dense(), dense)


def test_a_tensor_without_a_storage_is_reported():
    class Wrapper(torch.Tensor):
        """A wrapper subclass: no storage of its own, its data in an ordinary tensor."""

        @staticmethod
        def __new__(cls, inner):
            return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

        def __init__(self, inner):
            self.inner = inner

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError("a stand-in that runs no operator: %s" % func)

    wrapper = Wrapper(torch.randn(50))
    expected = wrapper.inner.clone()
    receipt = sleep.sleep_storages("cpu")
    assert receipt["left_on_card"]["reasons"][sleep.NO_STORAGE] == 0
    assert wrapper.inner.untyped_storage().nbytes() == 0  # its data moved all the same
    sleep.wake_storages()
    assert torch.equal(wrapper.inner, expected)


def test_a_failure_while_copying_out_frees_nothing(monkeypatch):
    holders = _holders()
    tensors = _tensors(holders)
    expected = _snapshot(tensors)
    sizes = _storage_sizes(tensors)
    real_gather = sleep._gather
    chunks = []

    def gather_then_fail(pieces, views, buffer):
        chunks.append(len(pieces))
        if len(chunks) == 2:
            raise RuntimeError("the copy fails on purpose")
        real_gather(pieces, views, buffer)

    monkeypatch.setattr(sleep, "_gather", gather_then_fail)
    with pytest.raises(sleep.SleepFailed, match="nothing was freed: RuntimeError: the copy fails"):
        sleep.sleep_storages("cpu", chunk_bytes=4 * KIB)
    assert len(chunks) == 2
    assert not sleep.is_asleep() and sleep.summary() is None
    assert _storage_sizes(tensors) == sizes
    _assert_equal(tensors, expected)
    monkeypatch.setattr(sleep, "_gather", real_gather)
    assert sleep.sleep_storages("cpu")["asleep"] is True  # and it can sleep afterwards
    sleep.wake_storages()
    _assert_equal(tensors, expected)


def test_a_failure_while_freeing_puts_everything_back(monkeypatch):
    tensors = _tensors(_holders())
    expected = _snapshot(tensors)
    real_shrink = sleep._shrink
    failures = []

    def shrink_half_then_fail(storages):
        if failures:
            return real_shrink(storages)
        failures.append(True)
        real_shrink(storages[:len(storages) // 2])
        raise RuntimeError("resize_(0) fails on purpose")

    monkeypatch.setattr(sleep, "_shrink", shrink_half_then_fail)
    with pytest.raises(RuntimeError, match="resize_.0. fails on purpose"):
        sleep.sleep_storages("cpu")
    assert not sleep.is_asleep()
    _assert_equal(tensors, expected)


def test_a_wake_that_cannot_grow_a_storage_stays_asleep_and_a_retry_works(monkeypatch):
    tensors = _tensors(_holders())
    expected = _snapshot(tensors)
    sleep.sleep_storages("cpu")
    real_resize = sleep._resize
    grown = []

    def resize_until_full(storage, nbytes):
        if len(grown) == 3:
            raise torch.OutOfMemoryError("no room on the card, on purpose")
        real_resize(storage, nbytes)
        grown.append(storage)

    monkeypatch.setattr(sleep, "_resize", resize_until_full)
    with pytest.raises(sleep.WakeFailed, match=r"\(3 were back when it failed\); the worker is "
                       r"still asleep, nothing is lost: torch.OutOfMemoryError: no room"):
        sleep.wake_storages()
    assert sleep.is_asleep()
    assert all(s.nbytes() == 0 for s in sleep._asleep.storages())  # the 3 shrunk again
    monkeypatch.setattr(sleep, "_resize", real_resize)
    assert sleep.wake_storages()["woken"] is True
    _assert_equal(tensors, expected)


def test_a_wake_whose_copy_fails_stays_asleep_and_a_retry_works(monkeypatch):
    tensors = _tensors(_holders())
    expected = _snapshot(tensors)
    sleep.sleep_storages("cpu", chunk_bytes=4 * KIB)
    real_scatter = sleep._scatter
    calls = []

    def scatter_then_fail(pieces, views, buffer):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the copy in fails on purpose")
        real_scatter(pieces, views, buffer)

    monkeypatch.setattr(sleep, "_scatter", scatter_then_fail)
    with pytest.raises(sleep.WakeFailed, match="still asleep: RuntimeError: the copy in fails"):
        sleep.wake_storages()
    assert sleep.is_asleep()
    assert all(s.nbytes() == 0 for s in sleep._asleep.storages())
    monkeypatch.setattr(sleep, "_scatter", real_scatter)
    sleep.wake_storages()
    _assert_equal(tensors, expected)


def test_fifty_cycles_lose_nothing_and_reuse_the_staging():
    holders = _holders()
    tensors = _tensors(holders)
    staging = None
    for cycle in range(50):
        with torch.no_grad():
            holders["model"].linear.weight.add_(1.0)
            holders["dict"]["a"].mul_(-1.0)
        expected = _snapshot(tensors)
        assert sleep.sleep_storages("cpu", chunk_bytes=8 * KIB)["asleep"] is True
        staging = staging or sleep._staging
        assert sleep._staging is staging, "the staging area was made again in cycle %d" % cycle
        assert sleep.wake_storages()["woken"] is True
        _assert_equal(tensors, expected)


@pytest.mark.parametrize("chunk", [1000, 4096 + 7, 64 * KIB])
def test_storages_larger_and_smaller_than_the_chunk(chunk):
    sizes = [1, 3, 511, 512, 513, 999, 1000, 1001, 5000, 100003]
    tensors = [torch.randint(0, 256, (n,), dtype=torch.uint8) for n in sizes]
    expected = _snapshot(tensors)
    receipt = sleep.sleep_storages("cpu", chunk_bytes=chunk)
    assert receipt["staging_bytes"] == 2 * chunk
    assert receipt["bytes"] >= sum(sizes)
    sleep.wake_storages()
    _assert_equal(tensors, expected)


class _FakeGroup:
    def __init__(self, sizes):
        self.storages = sizes
        self.sizes = sizes
        self.offsets = []
        position = 0
        for size in sizes:
            position = sleep._aligned(position)
            self.offsets.append(position)
            position += size
        self.start, self.end = 0, position


@pytest.mark.parametrize("chunk", [1, 100, 512, 1000, 4096, 1 << 20])
def test_chunks_cover_every_byte_once_in_order(chunk):
    group = _FakeGroup([1, 3, 511, 512, 513, 999, 1000, 1001, 5000, 12345])
    covered = [[] for _ in group.sizes]
    position = group.start
    for start, length, pieces in sleep._chunks(group, chunk):
        assert start == position and 0 < length <= chunk
        position += length
        for index, at, size, into in pieces:
            assert size > 0 and 0 <= into and into + size <= length
            assert start + into == group.offsets[index] + at  # the staging mirrors the host
            covered[index].append((at, size))
    assert position == group.end
    for index, spans in enumerate(covered):
        offset = 0
        for at, size in spans:
            assert at == offset
            offset += size
        assert offset == group.sizes[index]


def test_a_live_cuda_graph_moves_nothing(monkeypatch):
    class FakeGraph:
        pass

    monkeypatch.setattr(sleep, "_graph_types", lambda torch: (FakeGraph,))
    graphs = [FakeGraph(), FakeGraph()]
    tensor = torch.randn(100)
    receipt = sleep.sleep_storages("cpu")
    assert receipt["asleep"] is False
    assert receipt["reason"].startswith("a CUDA graph is alive (2 torch.cuda.CUDAGraph objects")
    assert not sleep.is_asleep() and tensor.untyped_storage().nbytes() == 400
    del graphs


def test_already_asleep():
    sleep.sleep_storages("cpu")
    assert sleep.sleep_storages("cpu") == {"asleep": False, "reason": "already asleep"}
    sleep.wake_storages()
    assert sleep.wake_storages() == {"woken": False, "reason": "not asleep"}


def test_staging_chunk_from_the_environment(monkeypatch):
    monkeypatch.setenv(sleep.STAGING_ENV, "1")
    assert sleep.sleep_storages("cpu")["staging_bytes"] == 2 * MIB
    sleep.wake_storages()
    for bad in ("0", "-3", "1.5", "lots"):
        monkeypatch.setenv(sleep.STAGING_ENV, bad)
        with pytest.raises(ValueError, match="ISOHOST_SLEEP_STAGING_MIB=%r" % bad):
            sleep.sleep_storages("cpu")
        assert not sleep.is_asleep()


@pytest.mark.parametrize("threads", ["0", "1", "3"])
def test_faulting_ahead_or_not_brings_the_same_bytes_back(monkeypatch, threads):
    monkeypatch.setenv(populate.THREADS_ENV, threads)
    tensors = [torch.randint(0, 256, (n,), dtype=torch.uint8) for n in (5000, 3 * MIB + 1, 100003)]
    expected = _snapshot(tensors)
    receipt = sleep.sleep_storages("cpu", chunk_bytes=MIB)
    assert receipt["asleep"] is True
    if threads == "0":
        assert "populate" not in receipt
    else:
        assert receipt["populate"] == {"threads": int(threads), "stopped_because": None}
    assert [t for t in threading.enumerate() if t.name.startswith("isohost-populate-")] == []
    sleep.wake_storages()
    _assert_equal(tensors, expected)


def test_a_kernel_that_will_not_fault_ahead_is_named_in_the_receipt(monkeypatch):
    monkeypatch.setenv(populate.THREADS_ENV, "2")
    monkeypatch.setattr(populate, "MADV_POPULATE_WRITE", -1)  # advice no kernel knows: EINVAL
    tensor = torch.randint(0, 256, (3 * MIB,), dtype=torch.uint8)
    expected = _snapshot([tensor])
    receipt = sleep.sleep_storages("cpu", chunk_bytes=MIB)
    assert receipt["populate"] == {"threads": 2, "stopped_because": os.strerror(errno.EINVAL)}
    sleep.wake_storages()
    _assert_equal([tensor], expected)


def test_a_bad_thread_count_fails_the_sleep_before_it_starts(monkeypatch):
    monkeypatch.setenv(populate.THREADS_ENV, "many")
    tensor = torch.randn(100)
    with pytest.raises(ValueError, match="ISOHOST_SLEEP_POPULATE_THREADS='many'"):
        sleep.sleep_storages("cpu")
    assert not sleep.is_asleep() and tensor.untyped_storage().nbytes() == 400


def test_other_device_types_are_refused():
    with pytest.raises(ValueError, match="not 'xpu'"):
        sleep.sleep_storages("xpu")


# --- through real worker processes -------------------------------------------------------

STAGES = "isohost_worker.stages:"


def test_sleep_without_torch_imported(worker):
    reply = worker.request("sleep")
    assert reply["value"] == {"asleep": False, "reason": "torch is not imported"}
    assert worker.request("memory")["value"]["torch_imported"] is False


def test_sleep_with_torch_but_no_cuda(worker):
    worker.value(STAGES + "import_module", "torch")
    reply = worker.request("sleep")
    assert reply["value"] == {"asleep": False, "reason": "CUDA is not initialised in this worker"}
    assert worker.request("memory")["value"]["cuda_initialized"] is False


def test_a_worker_with_threads_of_its_own_does_not_sleep(worker):
    # They could launch kernels on what sleep frees: the host hibernates it by the driver alone.
    worker.value(STAGES + "import_module", "torch")
    worker.value("isohost_sleep_funcs:start_thread")
    reply = worker.request("sleep")["value"]
    assert reply["asleep"] is False
    assert reply["reason"].startswith("1 thread of its own is alive (pack-background)")
    worker.value("isohost_sleep_funcs:stop_thread")
    assert worker.request("sleep")["value"]["reason"] == "CUDA is not initialised in this worker"


def test_wake_when_not_asleep(worker):
    assert worker.request("wake")["value"] == {"woken": False, "reason": "not asleep"}


def test_memory_report_says_awake(worker):
    assert worker.request("memory")["value"]["asleep"] is None


def test_ops_are_advertised(worker):
    assert {"sleep", "wake"} <= set(worker.hello["capabilities"])


def test_a_worker_asleep_on_the_stand_in(worker):
    held = worker.value(STAGES + "hold_model", MIB, 40, "cpu")
    fingerprint = worker.value(STAGES + "model_fingerprint")
    checksum = worker.value(STAGES + "model_checksum")
    assert checksum["tensors"] == fingerprint["tensors"] == 41  # the 40 pieces and the view

    receipt = worker.value("isohost_sleep_funcs:sleep_on_cpu", 64 * KIB)
    assert receipt["asleep"] is True and receipt["bytes"] >= held["bytes"]
    asleep = worker.request("memory")["value"]["asleep"]
    assert (asleep["bytes"], asleep["storages"]) == (receipt["bytes"], receipt["storages"])
    assert asleep["seconds_asleep"] >= 0
    assert worker.request("sleep")["value"] == {"asleep": False, "reason": "already asleep"}

    woken = worker.request("wake")["value"]
    assert woken["woken"] is True and woken["bytes"] == receipt["bytes"]
    assert worker.request("memory")["value"]["asleep"] is None
    assert worker.value(STAGES + "model_fingerprint") == fingerprint
    assert worker.value(STAGES + "model_checksum") == checksum


def test_torchs_import_is_frozen_and_the_walk_still_finds_what_was_frozen(worker):
    # The worker's own runtime froze nothing; importing torch (in a call) freezes its objects.
    assert worker.value("isohost_sleep_funcs:frozen_objects") == 0
    worker.value(STAGES + "hold_model", 256 * KIB, 4, "cpu")
    assert worker.value("isohost_sleep_funcs:frozen_objects") > 10000
    sums = worker.value("isohost_sleep_funcs:freeze_a_tensor_and_a_parameter")
    assert sums == [float(sum(range(1 << 16))), 7.0 * (1 << 15)]
    fingerprint = worker.value(STAGES + "model_fingerprint")
    receipt, sizes = worker.value("isohost_sleep_funcs:sleep_on_cpu_with_frozen_sizes")
    assert receipt["asleep"] is True and sizes == [0, 0], (receipt, sizes)
    assert worker.request("wake")["value"]["woken"] is True
    assert worker.value("isohost_sleep_funcs:frozen_sums") == sums
    assert worker.value(STAGES + "model_fingerprint") == fingerprint


def test_a_call_wakes_a_sleeping_worker_first(worker):
    worker.value(STAGES + "hold_model", 256 * KIB, 10, "cpu")
    fingerprint = worker.value(STAGES + "model_fingerprint")
    assert worker.value("isohost_sleep_funcs:sleep_on_cpu")["asleep"] is True
    assert worker.value(STAGES + "model_fingerprint") == fingerprint
    assert worker.request("memory")["value"]["asleep"] is None
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    assert "a call arrived while this worker was asleep; waking it first" in worker.stderr()


def test_a_release_wakes_a_sleeping_worker_first(worker):
    # Its callbacks are user code, which must never find tensors without memory behind them.
    worker.value(STAGES + "hold_model", 256 * KIB, 10, "cpu")
    fingerprint = worker.value(STAGES + "model_fingerprint")
    assert worker.value("isohost_sleep_funcs:sleep_on_cpu")["asleep"] is True
    assert worker.request("release")["ok"] is True
    assert worker.request("memory")["value"]["asleep"] is None
    assert worker.value(STAGES + "model_fingerprint") == fingerprint
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    stderr = worker.stderr()
    assert "a release arrived while this worker was asleep; waking it first" in stderr
    assert "a call arrived" not in stderr


def _lazy_free_bytes():
    """LazyFree of this process (smaps_rollup): resident pages given back with MADV_FREE."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("LazyFree:"):
                return int(line.split()[1]) * KIB
    pytest.skip("this kernel's smaps_rollup has no LazyFree line")


def test_the_next_sleep_rewrites_the_last_wakes_buffer():
    model = torch.randn(8 * MIB // 4)  # 8 MiB of float32
    expected = model.clone()
    lazy_before = _lazy_free_bytes()
    assert sleep.sleep_storages("cpu")["asleep"] is True
    first = sleep._asleep.host
    assert sleep.wake_storages()["woken"] is True
    assert torch.equal(model, expected)
    # Kept for the next sleep, its pages the kernel's to take back.
    assert sleep._kept is first and first.capacity >= model.nbytes
    assert _lazy_free_bytes() - lazy_before >= model.nbytes // 2
    with torch.no_grad():
        model.mul_(-1.0)
    expected = model.clone()
    receipt = sleep.sleep_storages("cpu")
    assert receipt["asleep"] is True and not receipt["left_on_card"]["storages"]
    assert sleep._asleep.host is first and sleep._kept is None
    assert sleep.wake_storages()["woken"] is True
    assert torch.equal(model, expected)


def test_a_larger_sleep_maps_a_new_buffer_and_a_release_leaves_it():
    from isohost_worker import memory

    small = torch.randn(MIB // 4)
    assert sleep.sleep_storages("cpu")["asleep"] is True
    assert sleep.wake_storages()["woken"] is True
    kept = sleep._kept
    large = torch.randn(16 * MIB // 4)
    expected = (small.clone(), large.clone())
    assert sleep.sleep_storages("cpu")["asleep"] is True
    assert sleep._asleep.host is not kept and kept._map is None  # unmapped, not kept beside
    assert sleep.wake_storages()["woken"] is True
    assert torch.equal(small, expected[0]) and torch.equal(large, expected[1])
    kept = sleep._kept
    assert kept.capacity >= large.nbytes
    # Its pages are the kernel's already: a release gives nothing back by unmapping them.
    memory.release()
    assert sleep._kept is kept and kept._map is not None
    sleep.drop_kept()


# --- the host buffer prepared while the worker idles (sleep_prepare.py) ---------------------

def _stand_in(spawn, after):
    # A staging area of 2 MiB, whose pages the first sleep faults in too.
    return spawn(environ={"ISOHOST_SLEEP_CPU_STAND_IN": "1", "ISOHOST_SLEEP_PREPARE_AFTER_S": after,
                          "ISOHOST_SLEEP_STAGING_MIB": "1"})


def _sleep_buffer(worker):
    return worker.request("memory")["value"]["sleep_buffer"]


def _wait_for_buffer(worker, *states):
    """The worker's sleep_buffer report once its state is one of `states` (the preparer's
    thread sets it; the report, on the side lane, is how it says so from outside)."""
    reports = []

    def settled():
        reports.append(_sleep_buffer(worker))
        return reports[-1]["state"] in states

    live.wait_for(settled, 60, "the sleep_buffer state to be one of %s" % (states,))
    return reports[-1]


def _sleep_and_wake(worker, fingerprint):
    receipt = worker.request("sleep")["value"]
    assert receipt["asleep"] is True, receipt
    assert worker.request("wake")["value"]["woken"] is True
    assert worker.value(STAGES + "model_fingerprint") == fingerprint
    return receipt


def test_an_idle_worker_faults_its_first_sleeps_buffer_in_and_the_sleep_takes_no_faults(spawn):
    cold, warm = _stand_in(spawn, "off"), _stand_in(spawn, "0")
    receipts = []
    for worker in (cold, warm):
        held = worker.value(STAGES + "hold_model", 128 * MIB, 8, "cpu")
        fingerprint = worker.value(STAGES + "model_fingerprint")
        # A first sleep faults in what any first sleep does (the staging area, the copies'
        # own first use); then the host buffer is dropped, and that call arms the preparer.
        _sleep_and_wake(worker, fingerprint)
        assert worker.value("isohost_sleep_funcs:drop_kept") is None
        if worker is warm:
            report = _wait_for_buffer(worker, "ready", "skipped")
            assert report["state"] == "ready", report
            assert report["faulted"] >= report["need"] >= held["bytes"], report
            assert report["capacity"] >= report["need"]
        receipts.append(_sleep_and_wake(worker, fingerprint))
    assert _sleep_buffer(cold)["state"] == "off"
    assert _sleep_buffer(cold)["because"] == "ISOHOST_SLEEP_PREPARE_AFTER_S=off"
    # Kept after the wake: the next sleep finds it as any wake's buffer.
    receipts.append(_sleep_and_wake(warm, fingerprint))
    assert [r["host_buffer"] for r in receipts] == ["new", "prepared", "kept"]
    # A new buffer faults each of its 64 huge (or 32768 small) pages in during the copy; the
    # prepared one was faulted in before, as the kept one was by the sleep before.
    new, prepared, kept = (r["minor_faults"] for r in receipts)
    assert new >= kept + 64 and prepared <= kept + 16, (new, prepared, kept)


def test_an_interrupted_preparation_goes_on_from_where_it_stopped(spawn):
    from isohost_worker import sleep_prepare

    worker = _stand_in(spawn, "0")
    worker.value(STAGES + "hold_model", 160 * MIB, 4, "cpu")
    ready = _wait_for_buffer(worker, "ready")
    # A release leaves it (its pages are the kernel's already) and arms nothing.
    assert worker.request("release")["ok"] is True
    assert _sleep_buffer(worker) == ready
    # Dropped, then faulted in for two chunks, as an op arriving then leaves it.
    need, faulted = worker.value("isohost_sleep_funcs:fault_in_part_of_a_prepared_buffer", 2)
    assert faulted == 2 * sleep_prepare.CHUNK < need
    # That call ended: the preparer takes the rest.
    report = _wait_for_buffer(worker, "ready")
    assert report["faulted"] == report["need"] == need <= report["capacity"], report
    fingerprint = worker.value(STAGES + "model_fingerprint")
    assert _sleep_and_wake(worker, fingerprint)["host_buffer"] == "prepared"


def test_the_preparer_sleeps_through_calls_that_come_before_its_idle_time(spawn):
    # Its idle time is an hour: no call's idle time comes due. The first call's end wakes the
    # thread from its wait for a call; the next hundred calls, each ending an idle time that has
    # a deadline already, wake it no more.
    worker = _stand_in(spawn, "3600")
    worker.value(STAGES + "hold_model", MIB, 4, "cpu")
    _wait_for_buffer(worker, "waiting")
    before = worker.value("isohost_sleep_funcs:thread_wakes", "isohost-sleep-prepare")
    for _ in range(100):
        assert worker.value("isohost_test_funcs:add", 1, 2) == 3
    after = worker.value("isohost_sleep_funcs:thread_wakes", "isohost-sleep-prepare")
    assert after - before <= 2, (before, after)
    # Waited for: the side lane may answer before the main lane has marked the last call's end.
    _wait_for_buffer(worker, "waiting")


def test_a_worker_without_torch_starts_no_preparer(worker):
    assert worker.value("isohost_test_funcs:add", 1, 2) == 3
    assert _sleep_buffer(worker) == {"state": "idle", "because": None, "need": 0, "capacity": 0,
                                     "faulted": 0}
    assert "isohost-sleep-prepare" not in worker.value("isohost_sleep_funcs:thread_names")


@pytest.mark.parametrize("after", ["soon", "-1", "nan"])
def test_a_bad_idle_time_turns_preparing_off_and_says_why(spawn, after):
    worker = _stand_in(spawn, after)
    worker.value(STAGES + "hold_model", MIB, 4, "cpu")
    # The main thread reads the setting once the call's reply is sent: the report, on the side
    # lane, may come first.
    report = _wait_for_buffer(worker, "off")
    assert report["because"].startswith("ISOHOST_SLEEP_PREPARE_AFTER_S=%r: " % after)
    fingerprint = worker.value(STAGES + "model_fingerprint")
    assert _sleep_and_wake(worker, fingerprint)["host_buffer"] == "new"
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    assert "not preparing sleeps' host buffers: ISOHOST_SLEEP_PREPARE_AFTER_S" in worker.stderr()


def test_too_little_ram_left_skips_the_preparation_and_says_how_much(spawn):
    worker = _stand_in(spawn, "0")
    worker.value("isohost_sleep_funcs:keep_all_ram_available")
    worker.value(STAGES + "hold_model", 8 * MIB, 4, "cpu")
    report = _wait_for_buffer(worker, "skipped")
    assert report["capacity"] == 0, report
    assert re.fullmatch(r"\d+ MiB would leave \d+ of the machine's \d+ MiB available, under a "
                        r"quarter", report["because"]), report
    fingerprint = worker.value(STAGES + "model_fingerprint")
    assert _sleep_and_wake(worker, fingerprint)["host_buffer"] == "new"
