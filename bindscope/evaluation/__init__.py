"""Evaluations: recognition and binding (MADMAN), TOR / IOR / I2TOR / matching and attention (ComCO), the
legibility audit, caption bias, ARO / SugarCrepe, and the tables of results (docs/evaluation.md)."""

from dataclasses import dataclass, field

from bindscope.errors import BadInput, check_int, check_number
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
