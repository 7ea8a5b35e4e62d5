"""Round trips through a real worker: what goes in comes back equal, of the same type."""

import asyncio
import hashlib
import os
import threading

import numpy as np
import pytest
import torch

import isohost

MIB = 1 << 20


def echo(host, value):
    return host.call("w", "isohost_value_funcs:echo", value)


def test_json_call_is_unchanged(host):
    assert host.call("w", "isohost_test_funcs:add", 2, 3) == 5
    assert host.call("w", "isohost_test_funcs:kwargs_echo", a=1, b=[None, "x"]) == {"a": 1, "b": [None, "x"]}


def test_plain_json_dicts_keep_their_key_order(host):
    # Plain JSON crosses as JSON through the C++ core, which keeps an object's keys in the
    # order they came (nlohmann::ordered_json), both ways and nested, as a Python dict does.
    value = {"zeta": 1, "alpha": {"y": [{"b": 2, "a": 1}], "x": None}, "mid": "m"}
    result = echo(host, value)
    assert result == value
    assert list(result) == ["zeta", "alpha", "mid"]
    assert list(result["alpha"]) == ["y", "x"]
    assert list(result["alpha"]["y"][0]) == ["b", "a"]
    kwargs = host.call("w", "isohost_test_funcs:kwargs_echo", z=1, a=2, m=3)
    assert list(kwargs) == ["z", "a", "m"]


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, None, True, "é"], "b": {"c": []}},
    (1, (2, 3)),
    {1: "int key", (2, 3): "tuple key"},
    {"s": {1, 2}, "f": frozenset("ab"), "c": 1 + 2j, "big": 1 << 100, "nan_free": 1e308},
    [b"small bytes", bytearray(b"small bytearray")],
])
def test_nested_values_round_trip(host, value):
    result = echo(host, value)
    assert result == value
    assert type(result) is type(value)


def test_shared_references_stay_shared(host):
    inner = [1, 2]
    a = np.ones(MIB, np.float32)
    result = echo(host, {"x": inner, "y": inner, "a": a, "b": a})
    assert result["x"] is result["y"]
    assert result["a"] is result["b"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint16,
                                   np.int64, np.bool_, np.complex64])
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (1 << 18,), (64, 128, 3)])
def test_arrays_of_dtypes_and_shapes(host, dtype, shape):
    a = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    result = echo(host, a)
    assert type(result) is np.ndarray
    assert result.dtype == a.dtype and result.shape == a.shape
    assert np.array_equal(result, a)


@pytest.mark.parametrize("view", [
    lambda a: a[::2],
    lambda a: a.T,
    lambda a: a[:, 3:-3:3],
    lambda a: a[::-1, ::2],
    lambda a: np.asfortranarray(a),
])
def test_non_contiguous_and_fortran_views(host, view):
    base = np.arange(512 * 384, dtype=np.float64).reshape(512, 384)
    v = view(base)
    result = echo(host, v)
    assert np.array_equal(result, v) and result.dtype == v.dtype


@pytest.mark.parametrize("size", [(512, 384), (16, 8)], ids=["out-of-band", "in-the-stream"])
def test_a_transposed_array_crosses_with_its_layout_both_ways(host, size):
    hwc = np.arange(size[0] * size[1] * 3, dtype=np.float32).reshape(*size, 3)
    view = hwc.transpose(2, 0, 1)
    assert host.call("w", "isohost_value_funcs:layout", view) == {
        "strides": list(view.strides), "contiguous": False}
    back = host.call("w", "isohost_value_funcs:chw", hwc)
    assert back.strides == view.strides and np.array_equal(back, view)
    assert back.flags.writeable
    # Reversed axes have no C-ordered array to go as: they go as a contiguous copy.
    reversed_ = hwc[::-1].transpose(2, 0, 1)
    got = echo(host, reversed_)
    assert got.flags.c_contiguous and np.array_equal(got, reversed_)


def test_large_arrays_are_writable_and_private(host):
    a = np.arange(4 * MIB, dtype=np.float32)
    result = echo(host, a)
    assert result.flags.writeable
    result[0] = -1
    assert a[0] == 0 and echo(host, result)[0] == -1


def test_read_only_arrays_stay_read_only(host):
    a = np.arange(MIB, dtype=np.float32)
    a.flags.writeable = False
    result = echo(host, a)
    assert not result.flags.writeable and np.array_equal(result, a)


def test_worker_computes_on_a_received_array(host):
    a = np.arange(2 * MIB, dtype=np.float32)
    assert np.array_equal(host.call("w", "isohost_value_funcs:scale", a, 2.0), a * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                   torch.int64, torch.uint8, torch.bool])
def test_torch_cpu_tensors(host, dtype):
    t = (torch.arange(3 * 100_000) % 5).to(dtype).reshape(3, 100_000)
    result = echo(host, t)
    assert type(result) is torch.Tensor and result.dtype == dtype and result.shape == t.shape
    assert torch.equal(result, t)


def test_a_large_tensor_sent_again_is_copied_while_its_frame_travels(host, monkeypatch):
    """From its second crossing a 12 MiB tensor goes into a spare, and its frame goes before
    the copy is done, both ways ("ready", docs/protocol.md): what arrives is still whole."""
    from isohost_worker import values

    said_ready = {"sent": 0, "received": 0}
    encode, decode = values.encode, values.decode

    def recording_encode(value, peer=None, pipelined=False):
        encoded = encode(value, peer, pipelined)
        said_ready["sent"] += encoded.description.get("ready", False)
        return encoded

    def recording_decode(description, fds, peer=None):
        said_ready["received"] += description.get("ready", False)
        return decode(description, fds, peer)

    monkeypatch.setattr(values, "encode", recording_encode)
    monkeypatch.setattr(values, "decode", recording_decode)
    for round_ in range(12):
        image = torch.full((1024, 1024, 3), float(round_)) + torch.arange(3.0)
        result = host.call("w", "isohost_value_funcs:scale", image, 2.0)
        assert torch.equal(result, image * 2), "round %d" % round_
        del result
    assert said_ready["sent"] >= 10 and said_ready["received"] >= 10, said_ready


def test_torch_views_scalars_grad_and_empty(host):
    base = torch.arange(600_000, dtype=torch.float32).reshape(600, 1000)
    complex_base = base.view(torch.complex64)
    # Lazy conjugate and negative views arrive as the values they stand for.
    for t in [base[:, ::3], base.t(), torch.tensor(2.5), torch.zeros(0, 4),
              torch.ones(100_000, requires_grad=True), complex_base.conj(),
              torch._neg_view(base), complex_base.conj().t()]:
        result = echo(host, t)
        assert torch.equal(result.detach(), t.detach()) and result.shape == t.shape
        assert result.requires_grad == t.requires_grad
    computed = host.call("w", "isohost_value_funcs:scale", base, 3)
    assert torch.equal(computed, base * 3)


def test_a_permuted_tensor_crosses_with_its_strides_both_ways(host):
    """No contiguous copy on either side: the worker gets the host's layout, and the host the
    worker's node's, as a node in process would hand it on."""
    nchw = torch.rand(1, 3, 1024, 512)
    nhwc = nchw.permute(0, 2, 3, 1)
    assert host.call("w", "isohost_value_funcs:layout", nhwc) == {
        "strides": list(nhwc.stride()), "contiguous": False}
    back = host.call("w", "isohost_value_funcs:permuted", nchw)
    assert back.stride() == nhwc.stride() and torch.equal(back, nhwc)
    assert host.call("w", "isohost_value_funcs:layout", nchw[:, :, ::2]) == {
        "strides": [3 * 512 * 512, 512 * 512, 512, 1], "contiguous": True}


def test_large_bytes_bytearray_memoryview(host):
    data = hashlib.sha256(b"seed").digest() * (8 * MIB // 32)
    for value in [data, bytearray(data)]:
        result = echo(host, value)
        assert type(result) is type(value) and result == value
        seen = host.call("w", "isohost_value_funcs:describe", value)
        assert seen["type"] == type(value).__name__
        assert seen["sha256"] == hashlib.sha256(data).hexdigest()
    view = memoryview(bytearray(data)).cast("i", [len(data) // 64, 16])
    result = echo(host, view)
    assert type(result) is memoryview and result.format == "i" and result.shape == view.shape
    assert result.tobytes() == view.tobytes() and not result.readonly
    readonly = memoryview(data)[1000:2 * MIB]
    seen = host.call("w", "isohost_value_funcs:describe", readonly)
    assert seen == {"type": "memoryview", "nbytes": readonly.nbytes, "readonly": True,
                    "sha256": hashlib.sha256(readonly).hexdigest()}
    strided = memoryview(data)[::3]
    assert echo(host, strided).tobytes() == strided.tobytes()


def test_large_results_from_the_worker(host):
    result = host.call("w", "isohost_value_funcs:make_bytes", 32 * MIB, 7)
    assert type(result) is bytes and len(result) == 32 * MIB and result[::MIB] == b"\x07" * 32
    array = host.call("w", "isohost_value_funcs:float32_array", 4 * MIB)
    assert array.shape == (4 * MIB,) and array[-1] == 4 * MIB - 1


def test_cuda_tensor_arrives_on_cpu_with_a_warning_where_there_is_no_cuda(host):
    assert not torch.cuda.is_available()
    with pytest.warns(isohost.DeviceFallbackWarning, match="cuda:0"):
        t = host.call("w", "isohost_value_funcs:cuda_tensor_reduction", 1000)
    assert t.device.type == "cpu" and t.shape == (1000,) and not t.any()


def test_call_async(host):
    async def main():
        a = np.arange(MIB, dtype=np.float32)
        first, second = await asyncio.gather(
            host.call_async("w", "isohost_value_funcs:echo", a),
            host.call_async("other", "isohost_test_funcs:add", 1, 2))
        return a, first, second

    a, first, second = asyncio.run(main())
    assert np.array_equal(first, a) and second == 3


def test_reused_buffers_carry_each_new_value(host):
    """Spare memfds come back and are rewritten: every call must see its own data."""
    for i in range(12):
        a = np.full(4 * MIB, i, dtype=np.float32)
        result = echo(host, a)
        assert result[0] == i and result[-1] == i and np.array_equal(result, a)
        assert host.call("w", "isohost_value_funcs:describe", a.tobytes())["sha256"] == \
            hashlib.sha256(a.tobytes()).hexdigest()


def test_concurrent_calls_from_threads(host):
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        env = "w" if i % 2 else "other"
        a = np.full(2 * MIB, i, dtype=np.int32)
        return bool(np.array_equal(host.call(env, "isohost_value_funcs:echo", a), a))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(24)))


def test_more_buffers_than_a_frame_carries(host):
    arrays = [np.full(32 * 1024, i, dtype=np.int32) for i in range(100)]  # 128 KiB each
    result = echo(host, arrays)
    assert all(np.array_equal(r, a) for r, a in zip(result, arrays)) and len(result) == 100


def test_json_arguments_too_big_for_a_frame_go_pickled(host):
    big = ["x" * 1000] * 70_000  # 70 MB as JSON
    assert host.call("w", "isohost_test_funcs:echo", big) == big


def python_copy_threads():
    return [t for t in threading.enumerate() if t.name.startswith("isohost-copy")]


def test_the_host_copies_large_buffers_on_the_copy_library_and_so_does_its_fork():
    from isohost_worker import parallel_copy

    assert parallel_copy._library() is not None  # build/python/libisohost_copy.so
    source = np.random.default_rng(7).integers(0, 255, 9 << 20, dtype=np.uint8)
    destination = bytearray(source.nbytes)
    parallel_copy.copy(destination, source)
    assert destination == source.tobytes()
    assert python_copy_threads() == []  # the library's threads copied it
    child = os.fork()
    if child == 0:  # its parent's copy threads are not here: a hang would time the test out
        again = bytearray(source.nbytes)
        parallel_copy.copy(again, source)
        os._exit(0 if again == source.tobytes() and not python_copy_threads() else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_worker_copies_large_buffers_on_the_copy_library_beside_its_runtime(fresh_host):
    report = fresh_host.call("w", "isohost_value_funcs:copy_report", 9 << 20)
    assert report["library"] and report["equal"]
    assert report["python_threads"] == []
    assert report["started"] == report["count"] - 1  # the library's helpers, started by this copy


@pytest.mark.parametrize("named, warned", [("missing.so", True), ("", False)])
def test_a_copy_library_that_will_not_load_leaves_copies_to_python_threads(
        monkeypatch, tmp_path, named, warned):
    from isohost_worker import parallel_copy

    monkeypatch.setattr(parallel_copy, "_loaded", None)
    monkeypatch.setenv("ISOHOST_COPY_LIBRARY", str(tmp_path / named) if named else "")
    monkeypatch.setenv("ISOHOST_COPY_THREADS", "2")
    monkeypatch.setattr(parallel_copy, "_threads", None)  # a count read afresh
    source = bytearray(os.urandom(9 << 20))
    destination = bytearray(len(source))
    if warned:
        with pytest.warns(RuntimeWarning, match="cannot load the copy library .*missing.so"):
            parallel_copy.copy(destination, source)
    else:
        parallel_copy.copy(destination, source)
    assert parallel_copy._library() is None
    assert destination == source
    assert python_copy_threads()  # copied on Python threads
