"""Execution backends for :func:`bindscope.build.builder.build_dataset`: where shard tasks run.

- ``"local"``: this machine, ``jobs`` processes through joblib (loky); ``jobs=1`` runs in this process.
- ``"dask"``: a Dask cluster through ``dask.distributed`` futures (https://distributed.dask.org). With no
  scheduler address a :class:`distributed.LocalCluster` of ``jobs`` worker *processes* (one thread each) is
  started for the run and closed after it; with an address (``tcp://host:8786``) or the path of a scheduler
  file (``scheduler.json``, as written by ``dask scheduler --scheduler-file`` or dask-jobqueue / dask-mpi)
  the run uses that existing cluster.

The unit of work is one shard. A worker that dies while making a shard (killed, out of memory, node lost) is
detected by the Dask scheduler, which runs the task again on another worker (up to the scheduler's
``distributed.scheduler.allowed-failures`` times, default 3). Nothing partial becomes visible: a shard file
only appears by atomic rename once complete, and the builder deletes the dead worker's temporary file.
Workers write shards directly into the output folder, so with a remote cluster that folder must be on a
file system every worker mounts at the same path (NFS, Lustre, GPFS, a Kubernetes shared volume).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from bindscope.errors import BadInput
from bindscope.limits import MAX_COUNT

BACKENDS = ("local", "dask")


class Executor:
    """Runs ``func(common, item)`` for every item; yields ``(position, result)`` pairs as items finish.

    ``common`` may be large (e.g. a generator holding MNIST digits): Dask sends it to each worker once; joblib
    sends it with each task, memory-mapping large numpy arrays. ``description`` names the backend for progress
    output.
    """

    description = "local"

    def map(self, func: Callable[[Any, Any], Any], common: Any, items: Sequence) -> Iterator[tuple[int, Any]]:
        raise NotImplementedError


class LocalExecutor(Executor):
    """joblib processes on this machine (``jobs`` >= 1; 1 = in this process)."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.description = f"local, {jobs} process{'es' if jobs > 1 else ''}"

    def map(self, func, common, items):
        if self.jobs == 1:
            return ((i, func(common, item)) for i, item in enumerate(items))
        import joblib

        parallel = joblib.Parallel(n_jobs=self.jobs, return_as="generator")
        return enumerate(parallel(joblib.delayed(func)(common, item) for item in items))


class DaskExecutor(Executor):
    """Dask futures on a connected :class:`distributed.Client`."""

    def __init__(self, client):
        self.client = client
        info = client.scheduler_info()
        self.description = f"dask, scheduler {client.scheduler.address}, {len(info.get('workers', {}))} workers"

    def map(self, func, common, items):
        from distributed import KilledWorker, as_completed

        # One copy of `common` per worker; a restarted worker fetches it again from its peers.
        common_future = self.client.scatter(common, broadcast=True)
        futures = [self.client.submit(func, common_future, item, pure=False) for item in items]
        position = {f.key: i for i, f in enumerate(futures)}
        try:
            for future, result in as_completed(futures, with_results=True):
                yield position[future.key], result
        except KilledWorker as exc:
            raise RuntimeError(f"Dask gave up on a task after its workers died repeatedly ({exc}); a worker "
                               "probably runs out of memory on it: give workers more memory or fewer threads, "
                               "then repeat the command (finished shards are kept)") from None
        finally:
            self.client.cancel(futures + [common_future])


def check_backend(backend: str, scheduler: str | None, jobs: int) -> None:
    """Validate the backend options before anything is started or written.

    Raises:
        BadInput: unknown ``backend``; ``scheduler`` given without ``backend="dask"``; ``jobs`` < 1; the
            ``dask.distributed`` package is missing for ``backend="dask"``.
    """
    if backend not in BACKENDS:
        raise BadInput(f"backend {backend!r} is not allowed; choose one of: {', '.join(BACKENDS)}", param="backend")
    if jobs < 1:
        raise BadInput(f"jobs must be at least 1, got {jobs}", param="jobs")
    if scheduler is not None and backend != "dask":
        raise BadInput(f"scheduler {scheduler!r} needs backend='dask' (got backend={backend!r})", param="scheduler")
    if backend == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise BadInput("backend 'dask' needs the dask.distributed package: "
                           "pip install 'bindscope[scale]'", param="backend") from None


def check_parts(num_parts: int, part: int, num_shards: int | None = None) -> None:
    """Raise :class:`BadInput` unless ``1 <= num_parts <= num_shards`` and ``0 <= part < num_parts``.

    ``num_shards=None`` skips the last check (the build settings are checked before the generator exists).
    """
    if num_parts < 1:
        raise BadInput(f"num_parts must be at least 1, got {num_parts}", param="num_parts")
    if not 0 <= part < num_parts:
        raise BadInput(f"part {part} is out of range: with {num_parts} parts it must be 0..{num_parts - 1}",
                       param="part")
    if num_shards is not None and num_parts > num_shards:
        raise BadInput(f"num_parts {num_parts} is more than the dataset's {num_shards} shard(s); "
                       f"use at most {num_shards} parts (or a smaller shard size)", param="num_parts")


@dataclass(frozen=True)
class BuildSettings:
    """Where and in how many parts a generator's shards are made (the scale-out of
    :func:`bindscope.build.builder.build_dataset`), taken by :func:`bindscope.madman.generate` and
    :func:`bindscope.comco.render`; ``madman generate`` and ``comco render`` make it with one click decorator
    generated from the fields below (:func:`bindscope.cli.options.build_options`). Worker processes
    (``jobs``) are each call's own argument.

    Attributes:
        backend: ``"local"`` (joblib processes on this machine) or ``"dask"`` (a Dask cluster; needs
            ``dask.distributed``).
        scheduler: with ``"dask"``: the address (``tcp://HOST:8786``) or scheduler file of a running Dask
            scheduler; None: a LocalCluster of ``jobs`` worker processes.
        num_parts: split the run into this many independent parts, 1..10,000,000 (join them with
            ``bindscope merge``); at most the number of shards (checked by the build).
        part: which part this run makes, 0-based (``0 <= part < num_parts``).

    Raises:
        BadInput: an unknown backend, a scheduler without ``"dask"``, ``dask.distributed`` missing, a part out of
            range (``param`` names the field), at construction.
    """

    backend: str = field(default="local", metadata={
        "flag": "--backend", "choice": BACKENDS,
        "help": "Where shards are made: 'local' = --jobs processes on this machine (joblib); 'dask' = a Dask "
                "cluster (--scheduler, or a LocalCluster of --jobs worker processes)."})
    scheduler: str | None = field(default=None, metadata={
        "flag": "--scheduler", "metavar": "ADDRESS",
        "help": "With --backend dask: address of a running Dask scheduler (tcp://HOST:8786) or the path of its "
                "scheduler file. --out must be on a file system every worker sees."})
    num_parts: int = field(default=1, metadata={
        "flag": "--num-parts", "range": (1, MAX_COUNT), "metavar": "K",
        "help": "Split the run into K independent parts (e.g. a batch-scheduler job array); join them afterwards "
                "with `bindscope merge`."})
    part: int = field(default=0, metadata={
        "flag": "--part", "range": (0, MAX_COUNT - 1), "metavar": "I",
        "help": "Which part this run makes, 0-based (0 <= I < K)."})

    def __post_init__(self):
        check_backend(self.backend, self.scheduler, 1)
        check_parts(self.num_parts, self.part)

    @classmethod
    def taken(cls, build: "BuildSettings | None", keywords: dict) -> "BuildSettings":
        """``build`` (default: the defaults), or, for a call that still passes the fields as keywords (the
        spelling before :class:`BuildSettings`; ``backend=``, ``scheduler=``, ``num_parts=``, ``part=``, removed
        from ``keywords``), the settings they give, with a :class:`DeprecationWarning`. Raises BadInput for both
        at once."""
        old = {name: keywords.pop(name) for name in ("backend", "scheduler", "num_parts", "part") if name in keywords}
        if not old:
            return build or cls()
        if build is not None:
            raise BadInput(f"{', '.join(old)} and build both given; give the scale-out once, as "
                           "build=BuildSettings(...)", param="build")
        warnings.warn(f"{', '.join(old)}: pass build=BuildSettings(...) instead (bindscope.build.backends); these "
                      "keywords go in the next release", DeprecationWarning, stacklevel=3)
        return cls(**old)


@contextlib.contextmanager
def open_executor(backend: str = "local", scheduler: str | None = None, jobs: int = 1,
                  connect_timeout: str | None = None) -> Iterator[Executor]:
    """Start or connect to the backend; yield an :class:`Executor`; shut down what was started on exit.

    Args:
        backend: ``"local"`` or ``"dask"``.
        scheduler: (dask) address of an existing scheduler, ``tcp://host:8786`` or ``host:8786``, or the path
            of a scheduler file. ``None`` starts a LocalCluster of ``jobs`` worker processes, 1 thread each.
        jobs: local processes, or LocalCluster workers.
        connect_timeout: (dask) how long to try reaching ``scheduler``, e.g. ``"30s"``; default: Dask's
            ``distributed.comm.timeouts.connect`` setting (30 s unless configured).

    Raises:
        BadInput: see :func:`check_backend`; the scheduler cannot be reached (message names the address).
    """
    check_backend(backend, scheduler, jobs)
    if backend == "local":
        yield LocalExecutor(jobs)
        return
    from distributed import Client, LocalCluster

    if scheduler is None:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=":0")
        client = Client(cluster)
        try:
            yield DaskExecutor(client)
        finally:  # the shards are final by now: a slow or failing shutdown must not fail the run
            for close in (client.close, cluster.close):
                try:
                    close()
                except Exception as exc:
                    warnings.warn(f"closing the local Dask cluster: {type(exc).__name__}: {exc}")
        return
    kwargs = {"scheduler_file": scheduler} if Path(scheduler).is_file() else {"address": scheduler}
    if connect_timeout is not None:
        kwargs["timeout"] = connect_timeout
    try:
        client = Client(**kwargs)
    except (OSError, TimeoutError, ValueError) as exc:
        raise BadInput(f"scheduler {scheduler!r}: cannot connect to a Dask scheduler there ({exc}); "
                       "give its address (tcp://HOST:8786) or the path of its scheduler file",
                       param="scheduler") from None
    with client:
        yield DaskExecutor(client)
