"""1000 calls with 16 MiB arrays each way leave no descriptor and no mapping behind, in the host
process or in the worker."""

import numpy as np

from conftest import descriptor_count, mapping_count

MIB = 1 << 20


def counts(host):
    """(worker descriptors, worker mappings, host descriptors, host mappings)."""
    worker = (host.call("w", "isohost_value_funcs:open_descriptors"),
              host.call("w", "isohost_value_funcs:mapping_count"))
    return worker + (descriptor_count(), mapping_count())


def test_thousand_calls_with_16_mib_arrays_leave_nothing_behind(host):
    array = np.arange(4 * MIB, dtype=np.float32)  # 16 MiB
    # Measured at the same point of two iterations: each process keeps a bounded number of
    # spare memfds (and mappings of them) for reuse, and their place in the cycle must match.
    warm = None
    for i in range(1000):
        result = host.call("w", "isohost_value_funcs:echo", array)
        assert result.nbytes == 16 * MIB and result[i] == i
        if i == 20:
            warm = counts(host)
    assert counts(host) == warm


def test_closing_the_host_gives_back_every_descriptor_and_mapping():
    import gc

    import isohost
    from conftest import config

    array = np.arange(4 * MIB, dtype=np.float32)
    with isohost.Host(config()) as warmup:  # first use: imports, the extension, arenas
        warmup.call("w", "isohost_value_funcs:echo", array)
    gc.collect()
    before = descriptor_count(), mapping_count()
    with isohost.Host(config()) as host:
        for _ in range(50):
            result = host.call("w", "isohost_value_funcs:echo", array)
            host.call("other", "isohost_value_funcs:nbytes", result)
    del result
    gc.collect()
    assert (descriptor_count(), mapping_count()) == before


def test_received_arrays_alive_hold_a_bounded_number_of_descriptors(host):
    from isohost_worker import values

    small = np.arange(64 * 1024, dtype=np.int32)  # 256 KiB: mapped, kept for reuse once freed
    host.call("w", "isohost_value_funcs:echo", small)
    before = descriptor_count()
    kept = [host.call("w", "isohost_value_funcs:echo", small) for _ in range(300)]
    # The first MAX_TRACKED keep their memfd to give it back once freed; the rest hold none,
    # and at most MAX_SPARES spares wait free.
    assert 0 < descriptor_count() - before <= values.MAX_TRACKED + values.MAX_SPARES
    assert all(np.array_equal(k, small) for k in kept)
    assert mapping_count() >= 300  # each one its own mapping, alive
