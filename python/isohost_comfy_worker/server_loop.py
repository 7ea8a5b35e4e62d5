"""ComfyUI's server event loop in a worker: `PromptServer.instance.loop` (docs/comfyui.md,
"Routes").

In process, ComfyUI's aiohttp server runs one event loop for its life, on the main thread, while
nodes run on another; packs schedule work on it (`loop.create_task` at import, which runs once
the server starts; `asyncio.run_coroutine_threadsafe` from a node) and their route handlers run
on it. In a worker, nodes run on the main thread, so that loop runs on a thread of its own, made
when a pack first asks for it or the route channel opens, and started once no pack is being
imported:
a task a pack creates at import runs after the import, as in process. The pack's route handlers
run on it too (route_channel.py), beside the tasks the pack started there.
"""

import asyncio
import threading

_lock = threading.Lock()
_loop = None
_thread = None
# How often a wait in run() gives Python a chance to raise an interrupt in the waiting thread
# (an interrupt is raised at the next bytecode, never inside a blocked lock).
_INTERRUPT_CHECK_SECONDS = 0.05


def loop():
    """The worker's server loop, made on first use (not started: start())."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
        return _loop


def start():
    """Runs the server loop on its thread from now on, if it was made and does not run yet."""
    global _thread
    with _lock:
        if _loop is None or _thread is not None:
            return
        _thread = threading.Thread(target=_run, args=(_loop,), name="isohost-server-loop",
                                   daemon=True)
        _thread.start()


def _run(server_loop):
    asyncio.set_event_loop(server_loop)
    server_loop.run_forever()


def run(coroutine):
    """The result of `coroutine`, run on the server loop, for a caller on another thread (a
    call's). An interrupt raised in the caller's thread while it waits cancels the coroutine's
    task and waits for it to end before it goes on up: a coroutine that awaits stops at once,
    one stuck in blocking code keeps the call in flight until the host kills the worker at its
    grace."""
    server_loop = loop()
    start()
    finished = threading.Event()
    task = []

    def create():
        task.append(server_loop.create_task(coroutine))
        task[0].add_done_callback(lambda _: finished.set())

    def cancel():
        # The loop runs callbacks in order: where create() was scheduled, it has run.
        if task:
            task[0].cancel()
        else:  # interrupted before create() was scheduled
            coroutine.close()
            finished.set()

    try:  # from the scheduling on: an interrupt may come at any bytecode
        server_loop.call_soon_threadsafe(create)
        while not finished.wait(_INTERRUPT_CHECK_SECONDS):
            pass
    except BaseException:
        server_loop.call_soon_threadsafe(cancel)
        finished.wait()
        raise
    return task[0].result()
