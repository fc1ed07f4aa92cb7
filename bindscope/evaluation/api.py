"""``bindscope.evaluate``: the library call behind ``madman eval`` and ``comco eval``.

Example (a notebook)::

    import bindscope
    run = bindscope.evaluate("data/madman", bindscope.EncoderSettings("ViT-B-32", pretrained="none"))
    run.result["metrics"]["splits"]["test"]["binding"]["accuracy"], run.path
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple

from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import BadInput, check_int, name_list, with_changes
from bindscope.evaluation import AuditSettings, PairSettings
from bindscope.limits import MAX_SEED
from bindscope.io.ownership import check_output_location


class Evaluation(NamedTuple):
    """What :func:`evaluate` returns: the result dict, the JSON file written (None if none), the plot (or None)."""

    result: dict
    path: Path | None
    plot: Path | None


def model_slug(encoder: EncoderSettings) -> str:
    """File-name part naming the model, its weights and the settings that change its embeddings: the pooling of
    an ``hf:`` model (``...-cls``, ``...-mean``) and a ``context_length`` (``...-context32``), so runs
    that differ in them never share a default result file. Resolves (and so validates) open_clip names without
    loading."""
    from bindscope.encoders.registry import encoder_kind

    name = _weights_slug(encoder.model, encoder.pretrained)
    if encoder_kind(encoder.model).name == "hf:":
        name += f"-{encoder.pooling}"
    if encoder.context_length is not None:
        name += f"-context{encoder.context_length}"
    return name


def _weights_slug(model: str, pretrained: str | None) -> str:
    from bindscope.encoders.hf_text import HF_PREFIX
    from bindscope.encoders.open_clip import resolve_open_clip
    from bindscope.encoders.registry import encoder_kind
    from bindscope.evaluation.results import short_hash, slug

    local = model[len(HF_PREFIX):] if model.startswith(HF_PREFIX) else model
    if os.path.isfile(local) or os.path.isdir(local):
        return f"{slug(Path(local).resolve().stem)}-{short_hash(str(Path(local).resolve()))}"
    kind = encoder_kind(model)
    if kind.name not in ("hf-hub:", "open_clip"):
        return (kind.slug or slug)(model)
    resolved, tag = resolve_open_clip(model, pretrained)
    if os.path.isfile(tag):
        tag = f"{Path(tag).stem}-{short_hash(tag)}"
    return f"{slug(resolved)}-{slug(tag)}"


class EvaluationPlan(NamedTuple):
    """An evaluation checked before any model is loaded (:func:`plan_evaluation`): ``run(adapter,
    text_transform, cache, progress, rows)`` computes the result dict (appending per-sample rows to the list
    ``rows``), ``folder`` / ``stem`` / ``suffix`` name the default result file (:meth:`default_out`), ``samples``:
    the per-sample rows are written beside the result."""

    run: Callable
    folder: Path
    stem: str
    suffix: str
    text_transform: Callable | None
    samples: bool = True

    def default_out(self, encoder: EncoderSettings) -> Path:
        """``<folder>/<stem>-<model slug><suffix>.json`` (e.g. ``DATA/eval/madman-vit-b-32-openai.json``;
        :func:`model_slug`)."""
        return self.folder / f"{self.stem}-{model_slug(encoder)}{self.suffix}.json"


def evaluation_kind(ds, task_names=None) -> str:
    """The result kind an evaluation of the open dataset ``ds`` writes: the kind of the named tasks when only one
    kind has them all; else ``madman-eval`` (each evaluation split on its own) when ``ds`` has a ``test`` or
    ``ood`` split, ``comco-eval`` (one split of scenes) otherwise."""
    from bindscope.evaluation.tasks.registry import tasks

    if task_names is not None:
        names = {t.strip() for t in (task_names.split(",") if isinstance(task_names, str) else task_names)} - {""}
        kinds = [k for k in ("madman-eval", "comco-eval") if names <= {t.name for t in tasks(k, "dataset")}]
        if len(kinds) == 1:
            return kinds[0]
    return "madman-eval" if {"test", "ood"} & set(ds.split_names) else "comco-eval"


def plan_evaluation(data, *, kind: str | None = None, tasks: str | list[str] | None = None,
                    splits: str | list[str] | None = None, options: dict | None = None, seed: int = 0,
                    text_transform=None) -> EvaluationPlan:
    """Check everything of an evaluation but the model and the output paths (see :func:`evaluate` for the
    arguments): the dataset (manifest, splits, shard checksums), the tasks, what they need of the dataset, their
    options.

    Raises:
        BadInput / DatasetError: as :func:`evaluate`, before any model is loaded.
    """
    from bindscope.evaluation.results import open_dataset
    from bindscope.evaluation.sampled import SampledCaptions, plan_sampled, run_sampled
    from bindscope.evaluation.tasks.registry import KINDS, check_options

    if kind is not None and kind not in ("madman-eval", "comco-eval"):
        raise BadInput(f"kind {kind!r} is not allowed; use madman-eval, comco-eval or None (chosen from the data)",
                       param="kind")
    check_int("seed", seed, 0, MAX_SEED)
    splits = name_list("splits", splits)
    tag = getattr(text_transform, "file_tag", None)
    suffix = f"-{tag}" if tag else ""
    if data is None or isinstance(data, SampledCaptions):
        if kind == "madman-eval" or splits:
            what = "kind madman-eval" if kind == "madman-eval" else "splits"
            raise BadInput(f"{what} needs DATA (a dataset); without one, TOR runs on sampled captions",
                           param="kind" if kind else "splits")
        sampled = plan_sampled(data, tasks, options, seed)

        def run(adapter, text_transform, cache, progress, rows):
            return run_sampled(sampled, adapter, text_transform=text_transform, cache=cache, seed=seed,
                               progress=progress, rows=rows)
        return EvaluationPlan(run, Path(sampled.stem).parent, Path(sampled.stem).name, suffix, text_transform)
    ds = open_dataset(data, validate=False)
    kind = kind or evaluation_kind(ds, tasks)
    check_options(kind, options)  # the values, before the dataset is read
    command = KINDS[kind]
    if kind == "madman-eval":
        run, stem, extra = _split_run(ds, tasks, splits, options, seed)
    else:
        if splits is not None and len(splits) > 1:
            raise BadInput(f"splits {', '.join(splits)!r}: {command} reads one split of scenes; give one",
                           param="splits")
        run, stem, extra = _scenes_run(ds, tasks, splits[0] if splits else None, options, seed)
    return EvaluationPlan(run, Path(ds.path) / "eval", stem, suffix + extra, text_transform)


def run_evaluation(plan: EvaluationPlan, encoder: EncoderSettings, *, out: Path | None, plot: Path | None = None,
                   overwrite: bool = False, progress: bool = True) -> Evaluation:
    """Load the encoder of ``encoder`` (one model: :func:`bindscope.encoders.registry.load_encoder`) and run a
    checked :class:`EvaluationPlan` with its embedding cache; write the result (and its per-sample rows,
    :func:`bindscope.evaluation.results.samples_path`) to ``out`` (None: nothing written) and the plot.
    ``out`` and ``plot`` must already be checked (:func:`evaluate` does it)."""
    from bindscope.encoders.embedding_cache import open_cache
    from bindscope.encoders.registry import load_encoder
    from bindscope.evaluation.report import plot_result
    from bindscope.evaluation.results import write_result

    adapter = load_encoder(encoder)
    if hasattr(plan.text_transform, "check_encoder"):
        plan.text_transform.check_encoder(adapter)
    cache = open_cache(adapter, encoder.cache_dir, encoder.use_cache)
    rows: list | None = [] if out is not None and plan.samples else None  # built only to be written
    result = plan.run(adapter, plan.text_transform, cache, progress, rows)
    if out is not None:
        write_result(out, result, overwrite=overwrite, rows=rows if plan.samples else None)
    if plot is not None:
        plot_result(result, plot)
    return Evaluation(result, out, plot)


def evaluate(data, encoder: EncoderSettings | str = "ViT-B-32", *, kind: str | None = None,
             tasks: str | list[str] | None = None, splits: str | list[str] | None = None,
             options: dict | None = None, seed: int = 0, text_transform=None,
             out: str | os.PathLike | bool | None = None, overwrite: bool = False,
             plot: str | os.PathLike | None = None, progress: bool = True) -> Evaluation:
    """Evaluate an encoder on a dataset with registered tasks (:mod:`bindscope.evaluation.tasks`); return the
    result (schema ``eval_result``), written as JSON with its per-sample rows (``<result>.samples.jsonl``) beside
    it. ``madman eval`` and ``comco eval`` are :func:`plan_evaluation` then :func:`run_evaluation` per model, as
    here, and print :func:`bindscope.evaluation.report.format_result` of the result.

    Which tasks can run depends on what the dataset holds (:attr:`Dataset.holds
    <bindscope.format.reader.Dataset.holds>`), not on the generator that made it. ``madman-eval`` tasks score each
    evaluation split on its own: ``binding`` (recognition and binding per attribute, binding counted where
    recognition succeeded for both objects; Gurung et al., GCPR 2025; the default), ``first-mention`` and
    ``large-object`` (:mod:`bindscope.evaluation.saliency`). ``comco-eval`` tasks read one split of scenes: TOR,
    IOR, I2TOR, matching (Abbasi et al., CVPR 2025), ``binding`` on scenes that store negatives (the defaults,
    those the dataset holds what they need for), ``toc``, ``ioc``, ``retrieval`` (only when named); without a
    dataset TOR, ``claim1`` and ``toc`` on sampled captions. See docs/evaluation.md and docs/real-data.md.

    Args:
        data: dataset folder or an open :class:`~bindscope.format.reader.Dataset`; or a
            :class:`~bindscope.evaluation.sampled.SampledCaptions` (or None: its defaults) for TOR on captions
            sampled from a vocabulary or given.
        encoder: the encoder and how it runs, an :class:`~bindscope.encoders.settings.EncoderSettings` (model,
            pretrained, device, precision, batch_size, pooling, context_length, cache_dir, use_cache; one model),
            or a model name or path with every other setting at its default (open_clip name, ``hf-hub:``,
            ``hf:``, ``sentence-transformers/<name>``, or a ``bindscope train`` run folder / checkpoint).
        kind: ``madman-eval`` or ``comco-eval``; None: the kind of the named tasks, else ``madman-eval`` for a
            dataset with a ``test`` or ``ood`` split, ``comco-eval`` otherwise (:func:`evaluation_kind`).
        tasks: task names, a comma-separated string or a list (see ``madman eval --help`` / ``comco eval
            --help``); default: the kind's default tasks whose needs the dataset meets.
        splits: ``madman-eval``: the splits, each scored on its own (default: test and ood, those present);
            ``comco-eval``: the one split of scenes (default ``scenes``, or the dataset's only split).
        options: per task name its options: an instance of the task's options dataclass or a dict of its fields,
            e.g. ``{"matching": MatchingOptions(matching_negatives=5), "tor": {"protocol": "both"}, "ior":
            {"references": "domainnet/real"}, "toc": {"head_epochs": 10}}``; a field several chosen tasks have
            (``protocol``, ``object_order``, the ``head_*`` fields) takes one value in all of them.
        seed: seed of samplings (matching negatives, sampled captions) and bootstraps (>= 0).
        text_transform: a callable on L2-normalised (N, D) text embeddings, e.g. a LABCLIP map
            (``bindscope.labclip.load(path)``); its ``file_tag`` (if any) names the default result file and
            its ``check_encoder(adapter)`` (if any) runs before encoding.
        out: result file (default ``DATA/eval/<task>-<model>-<tag>.json``, or ``results/comco-sampled-...``
            without data); ``False``: write nothing. overwrite: replace an existing result file.
        plot: also draw the result (.png/.pdf/.svg). progress: tqdm bars on stderr.

    Returns:
        An :class:`Evaluation`: ``result`` (the dict written), ``path`` (the JSON file, None with
        ``out=False``), ``plot`` (or None).

    Raises:
        BadInput / DatasetError: a bad value or dataset, an unknown task or option, a task whose needs the data
            does not meet (the message says what it needs and what the split holds), options of tasks that do not
            run, an existing result file without ``overwrite``; all checked before the model is loaded or a file
            is written; ``param`` names the parameter.
    """
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path

    # Everything a user can get wrong is checked before the model is loaded or a file is written.
    encoder = EncoderSettings.of(encoder)
    plan = plan_evaluation(data, kind=kind, tasks=tasks, splits=splits, options=options, seed=seed,
                           text_transform=text_transform)
    default_out = plan.default_out(encoder)
    out_path = None if out is False else check_result_path(default_out if out in (None, True) else out, overwrite)
    plot_path = check_plot_path(plot)
    check_locations(out_path, plot_path)
    return run_evaluation(plan, encoder, out=out_path, plot=plot_path, overwrite=overwrite, progress=progress)


def check_locations(out_path: Path | None, plot_path: Path | None) -> None:
    """BadInput unless the result file and the plot can be created (no file in the way, a writable folder)."""
    for param, path in (("out", out_path), ("plot", plot_path)):
        if path is not None:
            check_output_location(param, path)


def _split_run(ds, task_names, splits, options, seed):
    """Split tasks (:mod:`bindscope.evaluation.splits`): check them; return (run, file stem, file suffix)."""
    from bindscope.evaluation.splits import plan_splits, run_splits

    plan = plan_splits(ds, task_names, splits, options)
    ds.check(plan.splits)

    def run(adapter, text_transform, cache, progress, rows):
        return run_splits(plan, adapter, text_transform=text_transform, cache=cache, seed=seed, progress=progress,
                          rows=rows)
    names = [t.name for t in plan.chosen]
    stem = "madman" if names == ["binding"] else "madman-" + "+".join(names)
    return run, stem, ""


def _scenes_run(ds, task_names, split, options, seed):
    """Scene tasks (:mod:`bindscope.evaluation.scenes`): check them; return (run, file stem, file suffix)."""
    from bindscope.evaluation.scenes import plan_scenes, run_scenes

    scenes = plan_scenes(ds, task_names, split, options, seed)
    ds.check(scenes.splits)

    def run(adapter, text_transform, cache, progress, rows):
        return run_scenes(scenes, adapter, text_transform=text_transform, cache=cache, seed=seed, progress=progress,
                          rows=rows)
    return run, f"comco-{'+'.join(scenes.names)}", scenes.file_suffix()


def plan_bench(benchmark: str, data: str | os.PathLike, *, images: str | os.PathLike | None = None,
               flickr_images: str | os.PathLike | None = None, subsets: list[str] | None = None, seed: int = 0,
               options=None, text_transform=None) -> EvaluationPlan:
    """ARO or SugarCrepe from their published files (``bindscope bench``; docs/real-data.md) as an
    :class:`EvaluationPlan`: the files and every image are checked here, before any model is loaded
    (:func:`bindscope.evaluation.bench.read_bench`); :func:`run_evaluation` then scores a model (the task
    ``benchmark`` of kind ``bench``, :mod:`bindscope.evaluation.tasks.bench`: accuracy per subset with Wilson 95%
    intervals, macro and micro averages). Default result file:
    ``results/bench/<benchmark>-<model>-<tag>[-<labclip tag>].json``.

    Args:
        benchmark: ``"aro"`` or ``"sugarcrepe"``. data: folder of the benchmark's JSON files.
        images / flickr_images: image roots (SugarCrepe: COCO val2017; ARO: the COCO and Flickr30k roots of
            the order subsets' image paths, default ``data``). subsets: the subsets (default: every subset whose
            file is in ``data``). seed: seed of ARO's order perturbations.
        options: the benchmark's options, a :class:`~bindscope.evaluation.tasks.bench.BenchOptions` or a dict of its
            fields: ``image_fit`` (``"centre-crop"``, the default, or ``"letterbox"``) and ``tagger`` (ARO's
            order subsets: ``"spacy"``, ``"lexicon"`` or None, spaCy where installed).
        text_transform: e.g. a LABCLIP map applied to the text embeddings (its ``file_tag`` names the file).

    Raises:
        BadInput: unknown benchmark, subset, image fit or tagger, a missing folder, file or image, a malformed
            entry, ``tagger="spacy"`` without spaCy.
    """
    from types import SimpleNamespace

    from bindscope.evaluation.aro import OrderTagger
    from bindscope.evaluation.bench import read_bench
    from bindscope.evaluation.tasks.registry import get_task, resolve_options

    task = get_task("bench", benchmark)
    opts = resolve_options([task], {benchmark: options} if options is not None else None, task.kind)[benchmark]
    image_fit = opts.image_fit
    order_tagger = OrderTagger(opts.tagger)
    items = read_bench(benchmark, data, images, flickr_images, subsets, tagger=order_tagger, seed=seed)
    tag = getattr(text_transform, "file_tag", None)

    def run(adapter, text_transform, cache, progress, rows):
        state = SimpleNamespace(benchmark=benchmark, items=items, adapter=adapter, text_transform=text_transform,
                                cache=cache, data=str(Path(data).resolve()), seed=seed, progress=progress,
                                image_fit=image_fit, tagger=order_tagger, result=None)
        task.compute(state, opts)
        return state.result
    return EvaluationPlan(run, Path("results") / "bench", benchmark, f"-{tag}" if tag else "", text_transform,
                          samples=False)


def plan_attention(data: str | os.PathLike, *, split: str = "scenes", options=None, seed: int = 0,
                   batch_size: int | None = None, device: str = "auto") -> EvaluationPlan:
    """``comco attention`` as an :class:`EvaluationPlan`: the task ``attention`` (kind ``comco-attention``,
    :mod:`bindscope.evaluation.tasks.attention`) on split ``split`` of ``data``, its options
    (:class:`~bindscope.evaluation.tasks.attention.AttentionOptions` or a dict of its fields) and the dataset
    checked here. Default result file: ``DATA/eval/attention-<layers>[-rollout]-<model>-<tag>.json``.

    Raises:
        BadInput / DatasetError: a bad option, a missing split, a split without objects, a corrupt shard.
    """
    from types import SimpleNamespace

    from bindscope.encoders.interface import default_batch_size
    from bindscope.evaluation.results import open_dataset
    from bindscope.evaluation.tasks.registry import get_task, resolve_options

    task = get_task("comco-attention", "attention")
    chosen = resolve_options([task], {"attention": options} if options is not None else None, task.kind)
    opts = chosen["attention"]
    check_int("seed", seed, 0, MAX_SEED)
    ds = open_dataset(data)
    ds.split(split)
    ds.check([split])
    batch_size = batch_size or default_batch_size(device)

    def run(adapter, text_transform, cache, progress, rows):
        state = SimpleNamespace(dataset=ds, adapter=adapter, split=split, batch_size=batch_size, seed=seed,
                                progress=progress, result=None)
        task.compute(state, opts)
        return state.result
    return EvaluationPlan(run, Path(data) / "eval", f"attention-{opts.layers}{'-rollout' if opts.use_rollout else ''}",
                          "", None, samples=False)


def _check_new_file(param: str, path: Path | None, overwrite: bool) -> None:
    """BadInput when ``path`` exists and ``overwrite`` is off (the message names ``param``)."""
    if path is not None and path.exists() and not overwrite:
        raise BadInput(f"{param} {str(path)!r} already exists; pass overwrite=True to replace it, or choose "
                       "another file", param=param)


def audit(data, settings: AuditSettings | None = None, *, out: str | os.PathLike | None = None,
          plot: str | os.PathLike | None = None, overwrite: bool = False, progress: bool = True,
          **options) -> Evaluation:
    """Audit a MADMAN dataset with the supervised oracle (:func:`bindscope.evaluation.audit.audit_madman`, the
    library call behind ``madman audit``; docs/madman.md): accuracy per attribute and for the digit identity
    (per class, confusion matrices, per size level) of a small CNN trained on the isolated objects.

    Args:
        data: MADMAN dataset folder (or an open Dataset).
        settings: an :class:`~bindscope.evaluation.AuditSettings` (``train_split``, ``test_split``, ``epochs``,
            ``batch_size``, ``lr``, ``width`` (channels), ``seed``, ``max_train_objects``, ``max_test_objects``,
            ``threads`` (torch CPU threads; the result depends on it), ``shift`` (pixels)); default: its defaults.
        out: result JSON (schema ``bindscope/schemas/audit_result.json``), or None to write none.
        plot: confusion-matrix figure (.png, .pdf or .svg), or None. overwrite: replace existing files.
        progress: tqdm bar on stderr.
        **options: fields of ``settings`` in place of its values (``epochs=1``, ``width=4``, ...).

    Returns:
        ``Evaluation(result, out path or None, plot path or None)``.

    Raises:
        BadInput / DatasetError: an existing ``out``/``plot`` without ``overwrite``, both the same file, a bad
            suffix or location, a bad option or dataset; all before the oracle is trained.
    """
    from bindscope.evaluation.audit import audit_madman, plot_audit
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path, write_result

    settings = with_changes(settings or AuditSettings(), options, "an audit option")
    out_path = check_result_path(out, overwrite) if out is not None else None
    plot_path = check_plot_path(plot)
    _check_new_file("plot", plot_path, overwrite)
    if out_path is not None and plot_path is not None and out_path.resolve() == plot_path.resolve():
        raise BadInput(f"out and plot are the same file {str(out_path)!r}; give two paths", param="out")
    check_locations(out_path, plot_path)
    result = audit_madman(data, settings, progress=progress)
    if plot_path is not None:
        plot_audit(result, plot_path)
    if out_path is not None:
        write_result(out_path, result, overwrite=overwrite, schema="audit_result")
    return Evaluation(result, out_path, plot_path)


def caption_bias(data, *, splits: list[str] | None = None, seed: int = 0, out: str | os.PathLike | None = None,
                 overwrite: bool = False, plot: str | os.PathLike | None = None, pairs: PairSettings | None = None,
                 progress: bool = True, **changes) -> Evaluation:
    """Where captions mention the image's largest object (ComCO Claim 2; the library call behind
    ``bindscope caption-bias``): :func:`bindscope.evaluation.caption_bias.caption_bias` on a bindscope dataset, or
    :func:`~bindscope.evaluation.caption_bias.caption_bias_pairs` on image-caption pairs without annotations,
    written as canonical JSON (pairs: with one row per caption in ``<out stem>.samples.jsonl``).

    Args:
        data: a bindscope dataset with captions and an object table (COCO import, ComCO, MADMAN), or image-caption
            pairs: a folder or file as img2dataset writes them (:func:`bindscope.importers.image_captions.open_pairs`).
        splits: splits of a dataset to read (default: all but ``references``). seed: bootstrap seed (>= 0).
        out: result JSON (a dataset's default: ``DATA/eval/caption-bias.json``; pairs need one).
        overwrite: replace an existing result. plot: also draw a bar plot into this file (``.png``, ``.pdf`` or
            ``.svg``); None: no plot.
        pairs: image-caption pairs only, a :class:`~bindscope.evaluation.PairSettings`: ``detector`` (required: an
            OWLv2 / OWL-ViT repository id or folder), ``segmenter`` (a SAM model whose masks give the areas; None:
            the detector's boxes), ``threshold`` (0..1; None: 0.1), ``caption_objects`` (``lexicon`` or ``spacy``),
            ``names`` (lexicon only: ``coco``, ``comco72``, a file), ``limit`` (at most this many pairs),
            ``device``, ``precision`` (where and how the detector and segmenter run).
        progress: a tqdm bar (pairs).
        **changes: fields of ``pairs`` in place of its values (``detector="google/owlv2-base-patch16"``).

    Returns:
        ``Evaluation(result, out path, plot path or None)``.

    Raises:
        BadInput / DatasetError: an existing result or plot without ``overwrite``, an unusable location, a plot
            name with another suffix, an unknown split, a dataset without captions, pair options with a dataset or
            pairs without ``detector`` and ``out``, a detector or segmenter that cannot be loaded; all before
            anything is written.
    """
    from bindscope.evaluation.caption_bias import caption_bias as measure
    from bindscope.evaluation.caption_bias import caption_bias_pairs, objects_finder, plot_caption_bias
    from bindscope.evaluation import DETECTION_THRESHOLD
    from bindscope.evaluation.detection import BoxSegmenter, OpenVocabularyDetector
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path, write_result
    from bindscope.format.manifest import MANIFEST
    from bindscope.importers.image_captions import open_pairs

    check_int("seed", seed, 0)
    settings = with_changes(pairs or PairSettings(), changes, "a pair setting")
    detector, segmenter, threshold = settings.detector, settings.segmenter, settings.threshold
    is_dataset = (Path(data) / MANIFEST).is_file()
    if is_dataset:
        given = settings.given()
        if given:
            raise BadInput(f"{given[0]} applies to image-caption pairs without annotations; {str(data)!r} is a "
                           "bindscope dataset, whose object table gives the objects and their areas", param=given[0])
    else:
        source = open_pairs(data)
        if splits:
            raise BadInput(f"splits apply to a bindscope dataset; {str(data)!r} holds image-caption pairs",
                           param="splits")
        if detector is None:
            raise BadInput(f"detector is needed for image-caption pairs without annotations ({str(data)!r} is not "
                           "a bindscope dataset): give an OWLv2 / OWL-ViT model, e.g. "
                           "google/owlv2-base-patch16-ensemble", param="detector")
        if out is None:
            raise BadInput(f"out is needed for image-caption pairs ({str(data)!r} is not a bindscope dataset): give "
                           "the result JSON path", param="out")
        objects_finder(settings.caption_objects, settings.names)  # a bad choice or name list fails before a model loads
    out_path = check_result_path(out or Path(data) / "eval" / "caption-bias.json", overwrite)
    plot_path = check_plot_path(plot)
    if plot_path is not None and plot_path.exists() and not overwrite:
        raise BadInput(f"plot {str(plot_path)!r} already exists; pass overwrite=True to replace it", param="plot")
    check_locations(out_path, plot_path)
    rows = None
    if is_dataset:
        result = measure(data, splits=splits, seed=seed)
    else:
        found = OpenVocabularyDetector(detector, settings.device, settings.precision)
        masks = BoxSegmenter(segmenter, settings.device, settings.precision) if segmenter is not None else None
        rows = []
        result = caption_bias_pairs(source, found, masks, caption_objects=settings.caption_objects,
                                    names=settings.names, threshold=DETECTION_THRESHOLD if threshold is None else
                                    threshold, seed=seed, limit=settings.limit, progress=progress, rows=rows)
    write_result(out_path, result, overwrite=overwrite, rows=rows, schema="caption_bias_result")
    if plot_path is not None:
        plot_caption_bias(result, plot_path)
    return Evaluation(result, out_path, plot_path)


def collect(results: list[str | os.PathLike], out: str | os.PathLike, *, plot: str | os.PathLike | None = None,
            columns: list[str] | None = None, compare: bool = False, overwrite: bool = False) -> dict:
    """Write one table of result JSONs of every kind (the library call behind ``bindscope collect``; see
    :mod:`bindscope.evaluation.collect`): a row per result file (model, pretrained tag, checkpoint step), a column
    per figure (positions, attributes, size ranks, probe and audit accuracies, caption-bias shares, ...), each
    share in percent with its 95% interval, every column defined.

    Results that differ only in seed (training seeds of one run identity, or evaluation seeds) are also reported
    as a group: the mean, each seed's value and a t interval over the seeds; a ``madman sweep`` folder is read
    point by point, with the swept property, value and seed as columns
    (:mod:`bindscope.evaluation.collect_groups`).

    Args:
        results: result files or folders of them, of any kind ``bindscope collect`` reads: ``madman eval``,
            ``comco eval``, ``comco attention``, ``bindscope bench``, a training run's ``result.json``,
            ``bindscope probe`` (attributes, conjunctive search), ``bindscope labclip eval``, ``madman audit``,
            ``bindscope caption-bias``; or ``madman sweep`` folders.
        out: the table, ``.csv`` (value/low/high columns), ``.md`` (Markdown, with the column definitions) or
            ``.json`` (the table dict). overwrite: replace files.
        plot: also draw the table (.png, .pdf or .svg): curves against the swept value for a sweep, over
            training steps for checkpoints (bands over seeds where there are several), else grouped bars.
            columns: the columns to plot (default: binding and recognition micro averages, else the first 8).
        compare: also compare the results with paired tests, each against the first
            (:func:`bindscope.evaluation.compare.compare_results`: they must be of one task on the same samples):
            ``table["comparison"]``, appended to a ``.md`` table (a ``.csv`` table cannot hold it).

    Returns:
        The table dict (``columns``, ``definitions``, ``rows``, ``groups``, ``summary``; ``comparison`` with
        ``compare``) of :func:`bindscope.evaluation.collect.collect`.

    Raises:
        BadInput: a bad ``out`` suffix, an existing ``out``/``plot`` without ``overwrite``, an unknown column,
            an unreadable file, one of no known kind or failing its kind's schema (named, with the reason);
            ``compare`` with a ``.csv`` table or results a comparison refuses; before anything is written.
    """
    from bindscope.evaluation.collect import TABLE_SUFFIXES, format_table, plot_table
    from bindscope.evaluation.collect import collect as gather
    from bindscope.evaluation.report import check_plot_path
    from bindscope.io.atomic import write_text_atomic

    out_path = Path(out)
    if out_path.suffix.lower() not in TABLE_SUFFIXES:
        raise BadInput(f"out {str(out)!r}: the file name must end in one of {', '.join(TABLE_SUFFIXES)}",
                       param="out")
    if compare and out_path.suffix.lower() == ".csv":
        raise BadInput(f"compare: a .csv table ({str(out)!r}) cannot hold the comparison; write .md or .json, or "
                       "use bindscope compare --format csv", param="compare")
    plot_path = check_plot_path(plot)
    for param, path in (("out", out_path), ("plot", plot_path)):
        _check_new_file(param, path, overwrite)
    check_locations(out_path, plot_path)
    table = gather(list(results))
    if compare:
        from dataclasses import asdict

        from bindscope.evaluation.collect import result_files
        from bindscope.evaluation.compare import compare_results

        table["comparison"] = asdict(compare_results(result_files(list(results))))
    if columns is not None:
        unknown = [c for c in columns if c not in table["columns"]]
        if unknown or not columns:
            raise BadInput(f"columns {','.join(columns)!r}: unknown column(s) {', '.join(unknown) or '(none given)'}; "
                           f"the table has: {', '.join(table['columns'][:20])}"
                           f"{' ...' if len(table['columns']) > 20 else ''}", param="columns")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, format_table(table, out_path.suffix.lower().lstrip(".")))
    if plot_path is not None:
        plot_table(table, plot_path, columns)
    return table
