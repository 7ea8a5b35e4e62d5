"""The worker's hold on every process its code starts (docs/lifecycle.md, "When the host dies").

A process started by the user's code that calls setsid() leaves the worker's process group, so
the host's kill of that group misses it. Two things keep it within reach:

- become_subreaper(): PR_SET_CHILD_SUBREAPER, so a descendant whose parent ends is re-parented
  to this worker instead of init, and stays in its tree while the worker lives. Not inherited
  by fork, so a zygote's forked child sets it again.
- end_descendants(): SIGKILL to every process under this one (found through /proc's parent
  links), before the worker exits on its own (shutdown, end-of-file, a failure).

The host does the same from outside when it kills a worker, and ends what escaped anyway
through the ISOHOST_HOST_TAG variable every descendant inherits (src/proc/process_tree.cpp).
"""

import ctypes
import os
import signal
import sys

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
# Passes over /proc before giving up on a tree that keeps growing (a fork bomb).
_PASSES = 8

_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper():
    """Make orphaned descendants of this process its own children. Returns the errno, 0 on
    success: where the kernel refuses, the worker still runs."""
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return ctypes.get_errno()
    return 0


def is_subreaper():
    value = ctypes.c_int(0)
    _libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)
    return value.value != 0


def _parent_of(pid):
    """The parent pid from /proc/PID/stat, or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            text = f.read()
    except OSError:
        return None
    # Field 2 (the command name) may hold spaces and parentheses: count after the last ')'.
    fields = text[text.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def descendants(root=None):
    """Pids of every process under `root` (this one by default), from one pass over /proc."""
    root = os.getpid() if root is None else root
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), ())
        found.extend(below)
        frontier.extend(below)
    return found


def _kill(pid, tree):
    """SIGKILL `pid` through a pidfd, if it is still a process of `tree` once the pidfd holds
    it (a recycled pid belongs to a stranger)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None
    try:
        if _parent_of(pid) not in tree:
            return
        if pidfd is None:
            os.kill(pid, signal.SIGKILL)  # no pidfds on this kernel: the check above must do
        else:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass  # it ended meanwhile
    finally:
        if pidfd is not None:
            os.close(pidfd)


def end_descendants():
    """SIGKILL every process under this one, pass after pass until a pass finds none it has not
    signalled already. Never raises: it runs on the way out."""
    try:
        # Each /proc file read gives up the GIL, and a main thread busy in Python code (a call
        # in flight when the host died) held it a switch interval (5 ms) before each was taken
        # back: a pass over a few hundred processes took seconds. This process is ending.
        sys.setswitchinterval(1e-6)
        me = os.getpid()
        signalled = set()
        for _ in range(_PASSES):
            found = descendants(me)
            fresh = [pid for pid in found if pid not in signalled]
            if not fresh:
                return
            tree = set(found) | {me}
            for pid in fresh:
                _kill(pid, tree)
                signalled.add(pid)
    except Exception:
        pass
