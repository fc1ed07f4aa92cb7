"""Evaluations: recognition and binding (MADMAN), TOR / IOR / I2TOR / matching and attention (ComCO), the
legibility audit, caption bias, ARO / SugarCrepe, and the tables of results (docs/evaluation.md)."""

from dataclasses import dataclass, field

from bindscope.errors import (DEVICE_GRAMMAR, PRECISIONS, BadInput, check_device, check_int, check_number,
                              check_precision)
from bindscope.limits import MAX_BATCH, MAX_COUNT, MAX_LR, MAX_SEED

AUDIT_SHIFT = 3
"""Default largest random offset (pixels) of a legibility-audit training crop (docs/madman.md); here, in the
package that imports nothing heavy, so that ``madman audit --help`` shows it without loading the audit."""
AUDIT_RANGES = {"epochs": (1, 1000), "batch_size": (2, MAX_BATCH), "lr": (0.0, MAX_LR), "width": (1, 256),
                "seed": (0, MAX_SEED), "threads": (1, 256), "shift": (0, 16),
                "max_train_objects": (1, MAX_COUNT), "max_test_objects": (1, MAX_COUNT)}
"""The allowed ``(low, high)`` of every numeric setting of the legibility audit (``lr``: low excluded), the one
place both :class:`AuditSettings` and ``madman audit`` read."""

IMAGE_FITS = ("centre-crop", "letterbox")
"""How ``bindscope bench`` makes an image (ARO VG: its box) the model's square input (:mod:`bindscope.evaluation.bench`);
here, beside the audit's ranges, so that the commands' options need no heavy import."""
PROTOCOLS = ("bindscope", "clip-oscope", "both")
"""The statistics of TOR and IOR: bindscope's, the ComCO authors' scripts' (:mod:`bindscope.evaluation.clip_oscope`),
or both."""
DETECTION_THRESHOLD = 0.1
"""Default score (0..1) from which an open-vocabulary detector's object counts as found (``comco t2i-score``,
``bindscope caption-bias`` on image-caption pairs): the value of the transformers OWLv2 examples
(:mod:`bindscope.evaluation.detection`)."""


def _audit(flag: str, help: str, **more) -> dict:
    name = flag[2:].replace("-", "_")
    return {"flag": flag, "help": help, **({"range": AUDIT_RANGES[name]} if name in AUDIT_RANGES else {}), **more}


@dataclass(frozen=True)
class AuditSettings:
    """The settings of the legibility audit (:func:`bindscope.evaluation.audit.audit_madman`, ``madman audit``,
    whose options are generated from these fields: :func:`bindscope.cli.options.settings_options`).

    Attributes:
        train_split / test_split: the split the oracle is trained on and the (different) split it is tested on.
        epochs: passes over the training objects. batch_size: objects per step. lr: peak learning rate of Adam's
            one-cycle schedule. width: channels of the first of four conv stages. seed: seed of the weights and
            the visiting order. Each within its range in :data:`AUDIT_RANGES` (epochs 1..1000, batch size
            2..65,536, lr in (0, 10], width 1..256, seed 0..2**32-1).
        max_train_objects / max_test_objects: use only the first N visible objects of the split (None: all).
        threads: torch CPU threads (1..256). The result depends on it (the order of floating-point sums); more
            threads than idle cores make torch many times slower, so the default is 1.
        shift: largest random offset (pixels, 0..16) of a training crop per axis.

    Raises:
        BadInput: a value outside its range (``param`` names the field), at construction.
    """

    train_split: str = field(default="train", metadata=_audit("--train-split", "Split the oracle is trained on."))
    test_split: str = field(default="test", metadata=_audit("--test-split", "Split the oracle is tested on."))
    epochs: int = field(default=8, metadata=_audit("--epochs", "Passes over the training objects."))
    batch_size: int = field(default=128, metadata=_audit("--batch-size", "Objects per training step."))
    lr: float = field(default=3e-3, metadata=_audit("--lr", "Peak learning rate (Adam, one-cycle schedule).",
                                                     open=(True, False)))
    width: int = field(default=32, metadata=_audit(
        "--width", "Channels of the first of four conv stages (then 2x, 4x, 8x)."))
    seed: int = field(default=0, metadata=_audit(
        "--seed", "Seed of the weights and the visiting order (same seed, same result)."))
    max_train_objects: int | None = field(default=None, metadata=_audit(
        "--max-train-objects", "Train on the first N visible objects only (default: all)."))
    max_test_objects: int | None = field(default=None, metadata=_audit(
        "--max-test-objects", "Test on the first N visible objects only (default: all)."))
    threads: int = field(default=1, metadata=_audit(
        "--threads", "torch CPU threads; the result depends on it. More than the idle cores slows torch down."))
    shift: int = field(default=AUDIT_SHIFT, metadata=_audit(
        "--shift", "Largest random offset (pixels, per axis) of a training crop; 0 = no augmentation."))

    def __post_init__(self):
        for name in ("epochs", "batch_size", "width", "seed", "threads", "shift", "max_train_objects",
                     "max_test_objects"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), *AUDIT_RANGES[name])
        if check_number("lr", self.lr) > AUDIT_RANGES["lr"][1]:
            raise BadInput(f"lr {self.lr!r} is not allowed; use a finite number in (0, {AUDIT_RANGES['lr'][1]:g}]",
                           param="lr")


def check_threshold(threshold) -> float:
    """``threshold`` as a float if it is a number in 0..1 (a detector score); BadInput otherwise."""
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0 <= threshold <= 1:
        return float(threshold)
    raise BadInput(f"threshold {threshold!r} is not allowed; use a number in 0..1 (a detector score)",
                   param="threshold")


@dataclass(frozen=True)
class PairSettings:
    """How caption bias is measured on image-caption pairs without annotations (:func:`bindscope.caption_bias`,
    ``bindscope caption-bias``, whose options are generated from these fields:
    :func:`bindscope.cli.options.settings_options`); a bindscope dataset's object table needs none of them.

    Attributes:
        detector: an OWLv2 / OWL-ViT repository id or folder (required for pairs). segmenter: a SAM repository id
            or folder whose masks give the areas (None: the detector's boxes).
        threshold: detector score from which an object is found, 0..1 (None: :data:`DETECTION_THRESHOLD`).
        caption_objects: ``lexicon`` or ``spacy``: how a caption's objects are found. names: with ``lexicon``, the
            categories (``coco``, ``comco72``, a file). limit: read at most this many pairs (>= 1; None: all).
        device, precision: where and how the detector and segmenter run.

    Raises:
        BadInput: a value outside its range (``param`` names the field), at construction.
    """

    detector: str | None = field(default=None, metadata={
        "flag": "--detector", "help": "Pairs: open-vocabulary detector (OWLv2 / OWL-ViT) finding each caption "
        "object: a Hugging Face repository id (google/owlv2-base-patch16-ensemble) or a model folder."})
    segmenter: str | None = field(default=None, metadata={
        "flag": "--segmenter", "help": "Pairs: SAM model (facebook/sam-vit-base or a folder) whose masks in the "
        "detector's boxes give the areas [the boxes' areas]."})
    threshold: float | None = field(default=None, metadata={
        "flag": "--threshold", "range": (0, 1), "float": True,
        "help": f"Pairs: detector score from which an object is found [{DETECTION_THRESHOLD:g}]."})
    caption_objects: str = field(default="lexicon", metadata={
        "flag": "--caption-objects", "choice": ("lexicon", "spacy"),
        "help": "Pairs: how a caption's objects are found: the names of --names and their synonyms, or spaCy noun "
                "chunks (needs en_core_web_sm)."})
    names: str = field(default="coco", metadata={
        "flag": "--names", "help": "Pairs, lexicon: the categories, comco72 | simco18 | coco | asset folder | file "
                                   "with one name per line."})
    limit: int | None = field(default=None, metadata={
        "flag": "--limit", "range": (1, MAX_COUNT), "help": "Pairs: read only the first N pairs."})
    device: str = field(default="auto", metadata={
        "flag": "--device", "device": True,
        "help": DEVICE_GRAMMAR + " (auto: CUDA when torch sees a GPU, else the CPU): the detector's and segmenter's."})
    precision: str = field(default="fp32", metadata={
        "flag": "--precision", "choice": PRECISIONS,
        "help": "Detector and segmenter weights in float32, bfloat16 or float16."})

    def __post_init__(self):
        if self.limit is not None:
            check_int("limit", self.limit, 1, what="pairs")
        if self.threshold is not None:
            check_threshold(self.threshold)
        check_device(self.device)
        check_precision(self.precision)

    def given(self) -> list[str]:
        """The pair settings that differ from their defaults (the device and precision aside)."""
        default = PairSettings()
        return [k for k in ("detector", "segmenter", "threshold", "limit", "caption_objects", "names")
                if getattr(self, k) != getattr(default, k)]
