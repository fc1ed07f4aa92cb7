"""The training options of ``bindscope train`` / ``madman train`` / ``madman sweep`` / :func:`bindscope.train`: one
table, one row per option (name, flag, type, default, range, help), written once.

Everything else is made from :data:`OPTIONS`: the command-line options (:func:`bindscope.cli.train.training_options`:
flags, types, defaults, ranges and help), the fields of :class:`bindscope.training.model.ModelConfig` (the rows of
group ``"model"``) and of :class:`bindscope.training.config.TrainConfig` (the other rows; :func:`option_fields`),
their checks (:meth:`Option.check`, before any work), the run's identity (the rows with ``identity``), the
keyword options :func:`bindscope.train` accepts (:data:`DEFAULTS`) and the option table of docs/training.md
(tests/test_training_settings.py compares it). A new option costs one row here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Callable

from bindscope.errors import DEVICE_GRAMMAR, PRECISIONS, BadInput, check_device, check_int
from bindscope.limits import MAX_COUNT, MAX_JOBS, MAX_SEED
from bindscope.training.report import parse_report_to

VISION_TOWERS = ("vit", "resnet", "cnn")  # --vision
TOKENIZERS = ("bpe", "word")  # --tokenizer
NEGATIVES = ("none", "stored", "shuffled")  # --negatives
FREEZE = ("none", "image", "text")  # --freeze
MAX_STEPS = 10_000_000  # steps and step intervals: a bound on every loop over steps
FINETUNE_LR = 1e-6
"""The default peak learning rate of a fine-tune (``init`` given, ``lr`` not): the value of NegCLIP's published
training command (Yuksekgonul et al., ICLR 2023; github.com/mertyg/vision-language-models-are-bows, README:
ViT-B-32 from ``openai``, batch 256, 5 COCO epochs, warm-up 50, ``--lr=1e-6``), the MADMAN paper's fine-tuned
baseline. From scratch the default is the table's 1e-3, far too high for pretrained weights."""


@dataclass(frozen=True)
class Option:
    """One training option.

    Attributes:
        name: the keyword of :func:`bindscope.train` and the config field. flag: the command-line flag.
        type: ``int``, ``float``, ``str`` or ``bool``. default: its value when not given (None: resolved later,
            as the help says).
        help: the command-line help (ending in ``.`` or ``]``).
        low, high: the allowed range of a number (inclusive; ``low_open``: ``low`` itself excluded); unit: the
            unit named in messages. choices: the allowed words of a ``str`` option (empty: any text).
        group: ``"model"`` (a :class:`~bindscope.training.model.ModelConfig` field), ``"finetune"`` (offered by
            the train commands, not by ``madman sweep``), ``"train"``, or ``"process"`` (how this process runs:
            may differ between the processes of one run and between an interrupted and a resumed command).
        identity: part of the run's identity (a resumed run, and every process of one run, must share it; the
            model rows always are, as the ``model`` entry).
        parse: for a text with a grammar of its own, the function that checks it (raising BadInput).
    """

    name: str
    flag: str
    type: type
    default: object
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    unit: str = ""
    choices: tuple[str, ...] = ()
    group: str = "train"
    identity: bool = False
    parse: Callable | None = None

    @property
    def nullable(self) -> bool:
        """None is allowed (and means "resolved later")."""
        return self.default is None

    def range_text(self) -> str:
        """The allowed values in words, e.g. ``an integer in 1..64`` or ``a finite number in (0, 10]``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.type is int:
            return f"an integer in {self.low}..{self.high}" + (f" {self.unit}" if self.unit else "")
        if self.type is float:
            return f"a finite number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        return "true or false" if self.type is bool else "a text"

    def check(self, value, allow_none: bool | None = None):
        """``value`` if this option allows it (None where :attr:`nullable`, or as ``allow_none`` says); else
        :class:`BadInput` naming the option, the value and what is allowed."""
        if value is None and (self.nullable if allow_none is None else allow_none):
            return value
        if self.type is int:
            return check_int(self.name, value, int(self.low), int(self.high), self.unit)
        if self.type is float:
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
                    self.low < value if self.low_open else self.low <= value) and value <= self.high:
                return value
        elif self.type is bool:
            if isinstance(value, bool):
                return value
        elif isinstance(value, str):
            if self.parse is not None:
                return self.parse(value)
            if not self.choices or value in self.choices:
                return value
            raise BadInput(f"{self.name} {value!r} is not known; allowed: {', '.join(self.choices)}", param=self.name)
        raise BadInput(f"{self.name} {value!r} is not allowed; use {self.range_text()}", param=self.name)


def _int(name, flag, default, low, high, help, unit="", **extra) -> Option:
    return Option(name, flag, int, default, help, low, high, unit=unit, **extra)


def _words(name, flag, default, choices, help, **extra) -> Option:
    return Option(name, flag, str, default, help, choices=choices, **extra)


OPTIONS: tuple[Option, ...] = (
    # fine-tuning: an open_clip model instead of the small CLIP (see bindscope.training.finetune)
    Option("init", "--init", str, None, group="finetune", identity=True, help=(
        "Fine-tune this open_clip model (a name open_clip.list_models() knows, e.g. ViT-B-32) instead of training "
        "a small CLIP from scratch; its own image size, normalisation and tokenizer are used, and the small "
        "CLIP's model options do not apply.")),
    Option("pretrained", "--pretrained", str, None, group="finetune", identity=True, help=(
        "Starting weights of --init: an open_clip pretrained tag (e.g. openai), a local state-dict or "
        "open_clip_train checkpoint file, hf-hub:<org>/<repo>, or none (random weights, seeded by --seed) "
        "[default: the model's default tag, openai where listed].")),
    _words("freeze", "--freeze", "none", FREEZE, group="finetune", identity=True, help=(
        "With or without --init: keep the image or the text tower's weights fixed (not optimised; its "
        "normalisation statistics fixed too), or none.")),
    # model (see bindscope.training.model.ModelConfig)
    _int("embed_dim", "--embed-dim", 64, 1, 8192, "Joint embedding size D.", "features", group="model"),
    _int("image_size", "--image-size", None, 1, 4096, (
        "Model input side in pixels [default: the dataset's canvas, rounded down to a multiple of the patch size "
        "(resnet: of 32, cnn: of 8)]."), "pixels", group="model"),
    _words("vision", "--vision", "vit", VISION_TOWERS, group="model", help=(
        "Image tower: open_clip VisionTransformer, open_clip ModifiedResNet (CNN), or a light CNN (cnn) for CPU "
        "training.")),
    _int("vision_width", "--vision-width", 128, 1, 8192,
         "ViT width (resnet: base channels; cnn: channels at 1/8 resolution).", "features", group="model"),
    _int("vision_layers", "--vision-layers", 4, 1, 64,
         "ViT blocks (resnet: blocks per stage; cnn: residual blocks at 1/8 resolution).", "blocks", group="model"),
    _int("patch_size", "--patch-size", 8, 1, 4096, "ViT patch side in pixels.", "pixels", group="model"),
    _int("head_width", "--head-width", 32, 1, 8192, (
        "Features per attention head in both transformers (heads = width / head width; both widths must be "
        "multiples of it)."), "features", group="model"),
    _int("text_width", "--text-width", 128, 1, 8192, "Text transformer width.", "features", group="model"),
    _int("text_layers", "--text-layers", 4, 1, 64, "Text transformer blocks.", "blocks", group="model"),
    _words("tokenizer", "--tokenizer", "bpe", TOKENIZERS, group="model", help=(
        "bpe: open_clip's CLIP BPE (49,408 tokens); word: one token per word of a vocabulary built from the "
        "training captions (saved as OUT/vocab.json and in the model).")),
    _int("context_length", "--context-length", 32, 3, 4096, (
        "Text tokens per caption (start/end included); longer captions are truncated and counted."), "tokens",
         group="model"),
    # optimisation
    _int("batch_size", "--batch-size", 128, 1, 65536, "Images per step (all processes together).", "images",
         identity=True),
    _int("steps", "--steps", 2000, 1, MAX_STEPS, "Optimiser steps.", "steps", identity=True),
    Option("lr", "--lr", float, 1e-3, (
        f"Peak learning rate (AdamW); a fine-tune (--init) without --lr takes {FINETUNE_LR:g}, NegCLIP's."),
           0.0, 10.0, low_open=True, identity=True),
    Option("weight_decay", "--weight-decay", float, 0.1, "AdamW weight decay.", 0.0, 10.0, identity=True),
    _int("warmup_steps", "--warmup", 100, 0, MAX_STEPS, "Linear warm-up steps, then cosine decay to 0.", "steps",
         identity=True),
    _words("negatives", "--negatives", "none", NEGATIVES, identity=True, help=(
        "NegCLIP hard negatives, extra image->text candidates: none; stored: the dataset's binding negatives "
        "(attribute values swapped between two objects: MADMAN, ComCO rendered with --attributes); shuffled: "
        "each caption with its nouns shuffled among themselves and its attribute words among themselves "
        "(NegCLIP's recipe; nouns and attribute words from the dataset's category names and attribute values), "
        "seeded.")),
    _int("negatives_per_sample", "--negatives-per-sample", 1, 1, 64,
         "Hard negatives added per sample with --negatives stored|shuffled.", "captions", identity=True),
    _int("seed", "--seed", 0, 0, MAX_SEED, "Seeds weights, batch order, hard-negative choice.", identity=True),
    _words("precision", "--precision", "fp32", PRECISIONS, identity=True,
           help="Autocast precision (fp16 needs CUDA)."),
    # how this process runs
    Option("device", "--device", str, "auto", DEVICE_GRAMMAR + ".", group="process", parse=check_device),
    _int("workers", "--loader-jobs", 0, 0, 256, (
        "DataLoader worker processes reading batches from the shards and building them, each up to 2 batches "
        "ahead (0 = in the training process)."), "processes", group="process"),
    Option("data_in_memory", "--data-in-memory", bool, False, (
        "Read the training split into memory once (images as one uint8 array) instead of reading each batch from "
        "the shards; the same batches, losses and weights. Faster only where reading the batches is slower "
        "than the model's step (a small model on the CPU, no --loader-jobs); memory grows with the split."),
           group="process"),
    _int("threads", "--threads", 0, 0, 1024,
         "torch intra-op CPU threads (0 = torch's default); 1 is often fastest on a busy machine.", "threads",
         group="process"),
    Option("report_to", "--report-to", str, None, (
        "Also report log.jsonl's records (loss, learning rate, logit scale, step time, evaluations) to tensorboard "
        "(event files in OUT/tensorboard) and/or wandb (a Weights & Biases run in OUT/wandb), comma-separated; "
        "needs pip install 'bindscope[report]'."), group="process", parse=parse_report_to),
    _int("dist_timeout", "--dist-timeout", 600, 10, 86400, (
        "Under torchrun: seconds a process waits for the others in one collective (e.g. while process 0 "
        "evaluates) before the run stops with an error."), "seconds", group="process"),
    # bookkeeping
    _int("checkpoint_every", "--checkpoint-every", 500, 1, MAX_STEPS,
         "Steps between checkpoints (also written on Ctrl-C and at the end).", "steps"),
    _int("log_every", "--log-every", 10, 1, MAX_STEPS, "Steps between log lines.", "steps"),
    _int("eval_every", "--eval-every", 0, 0, MAX_STEPS,
         "Steps between evaluations logged to log.jsonl (0 = final model only).", "steps"),
    Option("keep_checkpoints", "--keep-checkpoints", bool, False, (
        "Also keep each evaluated model (every --eval-every steps, and the final one) as "
        "OUT/checkpoints/step-<step>.pt (for `madman eval --model 'OUT/checkpoints/*.pt'` and `bindscope "
        "collect`).")),
)
"""The table, in the order of the command-line help."""

OPTION: dict[str, Option] = {row.name: row for row in OPTIONS}
DEFAULTS: dict = {row.name: row.default for row in OPTIONS}
"""``{option: default}``: the keyword options :func:`bindscope.train` accepts, in the table's order."""
HELP: dict = {row.name: row.help for row in OPTIONS}
"""The command-line help of each option."""
MODEL_KEYS = tuple(row.name for row in OPTIONS if row.group == "model" and row.name != "image_size")
"""The options that are fields of :class:`bindscope.training.model.ModelConfig` as they are (``image_size`` is one
too, resolved from the dataset when None)."""
FINETUNE_KEYS = tuple(row.name for row in OPTIONS if row.group == "finetune")
"""The fine-tuning options, offered by ``bindscope train`` and ``madman train`` (not by ``madman sweep``, which
trains small CLIPs from scratch)."""
PROCESS_KEYS = tuple(row.name for row in OPTIONS if row.group == "process")
"""The options that may differ between the processes of a run and between an interrupted and a resumed command."""
IDENTITY_KEYS = tuple(row.name for row in OPTIONS if row.identity)
"""The options of the run's identity besides its split and model (:meth:`TrainConfig.identity`)."""

TrainSettings = dataclasses.make_dataclass(
    "TrainSettings", [(row.name, row.type if not row.nullable else row.type | None,
                       dataclasses.field(default=row.default)) for row in OPTIONS], frozen=True,
    namespace={"__doc__": "The default of every training option (a frozen dataclass made from :data:`OPTIONS`)."})
SETTINGS = TrainSettings()

SWEEP_RANGES = {"num_train": (1, MAX_COUNT, "images"), "num_test": (1, MAX_COUNT, "images"),
                "data_seed": (0, MAX_SEED, ""), "jobs": (1, MAX_JOBS, "worker processes")}
"""``madman sweep``'s own numeric settings (``--num-train``, ``--num-test``, ``--data-seed``, ``--jobs``): their
allowed ``(low, high, unit)``, checked before any work."""
MAX_SWEEP_VALUES = 100
"""Property values, and seeds, per sweep: a bound on the points (values x seeds) a sweep trains."""
MODEL_IMAGE_SIZE = 64
"""``ModelConfig.image_size`` when no dataset gives a canvas (a model built outside ``madman train``)."""
MLP_RATIO = 2.0
"""Transformer MLP hidden size / width in both towers (not an option)."""
EVAL_BATCH_SIZE = 256
"""Images or texts per forward pass when a run evaluates its model (not an option)."""


def check_options(values: dict) -> None:
    """Check every table option in ``values`` (a name -> value mapping) by its row, in the table's order.

    Raises:
        BadInput: an unknown name (all allowed ones listed), or the first value outside its row's range.
    """
    unknown = sorted(set(values) - set(OPTION))
    if unknown:
        raise BadInput(f"unknown training option(s) {', '.join(unknown)}; allowed: {', '.join(OPTION)}",
                       param=unknown[0])
    for row in OPTIONS:
        if row.name in values:
            row.check(values[row.name])


def option_fields(*groups: str):
    """A class decorator, applied under ``@dataclass``: adds one field per row of ``groups`` (its type and
    default from :data:`OPTIONS`) after the class's own fields; a field the class declares itself keeps the
    class's default (e.g. ``ModelConfig.image_size``, which is resolved and never None)."""

    def add(cls):
        own = dict(cls.__dict__.get("__annotations__", {}))
        annotations = dict(own)
        for row in OPTIONS:
            if row.group in groups and row.name not in own:
                annotations[row.name] = f"{row.type.__name__} | None" if row.nullable else row.type.__name__
                setattr(cls, row.name, row.default)
        cls.__annotations__ = annotations
        return cls

    return add


def options_table_markdown() -> str:
    """The option table of docs/training.md: flag, default, allowed values, help (one row per option)."""
    lines = ["| flag | default | allowed | what |", "|---|---|---|---|"]
    for row in OPTIONS:
        default = "unset" if row.nullable else "off" if row.type is bool else f"`{row.default}`"
        allowed = "flag" if row.type is bool else "`auto`, `cpu`, `cuda`, `cuda:N`" if row.name == "device" else \
            "`tensorboard`, `wandb`, comma-separated" if row.name == "report_to" else row.range_text()
        lines.append(f"| `{row.flag}` | {default} | {allowed} | {row.help.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"
