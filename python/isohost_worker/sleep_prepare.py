"""While a worker idles after a call, fault in the host buffer its next sleep will copy into
(docs/sleep.md, "The first sleep").

A sleep's copy into fresh memory waits for the kernel to fault and zero every page: 59-65 ms/GiB
on the H100, three times the pinned copy, where a copy into pages already in place runs at
33-43. A wake keeps its buffer for the next sleep (sleep._kept), but a worker's first sleep at a
size has none. So once the main lane has idled for $ISOHOST_SLEEP_PREPARE_AFTER_S seconds after
a call, a thread of the runtime's walks for what a sleep would move, makes the staging area
where the worker holds enough, maps a buffer that large (or takes the kept one), faults it in a
chunk at a time and gives its pages to the kernel to take back lazily (MADV_FREE), as a wake
does: until the kernel needs them, the sleep rewrites them without a fault. Whatever reaches the
main lane stops it first (stop, within one chunk), so an op waits at most for one chunk or one
walk, never for a whole buffer.

Standard library only; torch is used through sleep.py, and only where a call imported it.
"""

import enum
import os
import sys
import threading
import time

from isohost_worker import errors, sleep

AFTER_ENV = "ISOHOST_SLEEP_PREPARE_AFTER_S"
DEFAULT_AFTER_S = 1.0
# What the thread faults in between two looks at whether the main lane wants it to stop: 2 ms
# of zeroing on the H100, the most an op waits for it.
CHUNK = 32 << 20
# The staging area (pinned, 128 MiB by default) is made ahead too where the worker holds at least
# this many times its size: pinning it costs a fresh worker's first sleep about 72 ms (573
# ms/GiB on the H200), and a worker holding that much is one a sleep would pay off for. Pinning
# is one driver call, not stopped half-way: an op that arrives meanwhile waits for it, once in
# a worker's life.
STAGING_AHEAD_FACTOR = 8
# A buffer is prepared only where this share of the machine's RAM stays available beside it:
# its pages are the kernel's to take back, but making them still pushes out the page cache.
KEEP_AVAILABLE = 0.25


class State(enum.Enum):
    OFF = "off"              # $ISOHOST_SLEEP_PREPARE_AFTER_S says off, or says nothing valid
    IDLE = "idle"            # nothing to do until the next call
    WAITING = "waiting"      # a call ended; preparing once the main lane idles long enough
    PREPARING = "preparing"  # the thread walks and faults in
    READY = "ready"          # the kept buffer holds a sleep of what the worker has now
    SKIPPED = "skipped"      # the last try did not prepare (`because` says why)


class _Preparer:
    def __init__(self, after):
        self._after = after
        self._cond = threading.Condition()
        # When the main lane went idle after a call; None while an op runs or once the thread
        # has taken its turn for that idle time.
        self._idle_since = None
        self._working = False
        # Whether the thread waits with no deadline, for a call's end: only then does a call's
        # end wake it. Otherwise it wakes at its deadline and finds the idle time begun since;
        # a wake-up after every call cost a worker 4% of its time in a loop of short calls.
        self._waiting_for_a_call = False
        self.state = State.IDLE
        self.because = None
        self.need = 0
        self._thread = threading.Thread(target=self._run, name="isohost-sleep-prepare",
                                        daemon=True)
        self._thread.start()

    def after_call(self):
        """The main lane finished a call and waits for the next op."""
        with self._cond:
            self._idle_since = time.monotonic()
            self.state = State.WAITING
            if self._waiting_for_a_call:
                self._cond.notify()

    def stop(self):
        """An op reached the main lane: the thread stops within a chunk, and sleep's state is
        the main thread's again."""
        with self._cond:
            self._idle_since = None
            if self.state is State.WAITING:
                self.state = State.IDLE
            while self._working:
                self._cond.wait()

    def _run(self):
        while True:
            with self._cond:
                since = self._wait_until_due()
                self._working = True
            try:
                self._prepare(lambda: self._idle_since is not since)
            except Exception as e:  # said, and the worker serves on: sleep maps anew
                said = self.because
                self._skip("%s: %s" % (errors.type_name(type(e)), e))
                if self.because != said:  # once, not after every call that fails the same way
                    errors.say("preparing the host buffer for a sleep failed: %s" % self.because)
            finally:
                with self._cond:
                    if self._idle_since is since:
                        self._idle_since = None  # this idle time's turn is taken
                    self._working = False
                    self._cond.notify_all()

    def _wait_until_due(self):
        """Under the lock: block until the main lane has idled `after` seconds since a call."""
        while True:
            since = self._idle_since
            if since is None:
                self._waiting_for_a_call = True
                self._cond.wait()
                self._waiting_for_a_call = False
                continue
            remaining = since + self._after - time.monotonic()
            if remaining > 0:
                self._cond.wait(remaining)
                continue
            return since

    def _prepare(self, stopped):
        torch = sys.modules.get("torch")
        device_type = None if torch is None else sleep.device_type_to_sleep()
        if device_type is None or sleep.is_asleep():
            self.state = State.IDLE
            return
        self.state = State.PREPARING
        self.need = sleep.bytes_to_sleep(torch, device_type)
        if self.need == 0:
            self.state = State.IDLE
            return
        if sleep.kept_capacity() < self.need:
            short = _short_of_ram(self.need)
            if short is not None:
                self._skip(short)
                return
        if self.need >= STAGING_AHEAD_FACTOR * sleep.staging_bytes():
            sleep.prepare_staging(torch, device_type)
        buffer = sleep.buffer_to_prepare(torch, self.need)
        already = buffer.faulted
        failed = buffer.fault_in(CHUNK, stopped, self.need)
        if buffer.faulted > already:
            buffer.free_lazily()
        if failed is not None:
            self._skip("the kernel would not fault the buffer in (%s)" % failed)
        elif buffer.faulted >= self.need:
            self.state, self.because = State.READY, None
        else:
            self.state = State.IDLE  # stopped by an op; the next idle time goes on from here

    def _skip(self, because):
        self.state, self.because = State.SKIPPED, because


def _short_of_ram(nbytes):
    """Why `nbytes` more would leave too little RAM available (/proc/meminfo), or None."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            info[name] = int(rest.split()[0]) * 1024
    total, available = info.get("MemTotal", 0), info.get("MemAvailable", 0)
    if available - nbytes >= KEEP_AVAILABLE * total:
        return None
    return ("%d MiB would leave %d of the machine's %d MiB available, under a quarter"
            % (nbytes >> 20, max(0, available - nbytes) >> 20, total >> 20))


def _after_seconds():
    """$ISOHOST_SLEEP_PREPARE_AFTER_S as seconds, None for "off"; ValueError for anything else."""
    raw = os.environ.get(AFTER_ENV, "").strip()
    if not raw:
        return DEFAULT_AFTER_S
    if raw.lower() == "off":
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise ValueError("%s=%r: how long a worker idles after a call before it prepares its "
                         "sleep's host buffer must be a number of seconds, or off"
                         % (AFTER_ENV, raw))
    return seconds


# The worker's preparer, made at the first call that ends with torch imported; None before.
_preparer = None
# Why there is none for good ($ISOHOST_SLEEP_PREPARE_AFTER_S off or not understood), or None.
_off_because = None


def after_call():
    """The runtime's main lane finished a call (main thread)."""
    global _preparer, _off_because
    if _preparer is None:
        if _off_because is not None or sys.modules.get("torch") is None:
            return
        try:
            after = _after_seconds()
        except ValueError as e:
            _off_because = str(e)
            errors.say("not preparing sleeps' host buffers: %s" % e)
            return
        if after is None:
            _off_because = "%s=off" % AFTER_ENV
            return
        _preparer = _Preparer(after)
    _preparer.after_call()


def stop():
    """An op reached the runtime's main lane (main thread)."""
    if _preparer is not None:
        _preparer.stop()


def report():
    """What the memory report says about the next sleep's host buffer: the preparer's state
    and why it skipped or is off, what the worker would sleep (`need`, as of the last look),
    and the kept buffer's size and how much of it was faulted in."""
    preparer = _preparer
    if preparer is not None:
        state, because, need = preparer.state, preparer.because, preparer.need
    else:
        state = State.IDLE if _off_because is None else State.OFF
        because, need = _off_because, 0
    capacity, faulted = sleep.kept_capacity(), sleep.kept_faulted()
    if state is State.READY and min(capacity, faulted) < need:
        state = State.IDLE  # a sleep took the buffer since
    return {"state": state.value, "because": because, "need": need, "capacity": capacity,
            "faulted": faulted}
