"""What the core queues for the Python host's own threads ("isohost-tells", "isohost-output"),
taken batch by batch through a weak reference to the core: a Host dropped without close() still
ends its workers when it is collected, as it would without these threads."""


def core_batches(core_ref, take, timeout=1.0):
    """Yields the core's `take` method's batches (waiting at most `timeout` seconds for each)
    until it gives None (the host closed) or the core is collected. The core is not held between
    batches."""
    while True:
        core = core_ref()
        batch = None if core is None else getattr(core, take)(timeout)
        del core
        if batch is None:
            return
        yield batch
