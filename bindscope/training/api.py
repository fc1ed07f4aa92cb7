"""``bindscope.train``: the library call behind ``bindscope train`` and ``madman train``.

Example (a notebook)::

    import bindscope
    summary = bindscope.train("data/madman", "runs/clip", steps=500, negatives="stored")
    summary["result"]["metrics"]["splits"]["test"]["binding"], summary["files"]["model.pt"]
    bindscope.train("data/simco", "runs/simco", eval_data="data/simco-eval", negatives="shuffled")
"""

from __future__ import annotations

import os

from bindscope.errors import BadInput, name_list
from bindscope.io.ownership import check_output_location
from bindscope.training.options import check_options


def train(data: str | os.PathLike, out: str | os.PathLike, *, split: str | None = None,
          eval_data: str | os.PathLike | None = None, eval_splits: list[str] | str | None = None,
          eval_tasks: list[str] | str | None = None, overwrite: bool = False, progress: bool = True,
          **options) -> dict:
    """Train a small CLIP from scratch on a split of the dataset ``data`` (any bindscope dataset with captions:
    MADMAN, ComCO / SimCO with or without attributes, a COCO import) into the run folder ``out``
    (docs/training.md); repeating the call resumes an interrupted run, a finished run returns its summary.

    Args:
        data: dataset folder. split: its split trained on (default ``train``, else ComCO's ``scenes``, else the
            only split, e.g. a COCO import's ``val2017``). out: run folder (checkpoints, log.jsonl, model.pt,
            result.json).
        eval_data / eval_splits / eval_tasks: dataset, splits (a list or one name) and tasks of the evaluations
            (default ``data``): a MADMAN dataset is scored for recognition and binding on its test and ood
            splits; a ComCO dataset or COCO import on one split of scenes with ``comco eval``'s tasks (TOR, IOR
            with a references split, I2TOR, matching, binding with attributes; ``eval_tasks`` a list or a
            comma-separated string); see :mod:`bindscope.training.evaluation`.
        overwrite: replace a different run in ``out``. progress: tqdm bar on stderr.
        **options: any option of the table :data:`bindscope.training.options.OPTIONS` (defaults, ranges and
            meaning there and in docs/training.md; model: ``embed_dim``, ``image_size`` (pixels, None: the canvas
            rounded to the patch size), ``vision`` ``"vit"|"resnet"|"cnn"``, widths and layers, ``patch_size``,
            ``head_width``, ``tokenizer`` ``"bpe"|"word"``, ``context_length``; fine-tuning: ``init``,
            ``pretrained``, ``freeze``; optimisation: ``batch_size``, ``steps``, ``lr`` (in (0, 10]),
            ``weight_decay`` (in [0, 10]), ``warmup_steps``, ``negatives`` (NegCLIP hard negatives: ``"none"``,
            ``"stored"`` (the dataset's binding negatives), ``"shuffled"`` (made from each caption)),
            ``negatives_per_sample``, ``seed``; runtime: ``device``, ``precision``, ``workers``, ``threads``,
            ``dist_timeout``, ``checkpoint_every``, ``log_every``, ``eval_every``, ``keep_checkpoints``).

    Returns:
        The run summary (``steps``, ``resumed_from``, ``steps_per_s``, ``final_loss``, ``result`` (the
        evaluation result dict), ``files`` (name -> path), ...; see :meth:`bindscope.training.train.Trainer.run`).

    Raises:
        BadInput: an unknown option or a value outside its range (named), an unreadable dataset or split, an
            evaluation the evaluation module cannot run, ``negatives="stored"`` on a split without binding
            negatives, an unusable ``out``, processes of a ``torchrun`` job that disagree; all before anything
            is written.
        TrainingDiverged: the loss or a weight stopped being finite.
    """
    from bindscope.format.reader import Dataset
    from bindscope.training.config import build_train_config
    from bindscope.training.train import Trainer

    check_options(options)  # every value in its range before anything is read
    check_output_location("out", out)
    if isinstance(eval_tasks, str):
        eval_tasks = [t.strip() for t in eval_tasks.split(",") if t.strip()]
    if split is not None and not isinstance(split, str):
        raise BadInput(f"split {split!r} is not allowed; give a split name", param="split")
    with Dataset(data) as dataset:  # the training data's manifest, read once
        config = build_train_config(str(data), str(out), None if eval_data is None else str(eval_data),
                                    name_list("eval_splits", eval_splits) or None, split=split,
                                    eval_tasks=name_list("eval_tasks", eval_tasks) or None,
                                    manifest=dataset.manifest, **options)
        trainer = Trainer(config, overwrite=overwrite, progress=progress, dataset=dataset)
    return trainer.run()
