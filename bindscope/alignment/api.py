"""``bindscope.probe`` and ``bindscope.labclip.fit / eval / apply``: the library calls behind ``bindscope probe``
and ``bindscope labclip`` (docs/alignment.md).

Example (a notebook)::

    import bindscope
    encoder = bindscope.EncoderSettings("ViT-B-32", pretrained="none")
    run = bindscope.probe("data/madman", encoder, modality="image")
    run.result["metrics"]["modalities"]["image"]["colour"]["accuracy"]
    labclip = bindscope.labclip.fit("data/madman", encoder, "labclip.pt", epochs=10)
    bindscope.labclip.eval("data/madman", encoder, "labclip.pt").result["metrics"]["after"]["binding"]
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from bindscope.alignment.protocols import LabclipOptions, ProbeSettings
from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import BadInput, name_list, with_changes
from bindscope.evaluation.api import Evaluation


def _open(data, split: str | None):
    from bindscope.alignment.data import default_split
    from bindscope.format.reader import Dataset

    dataset = Dataset(data)
    split = split or default_split(dataset)
    dataset.split(split)  # DatasetError naming the available splits
    return dataset, split


def _check_out(path, overwrite: bool, explicit: bool = True) -> Path:
    from bindscope.io.ownership import check_output_location

    check_output_location("out", path)
    out = Path(path)
    if out.is_dir():
        raise BadInput(f"out {str(path)!r} is a folder; give a file path", param="out")
    if out.exists() and not overwrite:
        raise BadInput(f"out {str(path)!r} already exists; pass overwrite=True to replace it, or choose "
                       "another file", param="out")
    if explicit and not out.parent.exists():
        raise BadInput(f"out {str(path)!r}: folder {str(out.parent)!r} does not exist", param="out")
    return out


def _default_out(kind: str, data, encoder: EncoderSettings) -> str:
    """``DATA/eval/<kind>-<model slug>.json``, named like the evaluation module's results
    (:func:`bindscope.evaluation.api.model_slug`)."""
    from bindscope.evaluation.api import model_slug

    return str(Path(data) / "eval" / f"{kind}-{model_slug(encoder)}.json")


def _encoder(encoder: EncoderSettings, progress: bool = False, normalised: bool = True):
    """The adapter of ``encoder`` (with ``normalised=False`` its copy giving embeddings before normalisation,
    :meth:`~bindscope.encoders.interface.EncoderAdapter.unnormalised`) and an embedder through the embedding cache
    it asks for."""
    from bindscope.alignment.data import make_embedder
    from bindscope.encoders.registry import load_encoder

    adapter = load_encoder(encoder)
    if not normalised:
        adapter = adapter.unnormalised()
    return adapter, make_embedder(adapter, encoder.cache_dir, use_cache=encoder.use_cache, progress=progress)


def _write(path: Path, kind, adapter, dataset, splits, settings, metrics, embedder) -> Evaluation:
    """Validate the result envelope (schema ``alignment_result``), write it atomically, return it."""
    from bindscope.evaluation.results import dataset_info, encoder_counts, envelope
    from bindscope.io.atomic import write_text_atomic
    from bindscope.io.canonical import canonical_json

    result = envelope(kind, adapter, dataset_info(dataset, splits), settings, metrics, encoder_counts(embedder),
                      schema="alignment_result")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, canonical_json(result))
    return Evaluation(result, path, None)


def _bar(progress: bool, total: int, desc: str, unit: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not progress)


def probe(data: str | os.PathLike, encoder: EncoderSettings | str = "ViT-B-32", *, task: str = "attributes",
          modality: str = "both", split: str | None = None, attributes: list[str] | None = None,
          settings: ProbeSettings | None = None, target: dict | str | None = None,
          out: str | os.PathLike | None = None, overwrite: bool = False, progress: bool = True,
          **changes) -> Evaluation:
    """Linear probes on frozen embeddings: one probe per target object and attribute (docs/alignment.md).

    Each probe is Linear(D, n_classes) on image or caption embeddings, trained with cross-entropy on samples
    containing the target object (label = its attribute value); train/val/test (``fractions``) are held out by
    attribute-object combination. Reported next to chance and the bag-of-words baselines, overall and per number of
    objects in view. ``protocol`` picks every other setting
    (:data:`bindscope.alignment.protocols.PROBE_PROTOCOLS`): ``"bindscope"``: L2-normalised, standardised inputs,
    full-batch Adam (``steps`` 300, ``lr`` 0.01, ``weight_decay`` 1e-4) with early stopping, the other objects'
    combination held out, ``fractions`` (0.6, 0.2, 0.2); ``"authors"``: the LABCLIP authors' code (inputs before
    normalisation, SGD 0.1 on mini-batches of 32 for 100 epochs, the last epoch, the whole scene held out with its
    attribute-swapped twin, (0.8, 0.1, 0.1)). ``fractions``, ``steps``, ``lr`` and ``weight_decay``, when given,
    replace the protocol's (recorded as ``overrides``). Every such setting is a field of
    :class:`~bindscope.alignment.protocols.ProbeSettings`: give them as ``settings`` or as keywords.

    With ``task="conjunctive-search"``: one presence probe on image embeddings (is the ``target`` conjunction of
    a category and an attribute value in the scene?), train/val/test drawn at random within each (distractors,
    present) stratum, accuracy per number of distractors with a Wilson 95% interval next to a bag-of-words probe;
    ``modality``, ``attributes``, ``min_objects`` and ``protocol`` do not apply
    (:mod:`bindscope.alignment.conjunctive`).

    Args:
        data: dataset folder. encoder: an :class:`~bindscope.encoders.settings.EncoderSettings` (one model), or
            a model name or path with the other settings at their defaults (as :func:`bindscope.evaluate`).
        task: ``"attributes"`` or ``"conjunctive-search"``.
        modality: ``"image"``, ``"text"`` or ``"both"``.
        split: default test, else the first split. attributes: a list or one name (default: all of the
            dataset's).
        settings: a :class:`~bindscope.alignment.protocols.ProbeSettings` (e.g. ``ProbeSettings.of("authors",
            steps=50)``); default: the protocol's of ``changes``.
        target: the conjunctive search's target, ``{"category": "sphere", "colour": "red"}`` or
            ``"category=sphere,colour=red"``; default: the one a ``comco render --task conjunctive-search`` dataset
            names (any other dataset needs one).
        out: result JSON (default ``DATA/eval/<probe|conjunctive-search>-<model>-<tag>.json``). progress: tqdm
            bar on stderr.
        **changes: fields of ``settings`` in place of its values: ``protocol`` (``"bindscope"`` or ``"authors"``;
            only without ``settings``), ``fractions``, ``steps``, ``lr``, ``weight_decay``, ``min_objects``
            (minimum objects in a modality's view; 2: multi-object samples only), ``seed`` (>= 0), ...

    Returns:
        An :class:`~bindscope.evaluation.api.Evaluation` (``result`` dict of schema ``alignment_result``,
        ``path``); ``result["settings"]`` records the protocol and every setting.

    Raises:
        BadInput: a bad value (named), an attribute the dataset lacks, a text-only model with image probes,
            ``protocol="authors"`` with an encoder that gives only normalised embeddings or with conjunctive
            search, an existing ``out`` without ``overwrite``; before any probe is fitted.
    """
    from bindscope.alignment.data import load_table
    from bindscope.alignment.probes import check_probe_table

    if task not in ("attributes", "conjunctive-search"):
        raise BadInput(f"task {task!r} is not allowed; allowed: attributes, conjunctive-search", param="task")
    if modality not in ("image", "text", "both"):
        raise BadInput(f"modality {modality!r} is not allowed; allowed: image, text, both", param="modality")
    if target is not None and task != "conjunctive-search":
        raise BadInput(f"target {target!r} applies to task='conjunctive-search' only", param="target")
    encoder = EncoderSettings.of(encoder)
    settings = ProbeSettings.given(settings, changes)
    attributes = name_list("attributes", attributes)
    dataset, split = _open(data, split)
    if task == "conjunctive-search":
        if settings.protocol != "bindscope":
            raise BadInput(f"protocol {settings.protocol!r} applies to the attribute probes; conjunctive search "
                           "has only bindscope's", param="protocol")
        return _conjunctive(dataset, data, split, encoder, settings, target, out, overwrite)
    names = list(attributes) if attributes else list(dataset.attribute_names)
    for a in names:
        if a not in dataset.attribute_names:
            raise BadInput(f"attributes: {a!r} is not an attribute of this dataset; it has "
                           f"{', '.join(dataset.attribute_names)}", param="attributes")
    modalities = ("image", "text") if modality == "both" else (modality,)
    out_path = _check_out(out or _default_out("probe", data, encoder), overwrite, out is not None)
    table = load_table(dataset, split, build_swaps=False)
    check_probe_table(table, modalities, names, settings.min_objects)
    adapter, embedder = _encoder(encoder, normalised=settings.normalise)
    if "image" in modalities and not adapter.supports_images:
        raise BadInput(f"model {encoder.model!r} is text-only; use modality text")
    with _bar(progress, len(names), "probes", "attribute") as bar:
        metrics = probe_dataset(dataset, embedder, split, modalities, names, settings,
                                progress=lambda _: bar.update(), table=table)
    hold_out = {"distractor": "per target category and attribute: the (category, value) combinations of the other "
                              "objects, each wholly in one split",
                "scene": "per target category and attribute: the scene's (category, value) combination together "
                         "with its attribute-swapped twin, each wholly in one split"}[settings.hold_out]
    record = {"task": "probe", "split": split, "modalities": list(modalities), "attributes": names,
              **settings.record(), "hold_out": hold_out, "hold_out_key": settings.hold_out}
    return _write(out_path, "probe", adapter, dataset, [split], record, metrics, embedder)


def probe_dataset(dataset, embedder, split: str | None = None, modalities=("image", "text"), attributes=None,
                  settings=None, progress=None, table=None) -> dict:
    """Linear probes per modality on one split of an open :class:`~bindscope.format.reader.Dataset`, embedded
    through ``embedder`` (:func:`bindscope.alignment.data.make_embedder`); see
    :func:`bindscope.alignment.probes.run_probes`. :func:`probe` is the call with checks and a result file.

    ``settings``: a :class:`~bindscope.alignment.probes.ProbeSettings` (default: its defaults). Only samples
    with at least ``settings.min_objects`` objects in a modality's view are embedded; embeddings are L2-normalised
    when ``settings.normalise`` (with ``normalise`` False, ``embedder`` must give the model's embeddings before
    normalisation: an adapter's :meth:`~bindscope.encoders.interface.EncoderAdapter.unnormalised` copy).
    ``table`` may hold the split's :func:`load_table` result already (as checked by :func:`check_probe_table`).
    Returns run_probes' dict
    plus ``split``, ``n_samples`` and ``caption_attributes`` (attributes written into recomposed captions).

    Raises:
        BadInput: unknown modality, text-only model asked for images, or no eligible sample.
    """
    from bindscope.alignment.data import default_split, encode_split_images, encode_texts, load_table
    from bindscope.alignment.probes import ProbeSettings, check_probe_table, run_probes

    settings = settings or ProbeSettings()
    min_objects = settings.min_objects
    split = split or default_split(dataset)
    if table is None:
        table = load_table(dataset, split, build_swaps=False)
        check_probe_table(table, modalities, attributes, min_objects)
    import numpy as np

    dim = embedder.adapter.embed_dim
    embeddings = {}
    if "image" in modalities:
        rows = [i for i in range(len(table)) if len(table.objects[i]) >= min_objects]
        emb = np.full((len(table), dim), np.nan, np.float32)
        emb[rows] = encode_split_images(embedder, dataset, split, rows, normalise=settings.normalise)
        embeddings["image"] = emb
    if "text" in modalities:
        rows = [i for i in range(len(table))
                if sum(o.mention_position > 0 for o in table.objects[i]) >= min_objects]
        emb = np.full((len(table), dim), np.nan, np.float32)
        emb[rows] = encode_texts(embedder, [table.captions[i] for i in rows], normalise=settings.normalise)
        embeddings["text"] = emb
    embedder.flush()
    result = run_probes(table, embeddings, attributes, settings, progress)
    result.update({"split": split, "n_samples": len(table), "caption_attributes": table.composed})
    return result


def _conjunctive(dataset, data, split, encoder, settings, target, out, overwrite) -> Evaluation:
    """``probe(task="conjunctive-search")``: checks, fit, result JSON."""
    from bindscope.alignment.conjunctive import conjunctive_search, conjunctive_target

    target = conjunctive_target(dataset, target)
    out_path = _check_out(out or _default_out("conjunctive-search", data, encoder), overwrite, out is not None)
    adapter, embedder = _encoder(encoder)
    metrics = conjunctive_search(dataset, embedder, split, settings, target)
    record = {"task": "conjunctive-search", "split": split, "target": target,
              **{k: v for k, v in settings.record().items() if k != "min_objects"},
              "split_rule": "random within each (distractors, present) stratum", "interval": "Wilson score, 95%"}
    return _write(out_path, "conjunctive-search", adapter, dataset, [split], record, metrics, embedder)


def labclip_fit(data: str | os.PathLike, encoder: EncoderSettings | str, out: str | os.PathLike, *,
                options: LabclipOptions | None = None, split: str | None = None, overwrite: bool = False,
                progress: bool = True, **changes):
    """Fit the D x D LABCLIP map (Koishigarina et al.; docs/alignment.md) on ``data`` and write it to ``out``.

    ``encoder``: an :class:`~bindscope.encoders.settings.EncoderSettings` (one model with image and text
    towers), or a model name or path with the other settings at their defaults. ``options``: how the map is fitted,
    a :class:`~bindscope.alignment.protocols.LabclipOptions` (``holdout``, ``protocol``, ``epochs``,
    ``fit_batch_size``, ``lr``, ``seed``, ``negatives``, ``tagger``; default: its defaults), and ``changes``: its
    fields by keyword in place of its values (``epochs=10``). ``split``: default test, else the first split.

    The map (no bias, identity initialisation, learnable log-temperature) is trained with Adam on frozen
    embeddings. ``protocol`` picks the settings (:class:`~bindscope.alignment.protocols.LabclipSettings`, per
    negatives source): ``"bindscope"``: ``epochs`` 20, ``fit_batch_size`` 128, ``lr`` 1e-3, the temperature starting
    at CLIP's 1/0.07, each image with its sample's caption as written, ``tagger`` ``"lexicon"``; ``"authors"``: the
    LABCLIP authors' scripts: on natural captions (shuffled negatives) 10 epochs of 1024 pairs at 1e-3, the
    temperature starting at 1, every caption of an image (at most 5), lower-cased as ARO's ``pre_caption`` does,
    negatives tagged by spaCy (the word-list tagger when spaCy or its model is missing, recorded as
    ``tagger_fallback``); on attribute-swapped negatives 50 epochs of 128 pairs at 0.01, the temperature starting at
    1. ``epochs``, ``fit_batch_size``, ``lr`` and ``tagger``, when given, replace the protocol's (``overrides``).
    Negatives (``negatives``):

    * ``"stored"``: the attribute-swapped captions (MADMAN's stored binding negatives, ComCO swaps built from the
      object table); samples describing a held-out combination (share ``holdout`` of the (object, attribute,
      value) combinations, 0 < holdout < 1) are kept for :func:`labclip_eval`;
    * ``"shuffled"``: one negative per caption with its nouns shuffled among themselves and its adjectives among
      themselves (NegCLIP's recipe, Yuksekgonul et al. ICLR 2023, which the LABCLIP paper uses on COCO;
      :func:`bindscope.text.negatives.shuffled_negative`), seeded by ``(seed, row)``, words tagged by the tagger
      (``"lexicon"``: the dataset's own nouns and adjectives, :func:`bindscope.alignment.data.caption_lexicon`;
      ``"spacy"``: spaCy's ``en_core_web_sm``, the optional extra ``bindscope[text]``); a seeded share ``holdout``
      of the images is kept for :func:`labclip_eval`;
    * None (default): stored where the split has binding negatives, else shuffled (a COCO import).

    Returns:
        The fitted :class:`~bindscope.alignment.labclip.LabclipMap` (``meta`` holds the loss history, counts and
        ``settings``: the protocol with every setting).

    Raises:
        BadInput: a bad value, a text-only model, an existing ``out`` without ``overwrite``, too few samples
            with negatives, spaCy missing for an explicit ``tagger="spacy"``; before fitting.
    """
    from dataclasses import replace

    from bindscope.alignment.data import SHUFFLED, labclip_table, load_table
    from bindscope.alignment.pairs import plan_fit

    encoder = EncoderSettings.of(encoder)
    options = with_changes(options or LabclipOptions(), changes, "a LABCLIP fit option")
    dataset, split = _open(data, split)
    out_path = _check_out(out, overwrite)
    negatives = options.negatives
    if negatives is None:
        stored = load_table(dataset, split)
        negatives = "stored" if any(n.kind == "binding" for negs in stored.negatives for n in negs) else SHUFFLED
    settings = options.settings(negatives)
    if negatives == SHUFFLED and options.tagger is None:
        settings = settings.with_available_tagger()
    table, negatives = labclip_table(dataset, split, negatives, settings.tagger, options.seed, settings.captions,
                                     settings.caption_text)
    options = replace(options, negatives=negatives)
    plan_fit(table, options.holdout, options.seed, by_sample=negatives == SHUFFLED)
    adapter, embedder = _encoder(encoder)
    if not adapter.supports_images:
        raise BadInput(f"model {encoder.model!r} is text-only; LABCLIP needs image and text embeddings")
    with _bar(progress, settings.epochs, "LABCLIP", "epoch") as bar:
        def step(epoch, loss):
            bar.set_postfix(loss=f"{loss:.4f}")
            bar.update()

        labclip = fit_on_dataset(dataset, embedder, split, options, progress=step, table=table, settings=settings)
    labclip.save(out_path)
    return labclip


def labclip_eval(data: str | os.PathLike, encoder: EncoderSettings | str, labclip: str | os.PathLike, *,
                 split: str | None = None, out: str | os.PathLike | None = None, overwrite: bool = False,
                 progress: bool = True) -> Evaluation:
    """Binding, recognition and the modality gap of ``data`` before and after the LABCLIP map file ``labclip``.

    On the map's fitting split (the default) only the held-out combinations count; on another split every
    sample with attribute-swapped negatives. Binding is strict (a tie counts as wrong); the modality gap is the
    distance between the mean L2-normalised image and caption embeddings. A map fitted for another model
    gives a :class:`UserWarning`. ``progress``: tqdm bars on stderr while encoding (as :func:`labclip_fit`'s
    ``progress``, a bar per epoch there); the other arguments as in :func:`labclip_fit`.

    Returns:
        An :class:`~bindscope.evaluation.api.Evaluation` (``result`` with ``metrics["before"|"after"]``, ``path``
        = ``out``, default ``DATA/eval/labclip-<model>-<tag>.json``).
    """
    from bindscope.alignment.labclip import check_dimension, load_labclip

    encoder = EncoderSettings.of(encoder)
    labclip_path = labclip
    labclip = load_labclip(labclip_path)
    dataset, split = _open(data, split or labclip.meta.get("split"))
    out_path = _check_out(out or _default_out("labclip", data, encoder), overwrite, out is not None)
    adapter, embedder = _encoder(encoder, progress)
    check_dimension(labclip, adapter)
    if labclip.meta.get("cache_key") not in (None, adapter.cache_key):
        warnings.warn(f"the map was fitted for {labclip.meta.get('model')!r} ({labclip.meta.get('pretrained')}), "
                      "not this model", stacklevel=2)
    metrics = evaluate_on_dataset(dataset, embedder, labclip, split)
    settings = {"task": "labclip-eval", "split": split, "labclip": str(Path(labclip_path).resolve()),
                "labclip_meta": {k: v for k, v in labclip.meta.items() if k != "held_out"},
                "logit_scale": labclip.logit_scale, "tie": "strict: a tie counts as wrong",
                "modality_gap": "Euclidean distance of the mean L2-normalised image and caption embeddings"}
    return _write(out_path, "labclip-eval", adapter, dataset, [split], settings, metrics, embedder)


def labclip_apply(embeddings, labclip: str | os.PathLike, out: str | os.PathLike | None = None, *,
                  overwrite: bool = False):
    """Apply a LABCLIP map to text embeddings without re-encoding.

    Args:
        embeddings: an (N, D) array, or the path of a .npy file holding one (read with ``allow_pickle=False``).
        labclip: the map file. out: optional .npy file for the result (written atomically).

    Returns:
        The mapped (N, D) float32 array.
    """
    import numpy as np

    from bindscope.alignment.labclip import load_labclip
    from bindscope.io.atomic import atomic_open

    out_path = None if out is None else _check_out(out, overwrite)
    what = "embeddings"
    if isinstance(embeddings, (str, os.PathLike)):
        what = f"embeddings file {str(embeddings)!r}"
        if not os.path.isfile(embeddings):
            raise BadInput(f"{what}: no such file")
        try:
            embeddings = np.load(embeddings, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise BadInput(f"{what}: not a .npy array ({exc})") from None
    embeddings = np.asarray(embeddings)
    if embeddings.dtype.kind not in "fiu" or not np.isfinite(embeddings).all():
        raise BadInput(f"{what}: must hold finite numbers (found dtype {embeddings.dtype}"
                       f"{'' if embeddings.dtype.kind not in 'fiu' else ' with NaN or infinite values'})")
    labclip = load_labclip(labclip)
    mapped = labclip(embeddings)
    if out_path is not None:
        with atomic_open(out_path) as handle:
            np.save(handle, mapped)
    return mapped


def fit_on_dataset(dataset, embedder, split: str | None = None, options: LabclipOptions | None = None, *,
                   progress=None, table=None, settings=None, **changes):
    """Fit LABCLIP on the samples of ``split`` that describe no held-out combination; return the
    :class:`~bindscope.alignment.labclip.LabclipMap`. :func:`labclip_fit` is the call with checks and a file.

    ``options``: a :class:`~bindscope.alignment.protocols.LabclipOptions` (default: its defaults), ``changes`` its
    fields by keyword in place of its values (``holdout=0.1``, ``epochs=10``). The held-out ``(category,
    attribute, value)`` combinations (:func:`hold_out_triples` over the samples with binding negatives, share
    ``holdout``, ``seed``) are stored in the map's ``meta`` so that :func:`evaluate_on_dataset` tests on exactly the
    held-out samples; with shuffled negatives (``negatives``, ``tagger``: see :func:`labclip_fit`) the held-out
    rows themselves (``meta["held_out_samples"]``), and ``meta["negatives"]`` / ``meta["tagger"]`` say how the
    negatives were made. ``settings``: the :class:`~bindscope.alignment.protocols.LabclipSettings` (default:
    ``options.settings`` for the negatives); recorded as ``meta["settings"]``. ``table``: the split's
    :func:`~bindscope.alignment.data.labclip_table` already made with ``options.negatives`` (resolved:
    ``"stored"`` or ``"shuffled"``) and ``settings``.

    Raises:
        BadInput: the split has no binding negatives, or too few samples remain for fitting.
    """
    from bindscope.alignment.data import SHUFFLED, dataset_identity, default_split, labclip_table
    from bindscope.alignment.labclip import fit_labclip
    from bindscope.alignment.pairs import embed_pairs, plan_fit

    options = with_changes(options or LabclipOptions(), changes, "a LABCLIP fit option")
    holdout, seed, negatives = options.holdout, options.seed, options.negatives
    split = split or default_split(dataset)
    if table is None or negatives is None:
        made = (settings.tagger, settings.captions, settings.caption_text) if settings is not None else \
            (options.tagger or "lexicon", "first", "as written")
        table, negatives = labclip_table(dataset, split, negatives, made[0], seed, made[1], made[2])
    settings = settings or options.settings(negatives)
    held_out, fit_rows, held_rows = plan_fit(table, holdout, seed, by_sample=negatives == SHUFFLED)
    pairs = embed_pairs(table, dataset, embedder, fit_rows, kinds=("binding",))
    labclip, _ = fit_labclip(pairs.images, pairs.texts, pairs.negatives, pairs.owners, epochs=settings.epochs,
                             batch_size=settings.batch_size, lr=settings.lr,
                             init_logit_scale=settings.init_logit_scale, seed=seed, progress=progress)
    adapter = embedder.adapter
    labclip.meta.update({
        "model": adapter.name, "pretrained": adapter.pretrained, "cache_key": adapter.cache_key,
        "embed_dim": adapter.embed_dim, "dataset": str(dataset.path.resolve()),
        "dataset_id": dataset_identity(dataset), "split": split, "holdout": holdout,
        "held_out": sorted([list(t) for t in held_out]), "n_fit_samples": int(len(fit_rows)),
        "n_fit_negatives": int(len(pairs.negatives)), "n_held_out_samples": int(len(held_rows)),
        "caption_attributes": table.composed, "negatives": negatives, "protocol": settings.protocol,
        "settings": settings.record(),
    })
    if table.sample_of:
        labclip.meta["n_fit_images"] = len({table.sample(i) for i in fit_rows})
    if negatives == SHUFFLED:
        labclip.meta.update({"tagger": settings.tagger, "held_out_samples": [int(i) for i in held_rows]})
    return labclip


def evaluate_on_dataset(dataset, embedder, labclip, split: str | None = None) -> dict:
    """Binding, recognition and modality gap before (identity) and after the map.

    On the map's own split: the held-out samples (those describing a held-out combination; with shuffled
    negatives, ``meta["held_out_samples"]``); ``binding`` counts only the binding negatives that swap a
    held-out combination (every shuffled negative of a held-out sample), and ``fit_samples`` repeats the
    figures on the fitting samples. On any other split: every sample with binding negatives. The negatives are
    made as the map's were (``meta["negatives"]``, ``meta["tagger"]``, ``meta["seed"]``; a map without them, such as
    the LABCLIP authors', takes the split's binding negatives, else shuffled captions).
    :func:`labclip_eval` is the call with checks and a result file.
    """
    import numpy as np

    from bindscope.alignment.data import SHUFFLED, dataset_identity, default_split, labclip_table
    from bindscope.alignment.pairs import binding_report, embed_pairs, labclip_items

    meta = labclip.meta
    split = split or meta.get("split") or default_split(dataset)
    source = meta.get("negatives")  # None (a map from elsewhere): the split's binding negatives, else shuffled ones
    made = meta.get("settings") or {}
    table, source = labclip_table(dataset, split, source, meta.get("tagger") or "lexicon", int(meta.get("seed", 0)),
                                  made.get("captions", "first"), made.get("caption_text", "as written"))
    items = labclip_items(table)
    same = split == meta.get("split") and dataset_identity(dataset) == meta.get("dataset_id") \
        and "held_out" in meta
    result = {"split": split, "negatives": source, "n_samples_with_binding_negatives": int(len(items))}
    if same and source == SHUFFLED:
        held_out = None
        is_held = np.isin(items, np.asarray(meta.get("held_out_samples", []), np.int64))
        eval_rows, fit_rows = items[is_held], items[~is_held]
        result["evaluated_on"] = "held-out samples of the fitting split"
        result["n_held_out_combinations"] = 0
    elif same:
        held_out = {tuple(t) for t in meta["held_out"]}
        is_held = np.array([bool(held_out & table.triples(i)) for i in items], bool)
        eval_rows, fit_rows = items[is_held], items[~is_held]
        result["evaluated_on"] = "held-out combinations of the fitting split"
        result["n_held_out_combinations"] = len(held_out)
    else:
        eval_rows, fit_rows, held_out = items, np.zeros(0, np.int64), None
        result["evaluated_on"] = "every sample of the split with binding negatives"
    if not len(eval_rows):
        raise BadInput(f"split {split!r} has no sample to evaluate LABCLIP on")
    pairs = embed_pairs(table, dataset, embedder, eval_rows)
    select = None
    if held_out is not None:
        select = np.array([bool(t & held_out) for t in pairs.triples], bool)
    result["n_eval_samples"] = int(len(eval_rows))
    result["before"] = binding_report(pairs, None, select, table.attributes)
    result["after"] = binding_report(pairs, labclip, select, table.attributes)
    if len(fit_rows):
        fit_pairs = embed_pairs(table, dataset, embedder, fit_rows)
        result["fit_samples"] = {"n_samples": int(len(fit_rows)),
                                 "before": binding_report(fit_pairs, None, None, table.attributes),
                                 "after": binding_report(fit_pairs, labclip, None, table.attributes)}
    return result
