"""Worker lifetime: worker processes that end when the process that started them is gone."""

from __future__ import annotations

import os
import threading
import time

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
