"""Start a worker: python -s -u .../isohost_worker/__main__.py --fd 3 --side-fd 4 --env NAME
[--host PID:STARTTIME] [--poll-microseconds N] [--path DIR]...
(or python -m isohost_worker with the same flags).
With --zygote --preload MOD,MOD the process is a zygote that forks workers (zygote.py)."""

import os
import sys

if not __package__:
    # Run as a file, so sys.path[0] is this package's own folder, where frames.py and
    # memory.py would shadow any top-level module of the same name. Import the package
    # from its parent instead, before importing anything else.
    _here = os.path.dirname(os.path.abspath(__file__))
    _parent = os.path.dirname(_here)
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(_here):
        sys.path[0] = _parent
    else:
        sys.path.insert(0, _parent)

import argparse  # noqa: E402
import socket  # noqa: E402

from isohost_worker import freeze, tree  # noqa: E402
from isohost_worker.runtime import Runtime  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(prog="isohost_worker", allow_abbrev=False)
    parser.add_argument("--fd", type=int, default=3, help="the main lane's socket, inherited")
    parser.add_argument("--side-fd", type=int, default=4, help="the side lane's socket, inherited")
    parser.add_argument("--env", required=True, help="the environment's name")
    parser.add_argument("--host", default=None, help="PID:STARTTIME of the host; a tag only")
    parser.add_argument("--path", action="append", default=[],
                        help="put DIR at the front of sys.path (repeatable, in order)")
    parser.add_argument("--poll-microseconds", type=int, default=0,
                        help="after each op, poll for the next this long before sleeping")
    parser.add_argument("--zygote", action="store_true", help="preload, then fork workers on request")
    parser.add_argument("--preload", default="", help="comma-separated modules a zygote imports")
    args = parser.parse_args(argv)

    # Before any of the user's code runs: what it starts stays in this process's tree, even
    # through setsid() and the death of its parent (tree.py).
    error = tree.become_subreaper()
    if error:
        sys.stderr.write("isohost_worker: prctl(PR_SET_CHILD_SUBREAPER) failed: %s; processes "
                         "the code starts that leave its process group may outlive it\n"
                         % os.strerror(error))
    sys.path[0:0] = args.path
    for stream in (sys.stdout, sys.stderr):
        # Without -u (python -m), still hand the host whole lines as soon as they exist.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    sockets = []
    for flag, fd in (("--fd", args.fd), ("--side-fd", args.side_fd)):
        try:
            sock = socket.socket(fileno=fd)
            # Programs the user's code starts must not hold the host's connection open.
            sock.set_inheritable(False)
        except OSError as e:
            sys.stderr.write("isohost_worker: %s %d is not a usable socket: %s\n" % (flag, fd, e))
            return 2
        sockets.append(sock)
    sock, side = sockets
    env = args.env
    if args.zygote:
        from isohost_worker.zygote import Zygote
        # Returns only in a forked child, which then runs as an ordinary worker.
        sock, side, env = Zygote(sock, side, env, [m for m in args.preload.split(",") if m]).serve()
    # A worker that imports torch later freezes torch's objects then (freeze.py).
    freeze.after_torch_import()
    Runtime(sock, side, env, args.poll_microseconds / 1e6).serve()


if __name__ == "__main__":
    sys.exit(main())
