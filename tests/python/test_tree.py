"""The worker holds what its code starts (docs/lifecycle.md, "When the host dies"): it is a child
subreaper, so a setsid() grandchild whose parent exited stays in its tree, and it ends that
tree before it exits on its own (shutdown, end-of-file)."""

import os
import select
import signal

import pytest

from conftest import TIMEOUT
from test_zygote import Child, _zygote


class Grandchild:
    """A setsid() grandchild the worker started, held through a pidfd; killed at teardown if a
    test left it."""

    def __init__(self, call, tmp_path):
        self.pid = call("isohost_test_funcs:start_setsid_grandchild", str(tmp_path / "grandchild.pid"))
        self.pidfd = os.pidfd_open(self.pid)

    def ended(self, timeout=TIMEOUT):
        """Waits for the process to end (its pidfd turns readable), at most `timeout`."""
        return bool(select.select([self.pidfd], [], [], timeout)[0])

    def close(self):
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self.pidfd)


@pytest.fixture
def grandchildren():
    made = []
    yield made
    for grandchild in made:
        grandchild.close()


def test_a_worker_is_a_child_subreaper(worker):
    assert worker.value("isohost_test_funcs:is_subreaper") is True


def test_its_setsid_grandchild_stays_in_its_tree(worker, tmp_path, grandchildren):
    grandchild = Grandchild(worker.value, tmp_path)
    grandchildren.append(grandchild)
    with open("/proc/%d/stat" % grandchild.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    parent, session = int(fields[1]), int(fields[3])
    assert parent == worker.pid, "its parent exited; it was re-parented to the worker"
    assert session == grandchild.pid, "it left the worker's session and process group"


def test_shutdown_ends_its_setsid_grandchild(worker, tmp_path, grandchildren):
    grandchild = Grandchild(worker.value, tmp_path)
    grandchildren.append(grandchild)
    assert not grandchild.ended(0)
    worker.send({"op": "shutdown"})
    assert worker.wait() == 0
    assert grandchild.ended(), "the setsid grandchild outlived the worker's shutdown"


def test_end_of_file_ends_its_setsid_grandchild(worker, tmp_path, grandchildren):
    grandchild = Grandchild(worker.value, tmp_path)
    grandchildren.append(grandchild)
    worker.sock.close()
    worker.side.close()
    assert worker.wait() == 0
    assert grandchild.ended(), "the setsid grandchild outlived the host's connection"


def test_a_forked_worker_is_a_subreaper_and_ends_its_grandchild(spawn, tmp_path, grandchildren):
    zygote = _zygote(spawn)
    child = Child(zygote)
    child.recv()
    assert child.call("isohost_test_funcs:is_subreaper") is True, "set again after clone"
    grandchild = Grandchild(child.call, tmp_path)
    grandchildren.append(grandchild)
    status = child.end()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert grandchild.ended(), "the setsid grandchild outlived the forked worker"
