"""Functions that the isohost test suites (Python and C++) call inside real workers.

Start a worker with `--path tests/python/fixtures_mod` and call e.g.
`isohost_test_funcs:add`. Standard library only, apart from the torch helpers, which
import torch when called.
"""

import json
import os
import sys
import threading
import time

import isohost_worker

MIB = 1024 * 1024
NOT_CALLABLE = 42

_allocation = None
_cuda_tensors = []


class FixtureError(Exception):
    """An exception whose type the host sees qualified: isohost_test_funcs.FixtureError."""


class Namespace:
    class Inner:
        @staticmethod
        def triple(x):
            return 3 * x


def echo(x):
    return x


def add(a, b):
    return a + b


def kwargs_echo(**kw):
    return kw


def raises(message):
    raise ValueError(message)


def raises_custom(message):
    raise FixtureError(message)


def exits(code):
    """sys.exit inside a call: an error reply, not the end of the worker."""
    sys.exit(code)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def busy_loop_marked(marker, seconds):
    """busy_loop, creating the file `marker` first: a test waits for it to know the call runs."""
    open(marker, "w").close()
    return busy_loop(seconds)


def busy_loop(seconds):
    """Spin in pure Python, holding the GIL as much as Python code ever does."""
    deadline = time.monotonic() + seconds
    spins = 0
    while time.monotonic() < deadline:
        spins += 1
    return seconds


def not_json():
    return object()


def nan():
    return float("nan")


def print_lines(n):
    """n lines to stdout and n to stderr, including text that looks like a frame."""
    for i in range(n):
        print("ISOH stdout line %d" % i)
        print("ISOH stderr line %d" % i, file=sys.stderr)
    return n


def write_garbage():
    """Corrupt the protocol on purpose: the host must treat it as a protocol error."""
    os.write(3, b"garbage, not a frame\n" * 4)
    return True


def crash_with_code(code):
    os._exit(code)


def self_kill(signal_number):
    os.kill(os.getpid(), signal_number)
    time.sleep(1)  # a fatal signal arrives before this ends
    return signal_number


def pid():
    return os.getpid()


def sys_path():
    return list(sys.path)


def env_var(name):
    return os.environ.get(name)


def protocol_version():
    return isohost_worker.PROTOCOL_VERSION


def free_lazily_mb(mb):
    """Hold `mb` MiB of pages written and then given back with MADV_FREE (LazyFree in smaps),
    as a sleep's kept host buffer is, until clear_allocation()."""
    import mmap

    global _allocation
    mapping = mmap.mmap(-1, mb * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, mb * MIB, 4096):
        mapping[offset] = 1
    mapping.madvise(mmap.MADV_FREE)
    _allocation = mapping
    return mb


def allocate_mb(mb):
    """Hold `mb` MiB of resident memory until clear_allocation() or a release."""
    global _allocation
    buf = bytearray(mb * MIB)
    buf[::4096] = b"\x01" * len(range(0, len(buf), 4096))  # make every page resident
    _allocation = buf
    return mb


def allocated_mb():
    return 0 if _allocation is None else len(_allocation) // MIB


def clear_allocation():
    global _allocation
    _allocation = None
    del _cuda_tensors[:]


isohost_worker.on_release(clear_allocation)


def _failing_callback():
    raise RuntimeError("this release callback fails on purpose")


def register_failing_release_callback():
    isohost_worker.on_release(_failing_callback)
    return True


def fork_keeps_protocol_fd():
    """Whether a plain os.fork() child still has the protocol descriptor open."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.fstat(3)
            answer = b"1"
        except OSError:
            answer = b"0"
        os.write(write_end, answer)
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(child, 0)
    return answer == b"1"


def torch_version():
    import torch
    return torch.__version__


def cuda_available():
    import torch
    return torch.cuda.is_available()


def cuda_initialized():
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def cuda_allocate_mb(mb):
    """Hold `mb` MiB on the current CUDA device until a release."""
    import torch
    _cuda_tensors.append(torch.empty(mb * MIB, dtype=torch.uint8, device="cuda"))
    return mb


def cuda_drop_tensors():
    """Free the tensors but leave their blocks in torch's cache, for a release to return."""
    del _cuda_tensors[:]
    return True


def start_grandchild():
    """Start a long sleep in the worker's process group and return its pid: the host must end
    it together with the worker."""
    import subprocess

    child = subprocess.Popen(["sleep", "300"])
    _grandchildren.append(child)
    return child.pid


_grandchildren = []


def start_setsid_grandchild(pid_file, clear_environment=False):
    """Start a process the way a daemon does: a child forks a grandchild and exits at once; the
    grandchild calls setsid() (leaving the worker's session and process group) and execs a
    Python that sleeps long, with an empty environment if `clear_environment`. Returns the
    grandchild's pid once it has written it to `pid_file`. The host must end it with the
    worker all the same (docs/lifecycle.md)."""
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                os.setsid()
                with open(pid_file + ".tmp", "w") as f:
                    f.write("%d\n" % os.getpid())
                os.rename(pid_file + ".tmp", pid_file)
                # The new program says it runs, so its environment is the new one when this
                # returns; it execs nothing more, so that stays so (a second exec would leave
                # its environment unreadable for an instant).
                os.dup2(ready_write, 3)
                os.set_inheritable(3, True)  # also where the pipe got 3 itself
                os.execve(sys.executable,
                          [sys.executable, "-S", "-c",
                           "import os, time; os.write(3, b'x'); os.close(3); time.sleep(1000)"],
                          {} if clear_environment else os.environ)
        finally:
            os._exit(0)
    os.close(ready_write)
    os.waitpid(child, 0)
    try:
        if os.read(ready_read, 1) != b"x":
            raise RuntimeError("the grandchild ended before it wrote its pid")
    finally:
        os.close(ready_read)
    with open(pid_file) as f:
        return int(f.read())


def is_subreaper():
    """prctl(PR_GET_CHILD_SUBREAPER): whether this worker adopts its orphaned descendants."""
    from isohost_worker import tree
    return tree.is_subreaper()
_reserved_tensors = []


def random_value():
    """This process's next number from the random module (zygote children must differ)."""
    import random
    return random.random()


def parent_pid():
    return os.getppid()


def session_id():
    return os.getsid(0)


def open_descriptors():
    """Descriptors 0-1023 that are open in this process."""
    found = []
    for fd in range(1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found


def glibc_tid_is_own():
    """Whether glibc's record of this thread's tid (which pthread calls on the main thread use)
    is this thread's real tid: a zygote's raw clone must leave no stale copy of the zygote's."""
    from isohost_worker import zygote
    address = zygote._tid_address()  # None when glibc's record does not match the real tid
    return address is not None


def death_signal():
    """prctl(PR_GET_PDEATHSIG): the signal this process gets when its parent thread dies."""
    import ctypes
    value = ctypes.c_int(0)
    ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(value), 0, 0, 0)
    return value.value


def cuda_reserve_and_allocate_mb(mb):
    """Ask the host for `mb` MiB with reserve_vram; when granted, allocate and keep them."""
    import isohost_worker
    import torch
    with isohost_worker.reserve_vram(mb * MIB) as reservation:
        # Kept apart from _cuda_tensors, which a release drops: these are a loaded model's.
        _reserved_tensors.append(torch.empty(mb * MIB, dtype=torch.uint8, device="cuda"))
    return dict(reservation.figures, granted=reservation.granted, outcome=reservation.outcome)


def ask_host(name, value=None):
    """Asks the caller and returns its answer."""
    return isohost_worker.ask(name, value)


def ask_failure(name, value=None):
    """Asks the caller, expecting a refusal: [type_name, message]."""
    try:
        isohost_worker.ask(name, value)
    except isohost_worker.AskFailed as e:
        return [e.type_name, e.message]
    return None


def ask_many(name, count):
    """`count` asks in a row, as a progress bar makes them; the answers in order."""
    return [isohost_worker.ask(name, {"value": i, "total": count}) for i in range(count)]


def tell_host(name, value=None):
    isohost_worker.tell(name, value)
    return "told"


def tell_after_call(fifo, name, values):
    """Returns at once; a thread of the worker's, once a line comes through the named pipe
    `fifo` (the test writes it after this call returned), tells each of `values`: tells sent
    while no call is in flight."""
    def tell_later():
        with open(fifo) as f:
            f.readline()
        for value in values:
            isohost_worker.tell(name, value)

    threading.Thread(target=tell_later, daemon=True).start()
    return "later"


def ask_after_call(fifo, name, value):
    """Returns at once; a thread of the worker's, once a line comes through the named pipe
    `fifo` (the test writes it after this call returned), asks `name` with `value` (an ask
    sent while no call is in flight) and tells "asked" what came back: {"answer": A} or
    {"error": [type, message]}."""
    def ask_later():
        with open(fifo) as f:
            f.readline()
        try:
            outcome = {"answer": isohost_worker.ask(name, value)}
        except isohost_worker.AskFailed as e:
            outcome = {"error": [e.type_name, e.message]}
        isohost_worker.tell("asked", outcome)

    threading.Thread(target=ask_later, daemon=True).start()
    return "later"


def _tell_between_lines(fifo, name, count):
    """Once a first line comes through the named pipe `fifo`, tells `name` `count` times (0, 1,
    ...); returns at the second line."""
    with open(fifo) as f:
        f.readline()
        for value in range(count):
            isohost_worker.tell(name, value)
        f.readline()


def tell_flood_after_call(fifo, name, count, ack):
    """Returns at once; a thread of the worker's then tells `name` `count` times (0, 1, ...) when
    a first line comes through `fifo`, and at a second tells "flood_done" every 20 ms until the
    file `ack` exists (one sent while the host's queue is still full is dropped)."""
    def flood():
        _tell_between_lines(fifo, name, count)
        for _ in range(3000):
            isohost_worker.tell("flood_done")
            if os.path.exists(ack):
                return
            time.sleep(0.02)

    threading.Thread(target=flood, daemon=True).start()
    return "later"


def ask_when_flooded(fifo, name, count, ask_name, outcome_fifo):
    """Returns at once; a thread of the worker's then tells `name` `count` times when a first
    line comes through `fifo`, asks `ask_name` at a second, and writes what came back through
    the named pipe `outcome_fifo` as JSON ({"answer": A} or {"error": [type, message]})."""
    def flood_then_ask():
        _tell_between_lines(fifo, name, count)
        try:
            outcome = {"answer": isohost_worker.ask(ask_name)}
        except isohost_worker.AskFailed as e:
            outcome = {"error": [e.type_name, e.message]}
        with open(outcome_fifo, "w") as out:
            json.dump(outcome, out)

    threading.Thread(target=flood_then_ask, daemon=True).start()
    return "later"


def spin_until_interrupted(limit_seconds=60):
    """Says "started", then spins in Python until an interrupt raises here (or the limit)."""
    isohost_worker.tell("started")
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        pass
    return "not interrupted"


def spin_raising(exception_name, limit_seconds=60):
    """spin_until_interrupted, with the builtin `exception_name` raised by the interrupt."""
    isohost_worker.on_interrupt(getattr(__builtins__, exception_name, None)
                                or __builtins__[exception_name])
    try:
        return spin_until_interrupted(limit_seconds)
    finally:
        isohost_worker.on_interrupt(None)


def poll_interrupted(limit_seconds=60):
    """Says "started", then sleeps in short steps until isohost_worker.interrupted() says so: a
    call that stops by looking rather than raising. The interrupt's exception, wherever it lands,
    is caught (every line is inside the try)."""
    deadline = time.monotonic() + limit_seconds
    told = False
    while True:
        try:
            if not told:
                told = True
                isohost_worker.tell("started")
            if isohost_worker.interrupted():
                _seen["interrupted flag"] = True
                return "stopped by the flag"
            if time.monotonic() > deadline:
                return "not interrupted"
            time.sleep(0.001)
        except isohost_worker.Interrupted:
            continue


_seen = {}


def saw_interrupted_flag():
    return _seen.pop("interrupted flag", False)


def stuck_in_c(seconds):
    """Says "started", then blocks in one C call that no Python-level interrupt can break."""
    import ctypes

    sleep_in_c = ctypes.CDLL(None).sleep
    told = False
    while True:
        try:
            if not told:
                told = True
                isohost_worker.tell("started")
            sleep_in_c(int(seconds))
            return "woke"
        except isohost_worker.Interrupted:
            # It came before the C call began (the tell raced it): go back in, as code that
            # swallows exceptions would. An interrupt is raised once, so it stays in C now.
            continue


def ask_not_json():
    return isohost_worker.ask("x", float("nan"))


def hold_gil_reading(fifo):
    """Blocks in read(2) on the FIFO at `fifo` while holding the GIL (a C function called
    through ctypes.PyDLL keeps it), as a call deep in C code does: the side lane cannot answer
    until a byte arrives. Returns how many bytes it read."""
    import ctypes

    fd = os.open(fifo, os.O_RDONLY)  # returns once the test opens the other end
    try:
        return ctypes.PyDLL(None).read(fd, ctypes.create_string_buffer(1), 1)
    finally:
        os.close(fd)
