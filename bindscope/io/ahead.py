"""Read ahead: an iterator run in a background thread, some items ahead of the code that consumes it.

Worth it where producing an item spends its time outside the Python interpreter lock. h5py lets go of it while
HDF5 decompresses, taking it back between chunks, so a thread reading the next images of a shard runs beside a
consumer that executes Python code, waits on a GPU or calls numpy; it stalls while the consumer sits in one long C
call that keeps the lock (measured on 2 CPUs: 2 of 35 reads of 100 images got done during a 0.7 s sort). h5py also
lets one thread at a time into HDF5, for the whole of a read, so a consumer reads what else it needs of the files
before the thread starts: its own h5py calls would wait for the thread's reads."""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_POLL = 0.05  # seconds between checks of the stop flag while the queue is full or empty
_END = object()


class ReadAhead(Iterator[T]):
    """The items of ``items``, in order, produced by a background thread started at once and running up to
    ``depth`` items ahead of :meth:`__next__`.

    An exception raised while producing an item is raised by :meth:`__next__` where that item would have come
    (its own type and message), after the items before it. :meth:`close` (also on leaving a ``with`` block, and
    when the object is collected) stops the thread after the item it is producing, closes ``items`` (its
    ``finally`` blocks run in the thread) and joins it.

    Args:
        items: any iterable; it is iterated in the background thread only.
        depth: items held ready at most (>= 1).

    Raises:
        ValueError: ``depth`` < 1.
    """

    def __init__(self, items: Iterable[T], depth: int):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._ready: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        # the thread holds the queue, the flag and the items, never this object (which may then be collected)
        self._thread = threading.Thread(target=_produce, args=(iter(items), self._ready, self._stop),
                                        name="bindscope-read-ahead", daemon=True)
        self._thread.start()

    def __next__(self) -> T:
        while not self._done:
            try:
                ok, value = self._ready.get(timeout=_POLL)
            except queue.Empty:
                if not self._thread.is_alive() and self._ready.empty():
                    self.close()
                    raise RuntimeError("the read-ahead thread ended without a result (a bindscope bug)") from None
                continue
            if ok:
                return value
            self.close()
            if value is not _END:
                raise value
        raise StopIteration

    def close(self) -> None:
        """Stop and join the thread (a no-op after the first call)."""
        self._done = True
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "ReadAhead[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()  # the thread ends on its own after its current item; nothing to wait for here


def _produce(source: Iterator, ready: queue.Queue, stop: threading.Event) -> None:
    def offer(entry) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=_POLL)
                return True
            except queue.Full:
                pass
        return False

    try:
        for item in source:
            if not offer((True, item)):
                return
        offer((False, _END))
    except BaseException as exc:  # handed to the consumer, raised there
        offer((False, exc))
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
