"""Data-parallel training over ``torch.distributed``: the process group, the gathered contrastive features and
the averaged gradients of ``madman train`` under ``torchrun``.

Launched as ``torchrun --nproc_per_node N madman train ...`` (or ``python -m torch.distributed.run``), each of
the N processes reads ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (set by torchrun, with ``MASTER_ADDR`` and
``MASTER_PORT``) and joins one process group: backend NCCL when the device is CUDA (process ``LOCAL_RANK``
uses GPU ``cuda:LOCAL_RANK``), gloo on the CPU. Without ``WORLD_SIZE`` (or with 1) nothing is started and
training is the single-process one.

Rank r of N takes the contiguous slice ``[r B/N, (r+1) B/N)`` of global batch s (a pure function of the seed
and s, :func:`bindscope.training.data.batch_indices`) and the hard negatives of those samples. The features of
all ranks are gathered with gradient (``torch.distributed.nn.functional.all_gather``, whose backward sums the
gradients of every rank, as open_clip's ``gather_features(gather_with_grad=True)``), so every rank computes the
loss of the whole global batch. The parameter gradients are then summed over the ranks and divided by N (the
averaging of ``DistributedDataParallel``): with every rank differentiating the same global loss, the
all-gather backward gives each rank N times its share, and the average is the single-process gradient. The
optimiser step is then identical on every rank. Only rank 0 writes the run folder.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
from dataclasses import dataclass

from bindscope.errors import BadInput

# Signals that ask for a stop after the step under way (torchrun forwards both to every process).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def world_from_env(env=None) -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun's ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``;
    ``(0, 1, 0)`` when ``WORLD_SIZE`` is not set.

    Raises:
        BadInput: a variable that is not an integer, or a rank outside ``0..WORLD_SIZE-1``.
    """
    env = os.environ if env is None else env
    if "WORLD_SIZE" not in env:
        return 0, 1, 0
    values = {}
    for name, default in (("RANK", None), ("WORLD_SIZE", None), ("LOCAL_RANK", "0")):
        text = env.get(name, default)
        if text is None or not text.strip().isdigit():
            raise BadInput(f"environment variable {name}={text!r} is not a count (torchrun sets RANK, WORLD_SIZE "
                           "and LOCAL_RANK)", param=name)
        values[name] = int(text)
    rank, world, local = values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]
    if world < 1 or rank >= world:
        raise BadInput(f"environment variable RANK={rank} is not within 0..WORLD_SIZE-1 (WORLD_SIZE={world})",
                       param="RANK")
    return rank, world, local


def check_world(batch_size: int, device: str, world_size: int) -> None:
    """Raise BadInput unless ``batch_size`` divides by the number of processes and the device suits them.

    Under several processes the device is ``auto``, ``cpu`` or ``cuda`` (process ``LOCAL_RANK`` then takes
    ``cuda:LOCAL_RANK``); a fixed ``cuda:N`` would put every process on one GPU.
    """
    if batch_size % world_size:
        fits = [b for b in (batch_size - batch_size % world_size, batch_size + world_size - batch_size % world_size)
                if b > 0]
        raise BadInput(f"batch_size {batch_size} does not divide by the {world_size} processes (WORLD_SIZE); "
                       f"use a multiple of {world_size}, e.g. {' or '.join(map(str, fits))}", param="batch_size")
    if world_size > 1 and device.startswith("cuda:"):
        raise BadInput(f"device {device!r} is one GPU for all {world_size} processes; use device 'cuda' (or "
                       "'auto'): process LOCAL_RANK trains on cuda:LOCAL_RANK", param="device")


@dataclass
class Group:
    """This process's place in data-parallel training: ``rank`` of ``world_size`` (1: single process, no
    process group) and ``local_rank`` (its GPU on the node). ``device`` is the resolved torch device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    started: bool = False

    @property
    def active(self) -> bool:
        """True when several processes train together."""
        return self.world_size > 1

    def close(self) -> None:
        """Leave the process group this module started (idempotent)."""
        if self.started:
            import torch.distributed as dist

            self.started = False
            if dist.is_initialized():
                dist.destroy_process_group()

    # ------------------------------------------------------------ agreement
    def agree(self, value: int = 0, error: BaseException | None = None) -> list[int]:
        """One collective that every rank calls at the same point: each rank reports ``value`` (a small
        integer) and whether it failed (``error``). Returns every rank's value (index = rank).

        When a rank failed, every rank raises: the failed rank(s) their own error, the others a BadInput (or
        RuntimeError) with the message of the lowest failed rank, so a bad input that only rank 0 sees (its run
        folder) stops all ranks before anything else is written. The raised error's ``reported`` is True.
        """
        if not self.active:
            if error is not None:
                raise error
            return [value]
        import torch
        import torch.distributed as dist

        mine = torch.tensor([1 if error is not None else 0, value], dtype=torch.int64, device=self._comm_device)
        every = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine)
        failed = [r for r, t in enumerate(every) if int(t[0])]
        if not failed:
            return [int(t[1]) for t in every]
        source = failed[0]
        kind = "BadInput" if isinstance(error, BadInput) else type(error).__name__
        message = self.broadcast_text(f"{kind}\n{error}" if self.rank == source else "", source)
        if error is None:
            kind, _, text = message.partition("\n")
            error = (BadInput(f"process {source} of {self.world_size}: {text}") if kind == "BadInput" else
                     RuntimeError(f"process {source} of {self.world_size} failed ({kind}): {text}"))
        error.reported = True  # every rank knows: none reports it again
        raise error

    def check_same(self, values: dict) -> None:
        """Stop every process, before anything is written, unless each holds the same ``values`` (plain JSON
        values, e.g. the run's identity and its training data's sha256) as process 0: one collective, every
        process raises the same BadInput naming the first entry (in ``values``' order; inside a nested mapping,
        its first differing key) that differs, both values and the processes holding them.

        Raises:
            BadInput (``param`` the entry's name, ``reported`` True): the values differ.
        """
        if not self.active:
            return
        every = [json.loads(text) for text in self.gather_text(json.dumps(values))]
        for rank, theirs in enumerate(every[1:], start=1):
            key, ours, other = _first_difference(every[0], theirs)
            if key is not None:
                error = BadInput(f"{key} differs between the processes of this run: process {rank} has "
                                 f"{json.dumps(other)}, process 0 has {json.dumps(ours)}; start every process with "
                                 "the same options and training data", param=key)
                error.reported = True
                raise error

    def gather_text(self, text: str) -> list[str]:
        """Every rank's ``text`` (index = rank), on every rank (UTF-8 bytes in uint8 tensors: no pickling)."""
        import torch
        import torch.distributed as dist

        data = text.encode("utf-8")
        size = torch.tensor([len(data)], dtype=torch.int64, device=self._comm_device)
        sizes = [torch.empty_like(size) for _ in range(self.world_size)]
        dist.all_gather(sizes, size)
        longest = max(1, max(int(s) for s in sizes))
        buffer = torch.zeros(longest, dtype=torch.uint8)
        buffer[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else buffer[:0]
        buffers = [torch.empty(longest, dtype=torch.uint8, device=self._comm_device) for _ in sizes]
        dist.all_gather(buffers, buffer.to(self._comm_device))
        return [bytes(b.cpu()[:int(s)].tolist()).decode("utf-8") for b, s in zip(buffers, sizes)]

    def broadcast_text(self, text: str, source: int = 0) -> str:
        """``text`` of rank ``source``, on every rank (UTF-8 bytes in a uint8 tensor: no pickling)."""
        import torch
        import torch.distributed as dist

        data = torch.frombuffer(bytearray(text.encode("utf-8")) or bytearray(1), dtype=torch.uint8)
        size = torch.tensor([len(text.encode("utf-8"))], dtype=torch.int64, device=self._comm_device)
        dist.broadcast(size, source)
        buffer = data.to(self._comm_device) if self.rank == source else torch.empty(
            max(1, int(size)), dtype=torch.uint8, device=self._comm_device)
        dist.broadcast(buffer, source)
        return bytes(buffer.cpu()[:int(size)].tolist()).decode("utf-8")

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank (a stop request after the last step)."""
        if not self.active:
            return flag
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([1.0 if flag else 0.0], device=self._comm_device)
        dist.all_reduce(tensor)
        return bool(tensor.item() > 0)

    def barrier(self) -> None:
        """Wait for every rank (no-op for one process)."""
        if self.active:
            import torch.distributed as dist

            if dist.get_backend() == "nccl":
                dist.barrier(device_ids=[self.local_rank])
            else:
                dist.barrier()

    @property
    def _comm_device(self) -> str:
        return self.device if self.device.startswith("cuda") else "cpu"

    # ------------------------------------------------------------ training
    def gather_features(self, image_features, caption_features, negative_features, negative_counts: list[int]):
        """The global batch's features from every rank's, with gradient.

        Args:
            image_features, caption_features: ``(B/N, D)`` this rank's images and their captions.
            negative_features: ``(M_r, D)`` the hard negatives of this rank's samples (M_r may be 0).
            negative_counts: M_0 .. M_{N-1}, every rank's count (known on every rank: the global batch is
                deterministic).

        Returns:
            ``(images (B, D), texts (B + M, D))``: rank-ordered images, then the B captions in batch order, then
            the M negatives in batch order (rank 0's first), as one process computes them. Rows are padded to
            the largest M_r for the gather and the padding dropped.
        """
        import warnings

        import torch
        from torch.distributed.nn.functional import all_gather as gather_with_grad

        def all_gather(tensor):
            with warnings.catch_warnings():  # torch 2.10+ calls it deprecated; its replacement is private
                warnings.simplefilter("ignore", FutureWarning)
                return gather_with_grad(tensor)

        images = torch.cat(all_gather(image_features))
        captions = torch.cat(all_gather(caption_features))
        most = max(negative_counts)
        if most == 0:
            return images, captions
        padding = negative_features.new_zeros((most - negative_features.shape[0], negative_features.shape[1]))
        gathered = all_gather(torch.cat([negative_features, padding]))
        negatives = torch.cat([part[:count] for part, count in zip(gathered, negative_counts)])
        return images, torch.cat([captions, negatives])

    def average_gradients(self, parameters, stop: bool) -> bool:
        """Sum every parameter's gradient over the ranks and divide by N, in one all-reduce that also carries
        ``stop`` (this rank's stop request); returns True on every rank when any rank asked to stop.

        Parameters without a gradient keep none (as under one process, so AdamW skips them alike).
        """
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in parameters if p.grad is not None]
        flag = torch.tensor([1.0 if stop else 0.0], device=grads[0].device if grads else self._comm_device)
        flat = torch.cat([g.reshape(-1).float() for g in grads] + [flag])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_((flat[offset:offset + g.numel()] / self.world_size).view_as(g))
            offset += g.numel()
        return bool(flat[-1].item() > 0)


def is_collective_failure(exc: BaseException) -> bool:
    """True for the error of a collective whose peers are gone or silent (a process died, or the
    ``dist_timeout`` passed): ``torch.distributed.DistError`` (network, backend, store, timeout errors), or the
    plain RuntimeError that gloo and NCCL raise (their messages name their source files)."""
    import torch.distributed as dist

    return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and any(
        word in str(exc) for word in ("gloo", "NCCL", "Connection closed", "Connection reset")))


def first_sentence(exc: BaseException, limit: int = 200) -> str:
    """The first sentence of an error's message (the backend's file and line left out), for one error line."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = text.split("] ", 1)[-1] if text.startswith("[") else text
    return text.split(". ")[0][:limit]


def _first_difference(ours, theirs, name: str | None = None):
    """``(key, our value, their value)`` of the first entry of the mapping ``ours`` that ``theirs`` holds
    otherwise (looking inside nested mappings), or ``(None, None, None)`` when they are equal."""
    if ours == theirs:
        return None, None, None
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            found = _first_difference(ours.get(key), theirs.get(key), key)
            if found[0] is not None:
                return found
    return name, ours, theirs


def start(device: str, world: tuple[int, int, int], timeout: float = 600) -> Group:
    """Join the process group of ``world`` = ``(rank, world_size, local_rank)`` (:func:`world_from_env`) for
    training on ``device`` (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``, validated already).

    One process: nothing is started; the device is resolved as usual. Several: NCCL on CUDA (the device becomes
    ``cuda:LOCAL_RANK``), gloo on the CPU, with torchrun's ``MASTER_ADDR`` / ``MASTER_PORT`` rendezvous
    (``env://``) and a collective timeout of ``timeout`` seconds (``--dist-timeout``): a process that waits
    longer for the others in one collective (one of them died or hangs) fails, so the run ends.

    Raises:
        BadInput: CUDA asked for and absent, or fewer GPUs on the node than ``LOCAL_RANK`` needs.
    """
    from bindscope.training.checkpoint import resolve_device

    rank, world_size, local_rank = world
    resolved = resolve_device(device)
    if world_size == 1:
        return Group(device=resolved)
    import torch
    import torch.distributed as dist

    if resolved.startswith("cuda"):
        if local_rank >= torch.cuda.device_count():
            raise BadInput(f"LOCAL_RANK {local_rank} needs GPU cuda:{local_rank}, but torch sees "
                           f"{torch.cuda.device_count()} GPU(s); start at most that many processes per node",
                           param="device")
        resolved = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    if dist.is_initialized():  # a caller's process group (e.g. a notebook under torchrun): use it, keep it
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise BadInput(f"the process group already started is rank {dist.get_rank()} of "
                           f"{dist.get_world_size()}; the environment says {rank} of {world_size}")
        return Group(rank, world_size, local_rank, resolved, started=False)
    backend = "nccl" if resolved.startswith("cuda") else "gloo"
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout),
                            **({"device_id": torch.device(resolved)} if backend == "nccl" else {}))
    return Group(rank, world_size, local_rank, resolved, started=True)
