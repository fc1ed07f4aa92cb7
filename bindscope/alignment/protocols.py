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

from dataclasses import asdict, dataclass, field, fields, replace

from bindscope.errors import BadInput, check_int, check_number
from bindscope.limits import MAX_BATCH, MAX_COUNT, MAX_EPOCHS, MAX_LR, MAX_OBJECTS, MAX_SEED

PROTOCOLS = ("bindscope", "authors")
AUTHORS_REPOSITORY = "kdariina/CLIP-not-BoW-unimodally"
"""The LABCLIP authors' code (Koishigarina, Uselis and Oh), the source of the ``authors`` protocol."""
CLIP_INIT_LOGIT_SCALE = 1.0 / 0.07
"""CLIP's initial temperature, where bindscope's LABCLIP fit starts (the authors' starts at 1)."""
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
    if isinstance(given.get("fractions"), str):
        given["fractions"] = _parse_fractions(given["fractions"])
    names = [f.name for f in fields(base)]
    for key in given:
        if key not in names:
            raise BadInput(f"{key} is not a field of {type(base).__name__}; allowed: {', '.join(names)}", param=key)
    moved = tuple(k for k in given if k not in ("seed", "min_objects") and given[k] != getattr(base, k))
    return replace(base, **given, overrides=tuple(sorted(set(base.overrides) | set(moved))))


def fraction_shares(fractions) -> tuple[float, float, float]:
    """``fractions`` as the (train, val, test) shares, three floats (plain Python: the commands import this module
    to build their options, without numpy).

    Raises:
        BadInput: not three numbers >= 0 summing to 1 (within 1e-5) with train > 0 and test > 0.
    """
    try:
        values = tuple(float(v) for v in fractions)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1.0) > 1e-8 + 1e-5 or values[0] <= 0 \
            or values[2] <= 0:
        shown = tuple(fractions) if isinstance(fractions, (list, tuple)) else fractions
        raise BadInput(f"split fractions {shown!r}: need three non-negative numbers (train, val, test) summing to 1, "
                       "with train > 0 and test > 0")
    return values


def _parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.6,0.2,0.2"`` -> ``(0.6, 0.2, 0.2)`` (the ``--fractions`` text); BadInput when not numbers."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise BadInput(f"fractions {text!r}: give three numbers train,val,test such as 0.6,0.2,0.2",
                       param="fractions") from None


_PROTOCOL_HELP = {
    "probe": "Every probe setting: bindscope's (L2-normalised standardised inputs, full-batch Adam with early stopping, "
             "the other objects' combination held out) or the LABCLIP authors' code's (inputs before normalisation, "
             "SGD 0.1 on mini-batches of 32 for 100 epochs, the whole scene held out); docs/alignment.md#protocols. "
             "--fractions, --steps, --lr and --weight-decay replace its values.",
    "labclip": "Every fitting setting: bindscope's (20 epochs of 128 pairs, Adam 1e-3, temperature from 1/0.07, each "
               "image with its first caption) or the LABCLIP authors' code's (natural captions: 10 epochs of 1024, "
               "temperature from 1, every caption lower-cased, spaCy negatives; attribute swaps: 50 epochs of 128 at "
               "0.01); docs/alignment.md#protocols. --epochs, --fit-batch-size, --lr and --tagger replace its values."}


def _flag(flag: str, help: str | None = None, **more) -> dict:
    """A field's command-line option (:func:`bindscope.cli.options.settings_options`)."""
    return {"flag": flag, "help": help, **more}


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

    fractions: tuple[float, float, float] = field(default=(0.6, 0.2, 0.2), metadata=_flag(
        "--fractions", "train,val,test sample shares of the hold-out by attribute-object combination [protocol's: "
        "bindscope 0.6,0.2,0.2, authors 0.8,0.1,0.1]", default=None))
    seed: int = field(default=0, metadata=_flag("--seed", range=(0, MAX_SEED)))
    min_objects: int = field(default=2, metadata=_flag(
        "--min-objects", "minimum objects in a modality's view (2: multi-object samples only)", range=(1, MAX_OBJECTS)))
    steps: int = field(default=300, metadata=_flag(
        "--steps", "optimiser passes per probe: full-batch steps (bindscope, 300) or epochs (authors, 100)",
        range=(1, MAX_COUNT), default=None))
    lr: float = field(default=0.01, metadata=_flag(
        "--lr", "learning rate [protocol's: bindscope 0.01 (Adam), authors 0.1 (SGD)]", range=(0, MAX_LR),
        open=(True, False), default=None))
    weight_decay: float = field(default=1e-4, metadata=_flag(
        "--weight-decay", "L2 penalty [protocol's: bindscope 1e-4, authors 0]", range=(0, 10), float=True,
        default=None))
    eval_every: int = 10
    protocol: str = field(default="bindscope", metadata=_flag("--protocol", _PROTOCOL_HELP["probe"], choice=PROTOCOLS))
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
        object.__setattr__(self, "fractions", fraction_shares(self.fractions))

    @classmethod
    def of(cls, protocol: str = "bindscope", **changes) -> "ProbeSettings":
        """The settings of ``protocol`` (:data:`PROBE_PROTOCOLS`) with the non-None ``changes`` (fields of this
        class) in place of its values; those that differ are listed in ``overrides``."""
        return _with(PROBE_PROTOCOLS[check_protocol(protocol)], changes)

    @classmethod
    def given(cls, settings: "ProbeSettings | None", changes: dict) -> "ProbeSettings":
        """A library call's probe settings: ``settings`` with the non-None ``changes`` (fields by keyword) in place
        of its values, or, without ``settings``, :meth:`of` the protocol ``changes`` name (default bindscope's).

        Raises:
            BadInput: a value out of range, a keyword that is not a field, ``protocol`` given beside ``settings``
                (which hold their own).
        """
        if settings is None:
            return cls.of(**changes)
        if changes.get("protocol") is not None:
            raise BadInput(f"protocol {changes['protocol']!r} and settings both given; settings hold their protocol "
                           f"({settings.protocol})", param="protocol")
        return _with(settings, changes)

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


@dataclass(frozen=True)
class LabclipOptions:
    """How a LABCLIP map is fitted, as asked (``bindscope.labclip.fit``, ``bindscope labclip fit``, whose options
    are generated from these fields: :func:`bindscope.cli.options.settings_options`): the held-out share, the
    protocol and the values given in place of its own (None: the protocol's), the seed and the negatives source.
    The protocol's values depend on the negatives source, known once the split is read: :meth:`settings` gives
    the :class:`LabclipSettings` of one.

    Attributes:
        holdout: share of the (object, attribute, value) combinations (shuffled negatives: of the samples) held
            out for ``labclip eval``, 0 < holdout < 1.
        protocol: ``"bindscope"`` or ``"authors"``. epochs (>= 1), fit_batch_size (pairs per batch, >= 2), lr
            (> 0), tagger (``"lexicon"`` or ``"spacy"``): in place of the protocol's values, or None.
        seed: seed of the hold-out, the shuffled negatives and the fit, >= 0.
        negatives: ``"stored"`` (attribute swaps), ``"shuffled"`` (NegCLIP's shuffled nouns and adjectives) or
            None (stored where the split has binding negatives, else shuffled).

    Raises:
        BadInput: a value outside its range (``param`` names the field, as the library keyword), at construction.
    """

    holdout: float = field(default=0.1, metadata=_flag(
        "--holdout-fraction", "share of (object, attribute, value) combinations (shuffled negatives: of samples) held "
        "out for `labclip eval`", name="holdout", range=(0, 1), float=True, open=(True, True)))
    protocol: str = field(default="bindscope", metadata=_flag("--protocol", _PROTOCOL_HELP["labclip"],
                                                              choice=PROTOCOLS))
    epochs: int | None = field(default=None, metadata=_flag(
        "--epochs", "passes over the pairs [protocol's]", range=(1, MAX_EPOCHS)))
    fit_batch_size: int | None = field(default=None, metadata=_flag(
        "--fit-batch-size", "(image, caption) pairs per LABCLIP batch (their negatives join the batch) [protocol's]",
        range=(2, MAX_BATCH)))
    lr: float | None = field(default=None, metadata=_flag(
        "--lr", "Adam learning rate [protocol's]", range=(0, MAX_LR), open=(True, False)))
    seed: int = field(default=0, metadata=_flag("--seed", range=(0, MAX_SEED)))
    negatives: str | None = field(default=None, metadata=_flag(
        "--negatives", "stored: the dataset's binding negatives (MADMAN; ComCO swaps from the object table); "
        "shuffled: each caption with its nouns and adjectives shuffled (NegCLIP; COCO). Default: stored where the "
        "split has binding negatives, else shuffled", choice=("stored", "shuffled")))
    tagger: str | None = field(default=None, metadata=_flag(
        "--tagger", "how --negatives shuffled finds nouns and adjectives: the dataset's own words (COCO: its mention "
        "table and colour/size words) or spaCy's en_core_web_sm (pip install 'bindscope[text]') [protocol's: "
        "bindscope lexicon; authors spacy, the word list where spaCy is missing, recorded]",
        choice=("lexicon", "spacy")))

    def __post_init__(self):
        self.settings("stored")  # every value of the protocol's settings, checked
        if not (isinstance(self.holdout, (int, float)) and 0 < self.holdout < 1):
            raise BadInput(f"holdout {self.holdout}: must be between 0 and 1 (exclusive)", param="holdout")
        check_int("seed", self.seed, 0, MAX_SEED)
        if self.negatives not in (None, "stored", "shuffled"):
            raise BadInput(f"negatives {self.negatives!r} is not allowed; allowed: stored, shuffled, or None",
                           param="negatives")

    def settings(self, negatives: str) -> LabclipSettings:
        """The :class:`LabclipSettings` of the protocol for ``negatives`` (``"stored"`` or ``"shuffled"``) with the
        values given here in place of its own (listed in ``overrides``)."""
        return LabclipSettings.of(self.protocol, negatives, epochs=self.epochs, batch_size=self.fit_batch_size,
                                  lr=self.lr, tagger=self.tagger)


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
