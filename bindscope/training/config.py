"""The settings of one ``bindscope train`` run: :class:`TrainConfig` and :func:`build_train_config`, which makes it
from option values (the table :data:`bindscope.training.options.OPTIONS`: every value checked against its row's
range before anything is read or written).

The run's *identity* (:meth:`TrainConfig.identity`: the split, the model and the table rows marked ``identity``,
with the training data's ``config_sha256``) is what a resumed run must share with the interrupted one and what
every process of a ``torchrun`` job must share with process 0 (:mod:`bindscope.training.distributed`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from bindscope.errors import BadInput
from bindscope.training.model import ModelConfig
from bindscope.training.options import (
    DEFAULTS,
    EVAL_BATCH_SIZE,
    FINETUNE_LR,
    IDENTITY_KEYS,
    MODEL_KEYS,
    OPTIONS,
    check_options,
    option_fields,
)

_RUN_GROUPS = ("finetune", "train", "process")  # the table rows that are TrainConfig fields (the model's are not)
_RUN_KEYS = tuple(row.name for row in OPTIONS if row.group in _RUN_GROUPS)
# Fine-tuning fields left out of to_dict() where unset, so a small CLIP's run.json is as it was before they existed.
_FINETUNE_UNSET = {"init": None, "pretrained": None, "pretrained_sha256": None, "freeze": "none"}


@dataclass
@option_fields(*_RUN_GROUPS)
class TrainConfig:
    """Settings of one ``bindscope train`` run. Besides the fields below, every training option of the groups
    ``finetune``, ``train`` and ``process`` of :data:`bindscope.training.options.OPTIONS` is a field, with the
    table's default and range (``batch_size``, ``steps``, ``lr``, ``weight_decay``, ``warmup_steps``,
    ``negatives``, ``negatives_per_sample``, ``seed``, ``precision``, ``device``, ``workers``, ``threads``,
    ``dist_timeout``, ``checkpoint_every``, ``log_every``, ``eval_every``, ``keep_checkpoints``, ``init``,
    ``pretrained``, ``freeze``; their help there says what each does).

    Attributes:
        data: training dataset folder [DATA]: MADMAN, ComCO / SimCO or a COCO import.
        out: run folder [--out].
        eval_data: evaluation dataset folder [--eval]; default ``data``. Evaluated on ``eval_splits``.
        eval_splits: splits to evaluate [--eval-split]; MADMAN default: those of ``"test"`` and ``"ood"`` that
            exist; ComCO / COCO: one split of scenes (default ``scenes`` or the only split).
        eval_tasks: ComCO / COCO evaluation tasks [--eval-tasks] (default: those ``comco eval`` runs on the
            dataset; :mod:`bindscope.training.evaluation`).
        model: the architecture (:class:`ModelConfig`) [--embed-dim, --image-size, --vision, ...]; with ``init``
            the open_clip model's (:mod:`bindscope.training.finetune`).
        split: its split trained on [--split]; None: ``train``, else ``scenes``, else the only split
            (:func:`bindscope.training.data.training_split`; the trainer stores the resolved name).
        eval_batch_size: images or texts per forward pass during evaluation (not an option).
        pretrained_sha256: the sha256 of a ``pretrained`` weights file (resolved by :func:`build_train_config`).
    """

    data: str
    out: str
    eval_data: str | None = None
    eval_splits: list[str] | None = None
    eval_tasks: list[str] | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    split: str | None = None
    eval_batch_size: int = EVAL_BATCH_SIZE
    pretrained_sha256: str | None = None

    def validate(self) -> None:
        """Raise BadInput naming the first value outside its option's range, or settings that contradict each
        other."""
        for row in OPTIONS:
            if row.group in _RUN_GROUPS:
                row.check(getattr(self, row.name))
        if not isinstance(self.eval_batch_size, int) or isinstance(self.eval_batch_size, bool) or \
                self.eval_batch_size < 1:
            raise BadInput(f"eval_batch_size must be an integer >= 1, got {self.eval_batch_size!r}",
                           param="eval_batch_size")
        if self.pretrained is not None and self.init is None:
            raise BadInput("pretrained weights need init=MODEL (an open_clip model to fine-tune)", param="pretrained")
        if (self.init or "") != self.model.open_clip:
            raise BadInput(f"init {self.init!r} and the model config's open_clip {self.model.open_clip!r} differ",
                           param="init")

    def identity(self) -> dict:
        """The values a resumed run must share with the interrupted one, and every process of a run with
        process 0: the split, the model, the options marked ``identity`` (the fine-tuning ones where set)."""
        data = json.loads(json.dumps(self.to_dict()))  # as stored in run.json (tuples become lists)
        return {key: data[key] for key in ("split", *IDENTITY_KEYS, "model", "pretrained_sha256") if key in data}

    def to_dict(self) -> dict:
        """The config as plain values, as ``run.json`` holds it (the fine-tuning keys only where set)."""
        data = asdict(self)
        data["model"] = self.model.to_dict()
        for key, unset in _FINETUNE_UNSET.items():
            if data[key] == unset:
                del data[key]
        return data


def build_train_config(data: str, out: str, eval_data: str | None, eval_splits: list[str] | None,
                       canvas: int | None = None, split: str | None = None, eval_tasks: list[str] | None = None,
                       manifest: dict | None = None, **options) -> TrainConfig:
    """A validated :class:`TrainConfig` from option values (the names of
    :data:`bindscope.training.options.OPTIONS`; an option left out takes the table's default, ``lr`` with
    ``init`` :data:`~bindscope.training.options.FINETUNE_LR`). Every value is checked against its row before
    anything is read.

    Args:
        canvas: the training images' side in pixels, used for the default ``image_size``; else read from
            ``manifest`` (the training dataset's, when the caller has read it) or from the dataset's manifest.
        split / eval_tasks: :attr:`TrainConfig.split` and :attr:`TrainConfig.eval_tasks`.

    Raises:
        BadInput: an unknown option or a bad value (named), small-CLIP model options with ``init``, or a dataset
            that cannot be read.
    """
    check_options(options)
    model_options = sorted(set(options) & {*MODEL_KEYS, "image_size"})
    given = options
    options = {**DEFAULTS, **options}
    run = {key: options[key] for key in _RUN_KEYS}
    if options["init"] is not None:
        if model_options:
            raise BadInput(f"{model_options[0]} does not apply with init={options['init']!r}: a fine-tuned open_clip "
                           f"model keeps its own architecture ({', '.join(model_options)} given)",
                           param=model_options[0])
        from bindscope.training.finetune import open_clip_model_config

        model, weights, digest = open_clip_model_config(options["init"], options["pretrained"])
        run.update(init=model.open_clip, pretrained=weights, lr=given.get("lr", FINETUNE_LR))
        extra = {"pretrained_sha256": digest}
    else:
        model, extra = _small_clip_config(data, canvas, manifest, options), {}
    config = TrainConfig(data=data, out=out, eval_data=eval_data, eval_splits=eval_splits, eval_tasks=eval_tasks,
                         split=split, model=model, **run, **extra)
    config.validate()
    return config


def _small_clip_config(data: str, canvas: int | None, manifest: dict | None, options: dict) -> ModelConfig:
    """The small CLIP's :class:`ModelConfig` of the option values (``image_size`` None: ``canvas``, else the
    smaller side of the dataset's images, rounded down to what the vision tower allows)."""
    image_size = options["image_size"]
    if image_size is None:
        if canvas is None:
            if manifest is None:
                from bindscope.format.manifest import load_manifest

                manifest = load_manifest(data)
            canvas = min(manifest["image_size"])
        step = {"vit": options["patch_size"], "resnet": 32, "cnn": 8}[options["vision"]]
        image_size = max(step, canvas - canvas % step)
    return ModelConfig(image_size=image_size, **{key: options[key] for key in MODEL_KEYS})
