"""``bindscope.train``: the library call behind ``madman train``.

Example (a notebook)::

    import bindscope
    summary = bindscope.train("data/madman", "runs/clip", steps=500, hard_negatives=True)
    summary["result"]["metrics"]["splits"]["test"]["binding"], summary["files"]["model.pt"]
"""

from __future__ import annotations

import os

from bindscope.errors import BadInput, name_list
from bindscope.io.ownership import check_output_location
from bindscope.training.options import DEFAULTS


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
        **options: any key of :data:`DEFAULTS` (the table :class:`bindscope.training.options.TrainSettings`;
            model: ``embed_dim``, ``image_size`` (pixels, None: the canvas rounded to the patch size), ``vision``
            ``"vit"|"resnet"|"cnn"``, widths and layers, ``patch_size``, ``head_width``, ``tokenizer``
            ``"bpe"|"word"``, ``context_length``; optimisation: ``batch_size``, ``steps``, ``lr`` (in (0, 10]),
            ``weight_decay`` (in [0, 10]), ``warmup_steps``, ``hard_negatives`` (NegCLIP),
            ``hard_negatives_per_sample``, ``seed``; runtime: ``device``, ``precision``, ``workers``, ``threads``,
            ``checkpoint_every``, ``log_every``, ``eval_every``, ``keep_checkpoints``).

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
