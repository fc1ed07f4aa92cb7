"""The settings of each protocol of the linear probes and of LABCLIP: bindscope's, and the LABCLIP authors'.

One frozen dataclass per kind of run (:class:`ProbeSettings`, :class:`LabclipSettings`) and one instance of it per
protocol (:data:`PROBE_PROTOCOLS`, :data:`LABCLIP_PROTOCOLS`); ``bindscope probe`` and ``bindscope labclip fit``
take ``--protocol bindscope|authors`` (as ``comco eval --protocol clip-oscope`` takes the ComCO authors'), an
option given explicitly replaces the protocol's value and is listed in ``overrides``, and the result records the
protocol with every setting.

``authors``: what the code of Koishigarina, Uselis and Oh (:data:`AUTHORS_REPOSITORY`) does, read from it:

- probes (``probing/clevr_probing.py``, ``probing/probing_models.py``, ``data_loading/clevr.py``): the embeddings as
  CLIP's ``encode_image`` / ``encode_text`` return them, not normalised and not standardised; ``torch.nn.Linear``
  trained with SGD, learning rate 0.1, no weight decay, 100 epochs of shuffled mini-batches of 32, the last epoch
  kept (validation accuracy is printed, never used to choose); train / val / test split by whole-scene combination
  (``train_val_test_split``: 10 % of the distinct scene combinations to test and 10 % to val, each together with
  its attribute-swapped twin), here :func:`bindscope.alignment.splits.swap_combination` dealt by sample shares
  0.8 / 0.1 / 0.1;
- LABCLIP on natural captions (``alignment/coco_alignment.py``): Adam, learning rate 1e-3, batch 1024, 10 epochs;
  the temperature ``exp(t)`` starting at 1 (``t`` initialised to 0, ``alignment/learning_alignment.py``); every
  caption of an image (``captions[0:5]``), each its own pair with the image; captions normalised by ARO's
  ``pre_caption`` (lower case, at most 40 words; :func:`bindscope.text.negatives.aro_caption`) and their negatives
  made by ARO's spaCy shuffle of nouns and adjectives of that text (``TextShuffler.shuffle_nouns_and_adj``);
- LABCLIP on synthetic scenes with attribute-swapped negatives (``alignment/clevr_alignment.py``): Adam, learning
  rate 0.01, batch 128, 50 epochs, the temperature starting at 1.

bindscope's choices and the two protocols side by side: docs/alignment.md, "Protocols".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from bindscope.alignment.labclip import AUTHORS_REPOSITORY, CLIP_INIT_LOGIT_SCALE
from bindscope.alignment.splits import check_fractions
from bindscope.errors import BadInput, check_int, check_number
from bindscope.limits import MAX_SEED

PROTOCOLS = ("bindscope", "authors")
OPTIMISERS = ("adam", "sgd")
HOLD_OUTS = ("distractor", "scene")


def check_protocol(protocol: str) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`; BadInput naming it otherwise."""
    if protocol not in PROTOCOLS:
        raise BadInput(f"protocol {protocol!r} is not allowed; allowed: {', '.join(PROTOCOLS)}", param="protocol")
    return protocol


def _with(base, changes: dict):
    """``base`` with the non-None ``changes`` applied and their names added to ``overrides``."""
    given = {k: v for k, v in changes.items() if v is not None}
    names = {f.name for f in fields(base)}
    for key in given:
        if key not in names:
            raise TypeError(f"unknown setting {key!r}")
    moved = tuple(k for k in given if k in names - {"seed", "min_objects"} and given[k] != getattr(base, k))
    return replace(base, **given, overrides=tuple(sorted(set(base.overrides) | set(moved))))


@dataclass(frozen=True)
class ProbeSettings:
    """The settings of every linear probe of a run (attribute probes and the conjunctive-search probe).

    Attributes:
        fractions: (train, val, test) shares of the hold-out: three numbers >= 0 summing to 1, train and
            test > 0.
        seed: split, weight-initialisation and mini-batch seed, >= 0.
        min_objects: minimum objects in a modality's view (2: only multi-object samples, where binding
            matters), >= 1; attribute probes only.
        steps: optimiser passes over the training data, >= 1: full-batch steps, or epochs of mini-batches when
            ``batch_size`` is set. lr: learning rate, > 0. weight_decay: L2 penalty, >= 0.
        eval_every: validation every this many steps (early stopping), >= 1.
        protocol: ``"bindscope"`` or ``"authors"`` (module docstring). optimiser: ``"adam"`` or ``"sgd"``.
        batch_size: None (full batch) or the mini-batch size (shuffled each epoch with ``seed``), >= 1.
        normalise: probe L2-normalised embeddings (else the model's embeddings before normalisation).
        standardise: standardise the inputs with the training mean and standard deviation first.
        early_stopping: keep the step with the best validation accuracy (else the last).
        hold_out: ``"distractor"`` (the other objects' combination, :func:`~bindscope.alignment.splits.
            distractor_combination`) or ``"scene"`` (the whole scene's up to an attribute swap,
            :func:`~bindscope.alignment.splits.swap_combination`).
        overrides: the settings given explicitly in place of the protocol's.

    Raises:
        BadInput: a value outside its range, named with what is allowed (at construction).
    """

    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    seed: int = 0
    min_objects: int = 2
    steps: int = 300
    lr: float = 0.01
    weight_decay: float = 1e-4
    eval_every: int = 10
    protocol: str = "bindscope"
    optimiser: str = "adam"
    batch_size: int | None = None
    normalise: bool = True
    standardise: bool = True
    early_stopping: bool = True
    hold_out: str = "distractor"
    overrides: tuple[str, ...] = ()

    def __post_init__(self):
        check_int("steps", self.steps, 1)
        check_number("lr", self.lr)
        check_number("weight_decay", self.weight_decay, inclusive=True)
        check_int("seed", self.seed, 0, MAX_SEED)
        check_int("min_objects", self.min_objects, 1)
        check_int("eval_every", self.eval_every, 1)
        check_protocol(self.protocol)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1)
        for name, value, allowed in (("optimiser", self.optimiser, OPTIMISERS), ("hold_out", self.hold_out, HOLD_OUTS)):
            if value not in allowed:
                raise BadInput(f"{name} {value!r} is not allowed; allowed: {', '.join(allowed)}", param=name)
        object.__setattr__(self, "fractions", tuple(float(v) for v in check_fractions(self.fractions)))

    @classmethod
    def of(cls, protocol: str = "bindscope", **changes) -> "ProbeSettings":
        """The settings of ``protocol`` (:data:`PROBE_PROTOCOLS`) with the non-None ``changes`` (fields of this
        class) in place of its values; those that differ are listed in ``overrides``."""
        return _with(PROBE_PROTOCOLS[check_protocol(protocol)], changes)

    @property
    def schedule(self) -> str:
        """The optimisation in words, e.g. ``"300 full-batch steps"`` or ``"100 epochs of mini-batches of 32"``."""
        if self.batch_size is None:
            return f"{self.steps} full-batch steps"
        return f"{self.steps} epochs of shuffled mini-batches of {self.batch_size}"

    def record(self) -> dict:
        """The settings as a JSON-ready dict (for a result's ``settings``)."""
        out = asdict(self)
        out.update(fractions=list(self.fractions), overrides=list(self.overrides), schedule=self.schedule,
                   inputs=("L2-normalised" if self.normalise else "before L2 normalisation")
                   + (", standardised with the training mean and standard deviation" if self.standardise else ""),
                   selection="best validation accuracy (early stopping)" if self.early_stopping else "last step")
        return out


PROBE_PROTOCOLS = {
    "bindscope": ProbeSettings(),
    "authors": ProbeSettings(fractions=(0.8, 0.1, 0.1), steps=100, lr=0.1, weight_decay=0.0, protocol="authors",
                             optimiser="sgd", batch_size=32, normalise=False, standardise=False,
                             early_stopping=False, hold_out="scene"),
}
"""One :class:`ProbeSettings` per protocol (see the module docstring for the authors' sources)."""


@dataclass(frozen=True)
class LabclipSettings:
    """The settings of one LABCLIP fit.

    Attributes:
        protocol: ``"bindscope"`` or ``"authors"``. source: where the values come from.
        epochs: passes over the pairs, >= 1. batch_size: pairs per batch, >= 2. lr: Adam's learning rate, > 0.
        init_logit_scale: the temperature the fit starts from, > 0 (bindscope: CLIP's 1/0.07; the authors: 1).
        captions: ``"first"`` (each image with its sample's caption) or ``"all"`` (every caption an image records,
            at most 5, each its own pair; a COCO import), with shuffled negatives.
        caption_text: ``"as written"`` or ``"lower-cased"`` (ARO's ``pre_caption``, at most 40 words, before the
            shuffle; :func:`bindscope.text.negatives.aro_caption`), with shuffled negatives.
        tagger: ``"lexicon"`` or ``"spacy"``: how shuffled negatives find nouns and adjectives.
        tagger_fallback: why the word-list tagger stands in for spaCy, or None.
        overrides: the settings given explicitly in place of the protocol's.

    Raises:
        BadInput: a value outside its range (at construction).
    """

    protocol: str = "bindscope"
    source: str = "bindscope's defaults (docs/alignment.md)"
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    init_logit_scale: float = CLIP_INIT_LOGIT_SCALE
    captions: str = "first"
    caption_text: str = "as written"
    tagger: str = "lexicon"
    tagger_fallback: str | None = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self):
        check_protocol(self.protocol)
        check_int("epochs", self.epochs, 1)
        check_int("fit_batch_size", self.batch_size, 2, what="pairs")
        check_number("lr", self.lr)
        check_number("init_logit_scale", self.init_logit_scale)
        for name, value, allowed in (("captions", self.captions, ("first", "all")),
                                     ("caption_text", self.caption_text, ("as written", "lower-cased")),
                                     ("tagger", self.tagger, ("lexicon", "spacy"))):
            if value not in allowed:
                raise BadInput(f"{name} {value!r} is not allowed; allowed: {', '.join(allowed)}", param=name)

    @classmethod
    def of(cls, protocol: str = "bindscope", negatives: str = "stored", **changes) -> "LabclipSettings":
        """The settings of ``protocol`` for ``negatives`` (``"stored"``: attribute swaps of synthetic scenes;
        ``"shuffled"``: natural captions) (:data:`LABCLIP_PROTOCOLS`) with the non-None ``changes`` in place of
        its values; those that differ are listed in ``overrides``."""
        return _with(LABCLIP_PROTOCOLS[check_protocol(protocol), negatives], changes)

    def with_available_tagger(self) -> "LabclipSettings":
        """These settings, or, when they name spaCy and spaCy or its English model is missing, the same with the
        word-list tagger and ``tagger_fallback`` saying why (the authors' protocol run offline)."""
        from bindscope.text.negatives import spacy_pipeline

        if self.tagger != "spacy":
            return self
        try:
            spacy_pipeline()
        except BadInput as exc:
            return replace(self, tagger="lexicon", tagger_fallback=f"{exc}; the word-list tagger was used instead")
        return self

    def record(self) -> dict:
        """The settings as a JSON-ready dict (recorded in the map's ``meta``)."""
        return {**asdict(self), "overrides": list(self.overrides)}


_BINDSCOPE_LABCLIP = LabclipSettings()
LABCLIP_PROTOCOLS = {
    ("bindscope", "stored"): _BINDSCOPE_LABCLIP,
    ("bindscope", "shuffled"): _BINDSCOPE_LABCLIP,
    ("authors", "shuffled"): LabclipSettings(
        protocol="authors", source=f"{AUTHORS_REPOSITORY}: alignment/coco_alignment.py (natural captions)",
        epochs=10, batch_size=1024, lr=1e-3, init_logit_scale=1.0, captions="all", caption_text="lower-cased",
        tagger="spacy"),
    ("authors", "stored"): LabclipSettings(
        protocol="authors", source=f"{AUTHORS_REPOSITORY}: alignment/clevr_alignment.py (synthetic scenes)",
        epochs=50, batch_size=128, lr=0.01, init_logit_scale=1.0),
}
"""One :class:`LabclipSettings` per (protocol, negatives source): the authors' scripts differ by data."""
