"""1000 calls with 16 MiB arrays each way leave no descriptor and no mapping behind, in the host
process or in the worker."""

import gc

import numpy as np

from conftest import descriptor_count, mapping_count

MIB = 1 << 20


def worker_counts(host):
    return (host.call("w", "isohost_value_funcs:open_descriptors"),
            host.call("w", "isohost_value_funcs:mapping_count"))


def test_thousand_calls_with_16_mib_arrays_leave_nothing_behind(host):
    array = np.arange(4 * MIB, dtype=np.float32)  # 16 MiB
    for _ in range(10):  # warm: imports, arenas, spare buffers
        host.call("w", "isohost_value_funcs:echo", array)
    gc.collect()
    host_before = descriptor_count(), mapping_count()
    worker_before = worker_counts(host)
    for i in range(1000):
        result = host.call("w", "isohost_value_funcs:echo", array)
        assert result.nbytes == 16 * MIB and result[i] == i
    del result
    gc.collect()
    assert (descriptor_count(), mapping_count()) == host_before
    assert worker_counts(host) == worker_before
