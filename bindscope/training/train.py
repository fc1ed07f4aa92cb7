"""``bindscope train`` / ``madman train``: train a small CLIP from scratch (or fine-tune an open_clip model) on any
bindscope dataset with captions (MADMAN, ComCO / SimCO, COCO imports; the MADMAN study's model: Gurung et al.,
GCPR 2025, section 2). This module is the training loop, :class:`Trainer`; the settings are
:mod:`bindscope.training.config`, the objective and schedule :mod:`bindscope.training.objective`, the resume
checks :mod:`bindscope.training.resume` and the run folder :mod:`bindscope.training.runfolder`.

Optimiser: AdamW (no weight decay on biases, norms, 1-D parameters and the logit scale, as in open_clip's
training) with the warm-up and cosine schedule of :func:`~bindscope.training.objective.lr_factor`;
``logit_scale`` clamped to ``[0, ln 100]`` after each step (open_clip's training).

A run folder holds ``run.json`` (the resolved config), ``checkpoint.pt`` (full state, atomic), ``log.jsonl`` (one
JSON object per line: training lines with ``step, loss, loss_mean, lr, logit_scale, step_s, images_per_s,
elapsed_s, cpu_s``; evaluation lines with ``step`` and ``eval``), ``model.pt`` (final weights) and ``result.json`` (the
evaluation module's result for the final model, :mod:`bindscope.training.evaluation`). Repeating the command
resumes from ``checkpoint.pt`` after any interruption (``kill -9`` included) and the continued run equals an
uninterrupted one, ``log.jsonl`` included (batches are a pure function of seed and step; model, optimizer,
scheduler, grad scaler, RNG states and the losses since the last log line are restored; see
:mod:`bindscope.training.resume`).
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from bindscope.errors import BadInput, GenerationError
from bindscope.io.claim import check_output
from bindscope.io.ownership import resolve_output
from bindscope.training import distributed
from bindscope.training.checkpoint import (  # RUN: run.json; KEPT: OUT/checkpoints/, with keep_checkpoints
    CHECKPOINT,
    CHECKPOINT_FORMAT,
    KEPT,
    MODEL,
    MODEL_FORMAT,
    RUN,
    TrainedClipAdapter,
    autocast_dtype,
    read_weights_file,
    save_atomic,
    seed_group,
)
from bindscope.training.config import TrainConfig
from bindscope.training.evaluation import eval_summary, evaluate_run
from bindscope.training.objective import TrainingDiverged, clip_loss, lr_factor, non_finite_tensor
from bindscope.training.resume import RunLog, check_resume_state, pending_losses, rng_state, set_rng_state
from bindscope.training.report import Reporters
from bindscope.training.runfolder import LOG, RESULT, TRAIN_RUN, claim_run_folder, run_id, write_run_files

_DECISIONS = ("new", "resume", "done", "overwrite")  # the run folder's claim, as every process learns it


def _ignore_sigint(worker_id: int) -> None:
    """DataLoader workers ignore Ctrl-C: the training process handles it (between two steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Trainer:
    """One training run: validates, prepares (or resumes) the run folder, then :meth:`run` trains.

    Everything is validated before anything is written: both datasets (finished, with the needed splits), the
    device and precision, the batch size against the split size, the starting weights of a fine-tune, the run
    folder, and, under ``torchrun``, that every process runs the same run (:meth:`Group.check_same
    <bindscope.training.distributed.Group.check_same>`: the identity and the training data, before anything
    else is read).

    Args:
        config: the run's settings. overwrite: replace another run in ``config.out``. progress: a tqdm bar.
        dataset: the training dataset, opened (:class:`bindscope.format.reader.Dataset`; its manifest is then not
            read again); None: opened here.

    Attributes after construction: ``model``, ``optimizer``, ``scheduler``, ``scaler``, ``step`` (optimiser
    steps done; > 0 when resumed), ``resumed`` (bool), ``data`` (where the batches' samples come from: a
    :class:`~bindscope.training.data.StreamedSplit`, or with ``data_in_memory`` a
    :class:`~bindscope.training.data.TrainingData`).

    Raises:
        BadInput: any bad setting, a missing or unfinished dataset, processes that disagree, or a run folder
            holding another run (without ``overwrite``) or foreign files.
    """

    def __init__(self, config: TrainConfig, overwrite: bool = False, progress: bool = True, dataset=None):
        config.validate()
        world = distributed.world_from_env()
        distributed.check_world(config.batch_size, config.device, world[1])
        self.group, self._claim = distributed.Group(), None
        self.group = distributed.start(config.device, world, config.dist_timeout)  # under torchrun: see there
        try:
            self._init(config, overwrite, progress, dataset)
            self.group.agree()
        except BaseException as exc:
            try:
                if isinstance(exc, Exception) and self.group.active and not getattr(exc, "reported", False):
                    self.group.agree(error=exc)  # the other processes raise too
            finally:
                self.close(exc)
            raise

    def _init(self, config: TrainConfig, overwrite: bool, progress: bool, dataset) -> None:
        import torch

        from bindscope.format.reader import Dataset
        from bindscope.training.batches import BatchSource
        from bindscope.training.data import (
            StreamedSplit,
            check_negatives,
            load_split,
            read_tables,
            split_sha256,
            training_split,
        )
        from bindscope.training.evaluation import plan_run_evaluation
        from bindscope.training.model import build_model

        if config.threads:
            torch.set_num_threads(config.threads)
        self.device = self.group.device
        self._dtype = autocast_dtype(config.precision, self.device)
        self.progress = progress and self.group.rank == 0
        self.out = resolve_output(config.out)
        if self.group.rank == 0:
            check_output(self.out, TRAIN_RUN, overwrite)  # a foreign folder is refused before any slow work
        opened = dataset is None
        dataset = Dataset(config.data) if opened else dataset
        try:  # the training data's manifest is read once, here (or by the caller who opened ``dataset``)
            config = replace(config, split=training_split(dataset.split_names, config.split, config.data))
            data_sha = dataset.manifest["config_sha256"]
            self.group.agree()  # every process got this far: the collectives below line up
            self.group.check_same({**config.identity(), "data": split_sha256(dataset.manifest, config.split)})
            param = "eval_data" if config.eval_data is not None else "data"
            config = replace(config, eval_data=config.eval_data or config.data)
            # The evaluation module's plan: the dataset, its splits and tasks, every shard, checked before training.
            self.evaluation = plan_run_evaluation(config.eval_data, config.eval_splits, config.eval_tasks, param)
            config = replace(config, eval_splits=self.evaluation.splits, eval_tasks=self.evaluation.tasks)
            words = config.model.tokenizer == "word" and not config.model.vocabulary  # a vocabulary to build
            if config.data_in_memory:
                self.data = tables = load_split(dataset, config.split, words=words)
            else:  # the tables now, the samples of each batch when it is made
                tables = read_tables(dataset, config.split, words=words)
                self.data = StreamedSplit(dataset, tables)
        finally:
            if opened:
                dataset.close()
        check_negatives(tables, config.negatives)
        if config.model.tokenizer == "word" and not config.model.vocabulary:
            config = replace(config, model=replace(config.model, vocabulary=tables.words))
        self.config = config
        self.source = BatchSource(self.data, config.batch_size, config.seed, config.model,
                                  config.negatives_per_sample if config.negatives != "none" else 0,
                                  "stored" if config.negatives == "none" else config.negatives,
                                  self.group.rank, self.group.world_size)
        record = {"config": self._config_dict(), "identity": config.identity(), "data_config_sha256": data_sha}
        self.seed_group = seed_group(record)
        self._run_id = run_id(record)
        claim = claim_run_folder(self.out, record, overwrite) if self.group.rank == 0 else None
        seen = self._folder_view(claim)
        state = self.group.agree(seen[0])[0]  # rank 0's view, on every process
        decision, from_checkpoint = _DECISIONS[state // 2], bool(state % 2)

        # Everything is read and checked before the claim: weights, checkpoint and log that cannot be used stop the
        # run with nothing written (not even the lock or the marker).
        torch.manual_seed(config.seed)
        self.model = build_model(config.model)
        if config.init is not None and not from_checkpoint:  # a resumed run takes its weights from the checkpoint
            self._load_initial_weights()
        self._build_optimiser()
        self.step, self._losses = 0, []
        if from_checkpoint:
            self._load_checkpoint()
        self.log = RunLog(self.out / LOG, write=self.group.rank == 0)
        if self.log.write:
            self.log.records()
        self.group.agree()  # every process is ready: rank 0 claims the folder
        if claim is not None:
            self._claim = claim.__enter__()  # the lock, held until run() ends or close()
            if self._folder_view(claim) != seen:
                raise BadInput(f"out {str(self.out)!r} was changed by another command meanwhile; repeat the command",
                               param="out")
            if decision in ("new", "overwrite"):
                write_run_files(self.out, record, config.model)
        self.resumed = decision in ("resume", "done")
        self._saved_step = self.step
        self._interrupted = self._stop_agreed = False
        self.log.trim(self.step)

    def _folder_view(self, claim) -> tuple:
        """Rank 0's view of the run folder: ``(2 * decision index + resuming from a checkpoint, and when resuming
        the checkpoint's and the log's (mtime, size))``; the number is what every process learns."""
        if claim is None:
            return (0,)
        stats = ()
        if claim.decision in ("resume", "done"):
            stats = tuple((f.stat().st_mtime_ns, f.stat().st_size) if f.is_file() else None
                          for f in (self.out / CHECKPOINT, self.out / LOG))
        return (2 * _DECISIONS.index(claim.decision) + bool(stats and stats[0]), *stats)

    def _load_initial_weights(self) -> None:
        """The fine-tune's starting weights (:func:`bindscope.training.finetune.initial_weights`)."""
        from bindscope.training.finetune import initial_weights

        state = initial_weights(self.config.model, self.config.pretrained)
        if state is not None:
            try:
                self.model.load_state_dict(state)
            except RuntimeError as exc:
                raise BadInput(f"pretrained {self.config.pretrained!r} does not fit open_clip {self.config.init!r} "
                               f"({str(exc).splitlines()[0][:300]})", param="pretrained") from None

    def _build_optimiser(self) -> None:
        """Freeze what ``freeze`` says, move the model to the device, build AdamW, the schedule and the grad
        scaler."""
        import torch

        from bindscope.training.finetune import freeze, frozen_modules

        config = self.config
        freeze(self.model, config.freeze)
        self._frozen = frozen_modules(self.model, config.freeze)
        self.model = self.model.to(self.device)
        decay, no_decay = [], []
        for name, parameter in self.model.named_parameters():
            if not parameter.requires_grad:  # a frozen tower: not optimised
                continue
            excluded = parameter.ndim < 2 or "logit_scale" in name or "bias" in name or "ln" in name
            (no_decay if excluded else decay).append(parameter)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(min(config.warmup_steps, config.steps), config.steps))
        self.scaler = torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")

    def _config_dict(self) -> dict:
        data = self.config.to_dict()
        data["data"] = str(Path(self.config.data))
        return data

    def close(self, exc: BaseException | None = None) -> None:
        """Close the reporters, release the run folder's claim (after ``exc``: a folder holding nothing but the
        claim is removed, see :mod:`bindscope.io.claim`) and leave the process group (done by :meth:`run` when it
        ends); idempotent."""
        report = getattr(self, "report", None)
        if report is not None:
            report.close()
        claim, self._claim = getattr(self, "_claim", None), None
        if claim is not None:
            claim.__exit__(type(exc) if exc is not None else None, exc, None)
        group = getattr(self, "group", None)
        if group is not None:
            group.close()

    def __del__(self) -> None:
        self.close()

    # ----------------------------------------------------------------- checkpoints
    def _load_checkpoint(self) -> None:
        """Restore every state from ``checkpoint.pt``, validated first (:func:`check_resume_state`).

        Raises:
            BadInput: naming the file and the problem, for a checkpoint that is not this run's or not sound.
        """
        file = self.out / CHECKPOINT
        tensors = list(self.model.state_dict().values())
        limit = 4 * sum(t.numel() * t.element_size() for t in tensors) + (16 << 20)  # model, 2 AdamW moments
        blob, model_config = read_weights_file(file, (CHECKPOINT_FORMAT,), max_bytes=limit)
        if model_config != self.config.model:
            raise BadInput(f"{str(file)!r}: its model_config is not this run's; remove the file to start afresh")
        check_resume_state(file, blob, self)
        try:
            self.model.load_state_dict(blob["model"])
            self.optimizer.load_state_dict(blob["optimizer"])
            self.scheduler.load_state_dict(blob["scheduler"])
            self.scaler.load_state_dict(blob["scaler"])
            set_rng_state(blob["rng"])
        except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as exc:  # a check above missed it
            raise BadInput(f"{str(file)!r}: cannot be restored ({type(exc).__name__}: {exc})") from None
        self.step = blob["step"]
        self._losses = pending_losses(file, blob, self.step)

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically with the current step and every state (between optimiser steps);
        rank 0 only (every rank holds the same states)."""
        self._saved_step = self.step
        if self.group.rank:
            return
        save_atomic({"format": CHECKPOINT_FORMAT, "version": 1, "step": self.step,
                     "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                     "rng": rng_state(), "log": {"losses": list(self._losses)},
                     "model_config": self.config.model.to_dict(), "train_config": self._config_dict()},
                    self.out / CHECKPOINT)

    def save_model(self, path: Path) -> None:
        """Write the current weights as a model file (format ``MODEL_FORMAT``, with the step), atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic({"format": MODEL_FORMAT, "version": 1, "step": self.step, "model": self.model.state_dict(),
                     "model_config": self.config.model.to_dict(), "train_config": self._config_dict()}, path)

    # ----------------------------------------------------------------- training
    def adapter(self, pretrained: str = "in-memory") -> TrainedClipAdapter:
        """The current model as an encoder adapter (shares the weights; switch back with ``model.train()``)."""
        adapter = TrainedClipAdapter(self.model, self.config.model, name=str(self.out), pretrained=pretrained,
                                     device=self.device, precision=self.config.precision,
                                     batch_size=self.config.eval_batch_size)
        adapter.run = self.seed_group  # recorded in results: bindscope collect groups runs that differ only in seed
        return adapter

    def train_step(self, batch: dict) -> float:
        """One optimiser step on ``batch`` (from :class:`~bindscope.training.batches.BatchSource`); returns the
        loss (float).

        Raises:
            TrainingDiverged: the loss (before the step is taken) or a weight or buffer (after it) is NaN or
                infinite.
        """
        import torch

        device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        self.model.train()
        for module in self._frozen:  # a frozen tower's normalisation statistics stay as they are
            module.eval()
        images = batch["images"].to(self.device, non_blocking=True)
        texts = batch["texts"].to(self.device, non_blocking=True)
        with torch.autocast(device_type, dtype=self._dtype, enabled=self._dtype is not None):
            image_features = self.model.encode_image(images, normalize=True).float()
            text_features = self.model.encode_text(texts, normalize=True).float()
            num_captions = batch["num_captions"]
            if self.group.active:  # the global batch's features from every rank, with gradient
                image_features, text_features = self.group.gather_features(
                    image_features, text_features[:num_captions], text_features[num_captions:],
                    batch["negative_counts"])
                num_captions *= self.group.world_size
            loss = clip_loss(image_features, text_features, self.model.logit_scale.exp(), num_captions)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise TrainingDiverged(self.step + 1, "the loss", value, self._saved_step, self.config.lr)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.group.active:  # the mean over ranks, as DistributedDataParallel; carries any rank's stop request
            self._stop_agreed = self.group.average_gradients(list(self.model.parameters()), self._interrupted)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        with torch.no_grad():
            self.model.logit_scale.clamp_(0, math.log(100))
        self.step += 1
        bad = non_finite_tensor(self.model.state_dict())
        if bad is not None:
            raise TrainingDiverged(self.step, f"weight {bad[0]!r}", bad[1], self._saved_step, self.config.lr)
        return value

    def run(self, callback: Callable[["Trainer", float], None] | None = None) -> dict:
        """Train up to ``config.steps``, then write ``model.pt`` and evaluate into ``result.json``.

        Args:
            callback: called as ``callback(trainer, loss)`` after every step (after any checkpoint of that step).

        Returns:
            a summary dict: ``steps``, ``resumed_from``, ``train_seconds`` (wall), ``cpu_seconds`` (this process's
            CPU time in training steps, all threads), ``steps_per_s``, ``images_per_s``,
            ``final_loss``, ``truncated_captions``, ``result`` (the evaluation result) and the files written.
            On Ctrl-C (SIGINT) or SIGTERM the step under way is finished and checkpointed, then
            KeyboardInterrupt is raised (a second signal interrupts at once, without a checkpoint), so a resumed
            run equals an uninterrupted one. The run folder's claim is released when it returns or raises.

        Raises:
            TrainingDiverged: a non-finite loss or weight (nothing of that step is saved).
            GenerationError: under ``torchrun``, another process ended or did not answer within
                ``dist_timeout`` seconds (the repeated command resumes from the last checkpoint).
        """
        error = None
        try:
            return self._run(callback)
        except BaseException as exc:
            error = exc
            if self.group.active and distributed.is_collective_failure(exc):
                raise GenerationError(f"process {self.group.rank} of {self.group.world_size}: the other processes "
                                      f"stopped answering (one ended, or none answered within "
                                      f"{self.config.dist_timeout} s: {distributed.first_sentence(exc)}); repeat "
                                      "the command to resume from the last checkpoint") from exc
            raise
        finally:
            self.close(error)

    def _due(self, every: int, step: int) -> bool:
        """Step ``step`` is one of every ``every`` (0: never), after the first step and before the last."""
        return bool(every) and 0 < step < self.config.steps and step % every == 0

    def _run(self, callback) -> dict:
        import torch
        from tqdm.auto import tqdm

        config = self.config
        start = self.step
        first = self.group.rank == 0
        self.report = Reporters(config.report_to if first else None, self.out, self._run_id, self._config_dict(),
                                self.log.records() if first and config.report_to else [])
        if first and self._due(config.eval_every, start) and not self.log.has_eval(start):
            self._evaluate_step()  # the evaluation of the checkpoint's step, cut short by a kill
        # The loader draws its workers' base seed from a generator of its own, not from torch's global one (whose
        # state the checkpoint holds): a resumed run's global RNG then equals an uninterrupted run's.
        loader = torch.utils.data.DataLoader(self.source, batch_size=None, sampler=range(start, config.steps),
                                             num_workers=config.workers, worker_init_fn=_ignore_sigint,
                                             generator=torch.Generator().manual_seed(config.seed),
                                             persistent_workers=False)
        truncated = 0
        train_seconds = cpu_seconds = 0.0
        interval_images, interval_steps, interval_seconds = 0, 0, 0.0
        last_loss = float("nan")
        bar = tqdm(total=config.steps, initial=start, unit="step", desc=f"train {self.out.name}",
                   disable=not self.progress)
        self._interrupted = self._stop_agreed = False
        previous = self._catch_sigint()
        try:
            tick, cpu_tick = time.perf_counter(), time.process_time()
            for batch in loader:
                last_loss = self.train_step(batch)
                now = time.perf_counter()
                cpu_seconds += time.process_time() - cpu_tick
                train_seconds += now - tick
                interval_seconds += now - tick
                self._losses.append(last_loss)
                truncated += batch["truncated"]
                interval_images += batch["num_captions"] * self.group.world_size
                interval_steps += 1
                if self.step % config.log_every == 0 or self.step == config.steps:
                    speed = interval_images / max(interval_seconds, 1e-9)
                    self._append({"step": self.step, "loss": last_loss, "loss_mean": float(np.mean(self._losses)),
                                  "lr": self.scheduler.get_last_lr()[0],
                                  "logit_scale": float(self.model.logit_scale.detach().exp()),
                                  "step_s": interval_seconds / interval_steps, "images_per_s": speed,
                                  "elapsed_s": train_seconds, "cpu_s": cpu_seconds})
                    bar.set_postfix(loss=f"{last_loss:.4f}", img_s=f"{speed:.0f}")
                    self._losses, interval_images, interval_steps, interval_seconds = [], 0, 0, 0.0
                bar.update(1)
                if self.step % config.checkpoint_every == 0 or self.step == config.steps:
                    self.save_checkpoint()
                if self._due(config.eval_every, self.step) and self.group.rank == 0:
                    self._evaluate_step()  # the other ranks wait in the next step's gather
                if callback is not None:
                    try:
                        callback(self, last_loss)
                    except KeyboardInterrupt:  # raised between two steps: stop as on Ctrl-C
                        self._interrupted = True
                if self._stop_requested():
                    self._stop()
                tick, cpu_tick = time.perf_counter(), time.process_time()
            self._stop_agreed = self.group.any(self._interrupted)
            if self._stop_requested():  # Ctrl-C after the last step
                self._stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            bar.close()
        return self._finish(start, train_seconds, cpu_seconds, last_loss, truncated)

    def _catch_sigint(self) -> dict:
        """In the main thread: make Ctrl-C (SIGINT) and SIGTERM only set a flag that the training loop reads after
        the step under way (so a checkpoint never holds weights ahead of the optimiser state or the step count);
        in one process a second one interrupts at once, without a checkpoint. Under several processes (torchrun
        forwards both to every process, and may send them twice) they only ever set the flag, and every rank
        stops after the same step (the flag travels with the gradients). Returns the previous handlers."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def on_signal(signum, frame):
            self._interrupted = True
            if not self.group.active:
                signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else previous[signum])

        previous.update({signum: signal.signal(signum, on_signal) for signum in distributed.STOP_SIGNALS})
        return previous

    def _stop_requested(self) -> bool:
        """A stop after this step: this process's Ctrl-C or SIGTERM, or under several processes any rank's."""
        return self._stop_agreed if self.group.active else self._interrupted

    def _stop(self):
        """Checkpoint the finished step (unless it is saved already; rank 0), then raise KeyboardInterrupt on
        every rank, once the checkpoint is written."""
        if self.step != self._saved_step:
            self.save_checkpoint()
        self.group.barrier()
        raise KeyboardInterrupt

    def _evaluate(self, pretrained: str = "in-memory", rows: list | None = None) -> dict:
        """The evaluation of the current weights (its per-sample rows appended to ``rows`` when a list); torch's,
        numpy's and Python's random states are left as they were (so an evaluation, redone after a resume or not,
        never changes the training that follows)."""
        state = rng_state()
        try:
            return evaluate_run(self.evaluation, self.adapter(pretrained), rows)
        finally:
            set_rng_state(state)
            self.model.train()

    def _append(self, record: dict) -> None:
        """One line of ``log.jsonl`` (process 0), then the same record to the chosen reporters
        (:mod:`bindscope.training.report`)."""
        self.log.append(record)
        self.report.log(record)

    def _evaluate_step(self) -> None:
        """The evaluation of an ``eval_every`` step: the kept model file (with ``keep_checkpoints``), then its
        log line (the line marks the evaluation done)."""
        if self.config.keep_checkpoints:
            self.save_model(self.out / KEPT / f"step-{self.step:07d}.pt")
        self._append({"step": self.step, "eval": eval_summary(self._evaluate())})

    def _finish(self, start: int, train_seconds: float, cpu_seconds: float, last_loss: float,
                truncated: int) -> dict:
        config = self.config
        result_path = self.out / RESULT
        if self.group.rank == 0:
            if result_path.is_file():
                result = json.loads(result_path.read_text())
            else:
                self.save_model(self.out / MODEL)
                if config.keep_checkpoints:  # the final model is evaluated too: it belongs to the kept curve
                    self.save_model(self.out / KEPT / f"step-{self.step:07d}.pt")
                from bindscope.evaluation.results import write_result

                rows: list = []
                result = self._evaluate(str(self.out / MODEL), rows)
                write_result(result_path, result, overwrite=True, rows=rows)  # the rows first, then result.json
            if not self.log.has_eval(self.step):  # also when a kill came between result.json and its line
                self._append({"step": self.step, "eval": eval_summary(result)})
        self.group.barrier()  # the other ranks read rank 0's result
        if self.group.rank:
            result = json.loads(result_path.read_text())
        steps_done = self.step - start
        return {"steps": self.step, "resumed_from": start, "train_seconds": train_seconds, "cpu_seconds": cpu_seconds,
                "steps_per_s": steps_done / train_seconds if train_seconds else None,
                "images_per_s": steps_done * config.batch_size / train_seconds if train_seconds else None,
                "final_loss": last_loss, "truncated_captions": truncated, "result": result,
                "rank": self.group.rank, "processes": self.group.world_size,
                "files": {name: str(self.out / name) for name in (RUN, CHECKPOINT, MODEL, LOG, RESULT)}}
