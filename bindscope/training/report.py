"""Where a training run's curves also go (``--report-to tensorboard,wandb``, open_clip_train's spelling): every
record of the run's ``log.jsonl`` (which stays the record the project reads) as scalars, keyed by its step.

- ``tensorboard``: event files in ``OUT/tensorboard`` (``torch.utils.tensorboard.SummaryWriter``; view them with
  ``tensorboard --logdir OUT/tensorboard``). A resumed run rewrites them from ``log.jsonl`` (its events from step 0
  on are purged first), so they always show what ``log.jsonl`` holds.
- ``wandb``: a Weights & Biases run in ``OUT/wandb`` (``wandb.init(dir=OUT)``; the project is ``bindscope``, the
  run's name the run folder's, its id the run's, so a resumed run continues it; ``WANDB_MODE=offline`` keeps it on
  disk for ``wandb sync``). Each record is sent once, as it is written.

Scalar names: a training line's values as ``train/<key>`` (``loss``, ``loss_mean``, ``lr``, ``logit_scale``,
``step_s``, ``images_per_s``, ``elapsed_s``, ``cpu_s``); an evaluation line's figures as ``eval/<path>`` with the
keys of its nested ``eval`` mapping joined by ``/`` (list entries by their position from 1, e.g.
``eval/tor/3/1``), figures without a value (None) left out. Only process 0 reports.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bindscope.errors import BadInput

REPORTERS = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""The names ``report_to`` takes, and the package each needs (the ``report`` extra installs both)."""
TENSORBOARD_DIR = "tensorboard"
WANDB_PROJECT = "bindscope"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def parse_report_to(text: str) -> str:
    """A ``report_to`` value checked: comma-separated names of :data:`REPORTERS` (each once), with their packages
    installed; returns the names joined by commas, in the given order.

    Raises:
        BadInput: an unknown name, or one whose package is not installed (naming the extra that installs it).
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise BadInput(f"report_to {text!r} names nothing; allowed: {', '.join(REPORTERS)}, comma-separated",
                       param="report_to")
    for name in names:
        if name not in REPORTERS:
            raise BadInput(f"report_to {name!r} is not known; allowed: {', '.join(REPORTERS)}, comma-separated",
                           param="report_to")
        if not _installed(REPORTERS[name]):
            raise BadInput(f"report_to {name!r} needs the package {REPORTERS[name]}, which is not installed; "
                           "install it with pip install 'bindscope[report]'", param="report_to")
    return ",".join(dict.fromkeys(names))


def scalars(record: dict) -> dict[str, float]:
    """The named numbers of one ``log.jsonl`` record (see the module docstring); its ``step`` is not one."""
    out: dict[str, float] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}/{key}", inner)
        elif isinstance(value, list):
            for position, inner in enumerate(value, start=1):
                walk(f"{prefix}/{position}", inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix] = float(value)

    for key, value in record.items():
        if key != "step":
            walk("eval" if key == "eval" else f"train/{key}", value)
    return out


class Reporters:
    """The reporters a run chose (none: every call does nothing). Each starts with the first record to report,
    so a run that fails before its first log line leaves no reporter's files.

    Args:
        names: a ``report_to`` value (None: none; process 0 passes the run's, the others None).
        out: the run folder. run_id: the run's id (:func:`bindscope.training.runfolder.run_id`).
        config: the run's config (sent to W&B). records: ``log.jsonl``'s records so far (a resumed run's; rewritten
            to TensorBoard at once).
    """

    def __init__(self, names: str | None, out: Path, run_id: str, config: dict, records: list[dict]):
        self.chosen = parse_report_to(names).split(",") if names else []
        self.out, self.run_id, self.config = Path(out), run_id, config
        self.tensorboard = self.wandb = None
        if records and "tensorboard" in self.chosen:
            self._start_tensorboard(purge=True)
            for record in records:
                self._write(record)
            self.tensorboard.flush()

    def _start_tensorboard(self, purge: bool = False) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.tensorboard = SummaryWriter(log_dir=str(self.out / TENSORBOARD_DIR), purge_step=0 if purge else None)

    def _write(self, record: dict) -> None:
        for tag, value in scalars(record).items():
            self.tensorboard.add_scalar(tag, value, record["step"])

    def log(self, record: dict) -> None:
        """Report one ``log.jsonl`` record (after it was appended there)."""
        if "tensorboard" in self.chosen:
            if self.tensorboard is None:
                self._start_tensorboard()
            self._write(record)
            self.tensorboard.flush()
        if "wandb" in self.chosen:
            if self.wandb is None:
                import wandb

                self.wandb = wandb.init(project=WANDB_PROJECT, dir=str(self.out), name=self.out.name,
                                        id=self.run_id[:32], resume="allow", config=self.config)
            self.wandb.log(scalars(record), step=record["step"])

    def close(self) -> None:
        """Flush and close every reporter (idempotent)."""
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
