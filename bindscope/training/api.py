"""``bindscope.train``: the library call behind ``madman train``.

Example (a notebook)::

    import bindscope
    summary = bindscope.train("data/madman", "runs/clip", steps=500, hard_negatives=True)
    summary["result"]["metrics"]["splits"]["test"]["binding"], summary["files"]["model.pt"]
"""

from __future__ import annotations

import os

from bindscope.dataset.ownership import check_output_location
from bindscope.errors import BadInput, name_list

# The training options and their defaults (``madman train`` / ``madman sweep`` show the same defaults).
DEFAULTS: dict = {
    "embed_dim": 64, "image_size": None, "vision": "vit", "vision_width": 128, "vision_layers": 4, "patch_size": 8,
    "head_width": 32, "text_width": 128, "text_layers": 4, "tokenizer": "bpe", "context_length": 32,
    "batch_size": 128, "steps": 2000, "lr": 1e-3, "weight_decay": 0.1, "warmup_steps": 100, "hard_negatives": False,
    "hard_negatives_per_sample": 1, "seed": 0,
    "device": "auto", "precision": "fp32", "workers": 0, "threads": 0, "checkpoint_every": 500, "log_every": 10,
    "eval_every": 0, "keep_checkpoints": False,
}


def train(data: str | os.PathLike, out: str | os.PathLike, *, eval_data: str | os.PathLike | None = None,
          eval_splits: list[str] | None = None, overwrite: bool = False, progress: bool = True, **options) -> dict:
    """Train a small CLIP from scratch on the ``train`` split of the MADMAN dataset ``data`` into the run
    folder ``out`` (docs/training.md); repeating the call resumes an interrupted run, a finished run returns
    its summary.

    Args:
        data: MADMAN dataset folder. out: run folder (checkpoints, log.jsonl, model.pt, result.json).
        eval_data / eval_splits: dataset and splits (a list or one name) of the final evaluation (default:
            ``data``; test and ood).
        overwrite: replace a different run in ``out``. progress: tqdm bar on stderr.
        **options: any key of :data:`DEFAULTS` (model: ``embed_dim``, ``image_size`` (pixels, None: the
            canvas rounded to the patch size), ``vision`` ``"vit"|"resnet"|"cnn"``, widths and layers,
            ``patch_size``, ``head_width``, ``tokenizer`` ``"bpe"|"word"``, ``context_length``; optimisation: ``batch_size``,
            ``steps``, ``lr``, ``weight_decay``, ``warmup_steps``, ``hard_negatives`` (NegCLIP), ``hard_negatives_per_sample``, ``seed``; runtime:
            ``device``, ``precision``, ``workers``, ``threads``, ``checkpoint_every``, ``log_every``,
            ``eval_every``, ``keep_checkpoints``).

    Returns:
        The run summary (``steps``, ``resumed_from``, ``steps_per_s``, ``final_loss``, ``result`` (the
        evaluation result dict), ``files`` (name -> path), ...; see :meth:`bindscope.training.train.Trainer.run`).

    Raises:
        BadInput: an unknown option or a bad value (named), an unreadable dataset, an unusable ``out``; all
            before training starts.
    """
    from bindscope.training.train import Trainer, build_train_config

    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise BadInput(f"unknown training option(s) {', '.join(unknown)}; allowed: {', '.join(DEFAULTS)}",
                       param=unknown[0])
    check_output_location("out", out)
    config = build_train_config(str(data), str(out), None if eval_data is None else str(eval_data),
                                name_list("eval_splits", eval_splits) or None, **options)
    return Trainer(config, overwrite=overwrite, progress=progress).run()
