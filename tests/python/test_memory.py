"""The `memory` report and the `release` receipt."""

import os

import pytest

F = "isohost_test_funcs:"
MIB = 1024 * 1024

REPORT_FIELDS = {"pid", "torch", "torch_imported", "cuda_initialized", "cuda_module_loading",
                 "device", "allocator", "release_can_free", "asleep", "sleep_buffer"}
RECEIPT_FIELDS = {"rss_before", "rss_after", "reserved_before", "reserved_after",
                  "gc_collected", "callbacks", "seconds"}


def test_memory_report_without_torch(worker):
    report = worker.request("memory")["value"]
    assert set(report) == REPORT_FIELDS
    assert report["pid"] == worker.pid
    assert report["torch"] == worker.hello["torch"]
    assert report["torch_imported"] is False
    assert report["cuda_initialized"] is False
    assert report["cuda_module_loading"] is None
    assert report["device"] is None and report["allocator"] is None
    assert report["asleep"] is None
    assert report["sleep_buffer"] == {"state": "idle", "because": None, "need": 0, "capacity": 0,
                                      "faulted": 0}


def test_memory_report_names_cuda_module_loading(spawn):
    w = spawn(environ={"CUDA_MODULE_LOADING": "LAZY"})
    assert w.request("memory")["value"]["cuda_module_loading"] == "LAZY"


def test_release_receipt_and_callback(worker):
    assert worker.value(F + "allocate_mb", 200) == 200
    receipt = worker.request("release")["value"]
    assert set(receipt) == RECEIPT_FIELDS
    assert receipt["callbacks"] == 1
    assert receipt["rss_before"] - receipt["rss_after"] > 150 * MIB, receipt
    assert receipt["reserved_before"] is None and receipt["reserved_after"] is None
    assert isinstance(receipt["gc_collected"], int) and receipt["gc_collected"] >= 0
    assert 0 <= receipt["seconds"] < 5
    assert worker.value(F + "allocated_mb") == 0


def test_rss_matches_proc(worker):
    receipt = worker.request("release")["value"]
    with open("/proc/%d/status" % worker.pid) as f:
        vm_rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    assert abs(receipt["rss_after"] - vm_rss) < 8 * MIB


def test_failing_callback_is_reported_and_does_not_fail_the_release(worker):
    assert worker.value(F + "register_failing_release_callback") is True
    worker.value(F + "allocate_mb", 50)
    reply = worker.request("release")
    assert reply["ok"], reply
    assert reply["value"]["callbacks"] == 2
    assert worker.value(F + "allocated_mb") == 0  # the other callback still ran
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    stderr = worker.stderr()
    assert "release callback" in stderr and "fails on purpose" in stderr


def test_torch_imported_on_cpu_never_initialises_cuda(worker):
    if worker.hello["torch"] is None:
        pytest.skip("torch is not installed")
    assert worker.value(F + "torch_version")
    for _ in range(2):
        report = worker.request("memory")["value"]
        assert report["torch_imported"] is True
        receipt = worker.request("release")["value"]
    assert worker.value(F + "cuda_initialized") is False
    assert report["cuda_initialized"] is False and report["allocator"] is None
    assert receipt["reserved_before"] is None


@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="no NVIDIA GPU")
def test_cuda_allocator_report_and_release(worker):
    if worker.hello["torch"] is None or not worker.value(F + "cuda_available"):
        pytest.skip("torch cannot use CUDA here")
    assert worker.request("memory")["value"]["cuda_initialized"] is False
    worker.value(F + "cuda_allocate_mb", 256)
    report = worker.request("memory")["value"]
    assert report["cuda_initialized"] is True and report["device"] == 0
    allocator = report["allocator"]
    assert allocator["allocated"] >= 256 * MIB
    assert allocator["reserved"] >= allocator["allocated"]
    assert allocator["peak_reserved"] >= allocator["reserved"]
    assert allocator["peak_allocated"] >= allocator["allocated"]
    worker.value(F + "cuda_drop_tensors")
    receipt = worker.request("release")["value"]
    assert receipt["reserved_before"] >= 256 * MIB
    assert receipt["reserved_after"] == 0


def test_hibernating_freezes_the_report_until_woken(worker):
    # A stand-in torch.cuda (fixtures_mod/isohost_fake_cuda_context) whose calls raise once the
    # process is "locked": the report while hibernated must not call them.
    worker.value("isohost_fake_cuda_context:open_context")
    before = worker.request("hibernating")["value"]
    assert before["cuda_initialized"] is True and before["allocator"]["reserved"] == 64 * MIB
    worker.value("isohost_fake_cuda_context:break_cuda")
    frozen = worker.request("memory")["value"]
    assert frozen == dict(before, hibernated=True)
    assert worker.request("woken")["value"] == {"pid": worker.pid}
    reply = worker.request("memory")
    assert reply["ok"] is False and "CUDA is locked" in reply["error"]["message"]


def test_hibernation_ops_are_advertised_on_the_side_lane(worker):
    assert {"hibernating", "woken"} <= set(worker.hello["capabilities"])


def test_sleep_and_wake_are_advertised(worker):
    assert {"sleep", "wake"} <= set(worker.hello["capabilities"])


def test_sleep_without_torch_moves_nothing(worker):
    # Sleep moves torch's storages (docs/sleep.md); tests/torch covers the rest of it.
    assert worker.request("sleep")["value"] == {"asleep": False, "reason": "torch is not imported"}
    assert worker.request("wake")["value"] == {"woken": False, "reason": "not asleep"}
    assert worker.request("memory")["value"]["asleep"] is None
    assert worker.value(F + "add", 2, 3) == 5
