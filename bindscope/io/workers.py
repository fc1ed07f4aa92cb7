"""Worker lifetime: worker processes that end when the process that started them is gone."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

_watched: dict[int, bool] = {}  # parent pid -> whether this process is its direct child


def exit_with_parent(parent_pid: int, interval: float = 0.2) -> None:
    """In a worker process: exit at once (``os._exit``) when the process ``parent_pid`` is gone.

    Starts one daemon thread per worker process that polls every ``interval`` seconds; call it at the start of
    every task (later calls are free). Workers of a killed run thus stop within ``interval`` instead of
    finishing their tasks and writing shards into a folder nobody holds. Call :func:`parent_alive` right before
    making a result visible (e.g. renaming a finished shard) to close the remaining window.
    """
    if parent_pid == os.getpid() or parent_pid in _watched:
        return
    _watched[parent_pid] = os.getppid() == parent_pid

    def watch() -> None:
        while parent_alive(parent_pid):
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="bindscope-parent-watch", daemon=True).start()


def parent_alive(parent_pid: int | None) -> bool:
    """False when the process ``parent_pid`` (on this machine) is gone; True for ``None`` or this process.

    A direct child sees its parent go when it is re-parented (a killed parent may linger as a zombie, which
    still answers signals); other workers (e.g. a Dask nanny's) test the pid itself.
    """
    if parent_pid is None or parent_pid == os.getpid():
        return True
    if _watched.get(parent_pid):
        return os.getppid() == parent_pid
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP interrupt the main thread like Ctrl-C (``KeyboardInterrupt``), so
    that its ``finally`` clauses remove temporary files as they do after SIGINT; the earlier handlers are
    restored on leaving. Processes forked inside the block keep the default behaviour (they die at once).
    Outside the main thread it does nothing (Python lets only the main thread set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def interrupt(number, frame):
        if os.getpid() != owner:  # a forked child: die as the signal means
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        raise KeyboardInterrupt(f"signal {signal.Signals(number).name}")

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
