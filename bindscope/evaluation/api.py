"""``bindscope.evaluate``: the library call behind ``madman eval`` and ``comco eval``.

Example (a notebook)::

    import bindscope
    run = bindscope.evaluate("data/madman", bindscope.EncoderSettings("ViT-B-32", pretrained="none"))
    run.result["metrics"]["splits"]["test"]["binding"]["accuracy"], run.path
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Callable, NamedTuple

from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import BadInput, DatasetError, check_int, name_list
from bindscope.io.ownership import check_output_location

MAX_SAMPLED_CAPTIONS = 1_000_000  # TOR on sampled captions: captions per group


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


def plan_evaluation(data: str | os.PathLike | None, *, splits: list[str] | None = None,
                    tasks: str | None = None, text_transform=None, matching_negatives: int | None = None,
                    seed: int = 0, objects: int | None = None, vocab: str | None = None, n: int | None = None,
                    split: str | None = None, references: str | os.PathLike | None = None,
                    category_map: str | os.PathLike | None = None, references_per_category: int = 10,
                    generators: tuple[str, ...] = ("madman", "comco", "coco"),
                    task_name: str = "evaluate", protocol: str = "bindscope", captions: str | None = None,
                    names: str | None = None, object_order: str = "mention", bias_position: int | None = None,
                    heads=None) -> EvaluationPlan:
    """Check everything of an evaluation but the model and the output paths (see :func:`evaluate` for the
    arguments): the dataset (manifest, splits, shard checksums), the tasks and their options.

    Raises:
        BadInput / DatasetError: as :func:`evaluate`, before any model is loaded.
    """
    from bindscope.evaluation.clip_oscope import check_protocol, ordered_objects
    from bindscope.evaluation.position_heads import HeadSettings
    from bindscope.evaluation.results import open_dataset

    matching_negatives = None if matching_negatives == "all" else matching_negatives
    _check_seed(seed, matching_negatives)
    check_protocol(protocol)
    ordered_objects([], object_order)
    heads = (heads or HeadSettings(seed=seed)).check()
    if bias_position is not None:
        check_int("bias_position", bias_position, 1)
    oscope = {"protocol": protocol, "object_order": object_order, "bias_position": bias_position, "heads": heads}
    splits = name_list("splits", splits)
    tag = getattr(text_transform, "file_tag", None)
    suffix = f"-{tag}" if tag else ""
    if data is not None:
        given = [p for p, v in (("objects", objects), ("vocab", vocab), ("n", n), ("captions", captions),
                                ("names", names)) if v is not None]
        if given:
            raise BadInput(f"{', '.join(given)} only apply without DATA (sampled-caption TOR); with DATA the "
                           "dataset's scenes are used", param=given[0])
        ds = open_dataset(data, generators, task_name, validate=False)
        if ds.generator == "madman":
            from bindscope.evaluation.saliency import parse_madman_tasks

            task_list = parse_madman_tasks(tasks)
            _refuse_scene_options(None, matching_negatives, split, references, category_map)
            _refuse_oscope_options(oscope, "a MADMAN dataset is evaluated per split (splits=)")
            run, stem, extra = _madman_run(ds, splits, task_list, seed)
        else:
            run, stem, extra = _scenes_run(ds, tasks, matching_negatives, seed, split, references, category_map,
                                           references_per_category, oscope)
        return EvaluationPlan(run, Path(ds.path) / "eval", stem, suffix + extra, text_transform)
    given = [p for p, v in (("split", split), ("references", references), ("category_map", category_map),
                            ("bias_position", bias_position)) if v is not None]
    if object_order != "mention":
        given.append("object_order")
    if given:
        raise BadInput(f"{', '.join(given)} need DATA (a ComCO dataset or a COCO import)", param=given[0])
    run, stem = _sampled_run(tasks, matching_negatives, seed, objects, vocab, n, captions, names, oscope)
    return EvaluationPlan(run, Path(stem).parent, Path(stem).name, suffix, text_transform)


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


def evaluate(data: str | os.PathLike | None, encoder: EncoderSettings | str = "ViT-B-32", *,
             splits: list[str] | None = None, tasks: str | None = None, text_transform=None,
             out: str | os.PathLike | bool | None = None, overwrite: bool = False,
             plot: str | os.PathLike | None = None,
             progress: bool = True, matching_negatives: int | None = None, seed: int = 0, objects: int | None = None,
             vocab: str | None = None, n: int | None = None, split: str | None = None,
             references: str | os.PathLike | None = None, category_map: str | os.PathLike | None = None,
             references_per_category: int = 10, generators: tuple[str, ...] = ("madman", "comco", "coco"),
             task_name: str = "evaluate", protocol: str = "bindscope", captions: str | None = None,
             names: str | None = None, object_order: str = "mention", bias_position: int | None = None,
             heads=None) -> Evaluation:
    """Evaluate an encoder on a dataset; return the result (schema ``eval_result``), written as JSON with its
    per-sample rows (``<result>.samples.jsonl``) beside it.

    MADMAN datasets: recognition and binding accuracy per attribute and split (binding counted where recognition
    succeeded for both digits; Gurung et al., GCPR 2025), Wilson 95% intervals. ComCO/SimCO datasets: TOR, IOR,
    I2TOR, image-text matching (Abbasi et al., CVPR 2025) and, on datasets rendered with attributes, MADMAN's
    recognition and binding (``binding``). ``data=None``: TOR (and ``claim1``) on captions
    sampled from the vocabulary ``vocab``. COCO imports: the ComCO tasks, IOR against external reference images
    (``references``). See docs/evaluation.md and docs/real-data.md. ``madman eval`` and ``comco eval`` are
    :func:`plan_evaluation` then :func:`run_evaluation` per model, as here.

    Args:
        data: dataset folder (or an open :class:`~bindscope.format.reader.Dataset`), or None (sampled captions).
        encoder: the encoder and how it runs, an :class:`~bindscope.encoders.settings.EncoderSettings` (model,
            pretrained, device, precision, batch_size, pooling, context_length, cache_dir, use_cache; one model),
            or a model name or path with every other setting at its default (open_clip name, ``hf-hub:``,
            ``hf:``, ``sentence-transformers/<name>``, or a ``bindscope train`` run folder / checkpoint).
        splits: MADMAN splits, a list or one name (default: test and ood, those present).
        tasks: ComCO tasks, e.g. ``"tor,ior"`` (of tor, ior, i2tor, matching, binding; default: all that
            apply with data, ``tor`` without; ``toc`` and ``ioc``, the position heads, only when named). MADMAN
            tasks: ``binding`` (the default), ``first-mention`` and ``large-object``
            (:mod:`bindscope.evaluation.saliency`), e.g. ``"first-mention,large-object"``.
        text_transform: a callable on L2-normalised (N, D) text embeddings, e.g. a LABCLIP map
            (``bindscope.labclip.load(path)``); its ``file_tag`` (if any) names the default result file and
            its ``check_encoder(adapter)`` (if any) runs before encoding.
        out: result file (default ``DATA/eval/<task>-<model>-<tag>.json``, or ``results/comco-sampled-...``
            without data); ``False``: write nothing. overwrite: replace an existing result file.
        plot: also draw the result (.png/.pdf/.svg). progress: tqdm bars on stderr.
        matching_negatives / seed: ComCO matching (wrong captions per scene, an integer >= 1 or ``"all"`` =
            None = every absent category; seed >= 0).
        protocol: ``bindscope`` (default), ``clip-oscope`` (TOR and IOR as the authors' scripts compute them,
            :mod:`bindscope.evaluation.clip_oscope`, under ``metrics["clip_oscope"]``) or ``both``.
        captions / names: without data: ``captions="combinations"`` (every ``itertools.combinations`` of the
            name list ``names`` with ``objects`` names each, default 3, in list order: the authors' caption set) or
            a text file of captions (one per line, objects separated by " and "); ``names``: ``comco72``
            (default), ``simco18``, an asset folder or a file of names, one per line (the candidates).
        object_order: ``mention`` or ``size``: the order standing in for the authors' file names (clip-oscope
            IOR, IOC, ``bias_position``). bias_position: matching with the biased object at this 1-based
            position and the authors' captions. heads: :class:`~bindscope.evaluation.position_heads.HeadSettings`
            of the ``toc`` / ``ioc`` tasks.
        split: ComCO/COCO: the split of scenes (default ``scenes``, or the dataset's only split).
        references / category_map / references_per_category: ComCO/COCO IOR against external single-object
            images, one subfolder per category (the DomainNet layout), averaged per category.
        objects / vocab / n: sampled-caption TOR only (objects per caption >= 2, vocabulary, captions 1..1e6).
        generators / task_name: the dataset kinds accepted and the name used in messages (the commands
            pass ``("madman",), "madman eval"`` and ``("comco", "coco"), "comco eval"``).

    Returns:
        An :class:`Evaluation`: ``result`` (the dict written), ``path`` (the JSON file, None with
        ``out=False``), ``plot`` (or None).

    Raises:
        BadInput / DatasetError: a bad value or dataset, a ComCO/COCO option (``tasks``, ``matching_negatives``,
            ``split``, ``references``, ``category_map``) with a MADMAN dataset, an existing result file without
            ``overwrite``; all checked before the model is loaded or a file is written; ``param`` names the
            parameter.
    """
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path

    # Everything a user can get wrong is checked before the model is loaded or a file is written.
    encoder = EncoderSettings.of(encoder)
    plan = plan_evaluation(data, splits=splits, tasks=tasks, text_transform=text_transform,
                           matching_negatives=matching_negatives, seed=seed, objects=objects, vocab=vocab, n=n,
                           split=split, references=references, category_map=category_map,
                           references_per_category=references_per_category, generators=generators,
                           task_name=task_name, protocol=protocol, captions=captions, names=names,
                           object_order=object_order, bias_position=bias_position, heads=heads)
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


def _refuse_scene_options(tasks, matching_negatives, split, references, category_map) -> None:
    """BadInput for a ComCO/COCO option given with a MADMAN dataset (an unknown task name is refused as such)."""
    from bindscope.evaluation.comco import ALL_TASKS, parse_tasks

    if tasks is not None:
        parse_tasks(tasks, ALL_TASKS)
    options = {"tasks": tasks, "matching_negatives": matching_negatives, "split": split, "references": references,
               "category_map": category_map}
    for param, value in options.items():
        if value is not None:
            raise BadInput(f"{param} {value!r} only applies to ComCO datasets and COCO imports; a MADMAN dataset "
                           "is evaluated per split (splits=)", param=param)


def _refuse_oscope_options(oscope: dict, why: str) -> None:
    """BadInput for a clip-oscope / position-head option that the evaluation at hand does not use."""
    for param, default in (("protocol", "bindscope"), ("object_order", "mention"), ("bias_position", None)):
        if oscope[param] != default:
            raise BadInput(f"{param} {oscope[param]!r} only applies to ComCO datasets and COCO imports; {why}",
                           param=param)


def _madman_run(ds, splits, task_list=("binding",), seed=0):
    """MADMAN tasks (recognition and binding; first-mention, large-object): check the splits; return
    (run(adapter, transform, cache, progress, rows), file stem, file suffix)."""
    from bindscope.encoders.embedding_cache import Embedder
    from bindscope.evaluation.madman import default_splits, evaluate_madman
    from bindscope.evaluation.saliency import evaluate_saliency

    for name in splits or []:
        if name not in ds.split_names:
            raise DatasetError(f"splits {name!r}: dataset {str(ds.path)!r} has no such split; it has: "
                               f"{', '.join(ds.split_names)}", param="splits")
    ds.check(list(splits or []) or default_splits(ds))
    others = [t for t in task_list if t != "binding"]

    def run(adapter, text_transform, cache, progress, rows):
        embedder = Embedder(adapter, cache, progress=progress)
        result = None
        if "binding" in task_list:
            result = evaluate_madman(ds, adapter, splits=list(splits or []) or None, text_transform=text_transform,
                                     embedder=embedder, progress=progress, check=False, rows=rows)
        if others:
            extra = evaluate_saliency(ds, adapter, others, splits=list(splits or []) or None,
                                      text_transform=text_transform, embedder=embedder, progress=progress,
                                      check=False, rows=rows, seed=seed)
            if result is None:
                return extra
            # one embedder served both: its counters (the later result's) cover both; each keeps its truncation
            result["metrics"].update(extra["metrics"])
            result["settings"]["tasks"] = list(task_list)
            result["settings"]["saliency"] = {k: extra["settings"][k] for k in ("interval", "size_levels")}
            result["counts"] = {**extra["counts"], "truncation": result["counts"]["truncation"],
                                "truncation_saliency": extra["counts"]["truncation"]}
        return result
    stem = "madman" if list(task_list) == ["binding"] else "madman-" + "+".join(task_list)
    return run, stem, ""


def _scenes_run(ds, tasks, matching_negatives, seed, split, references, category_map, references_per_category,
                oscope=None):
    """TOR / IOR / I2TOR / matching on a ComCO dataset or a COCO import: check the options; return (run, file
    stem, file suffix)."""
    from bindscope.evaluation.comco import (
        ALL_TASKS,
        dataset_vocabulary,
        default_tasks,
        evaluate_comco,
        parse_tasks,
        scene_split,
    )
    from bindscope.evaluation.references import load_references
    from bindscope.evaluation.results import short_hash

    defaults = [t for t in default_tasks(ds) if t != "ior" or references or "references" in ds.split_names]
    task_list = parse_tasks(",".join(defaults) if tasks is None else tasks, ALL_TASKS)
    oscope = oscope or {"protocol": "bindscope", "object_order": "mention", "bias_position": None, "heads": None}
    if oscope["bias_position"] is not None and "matching" not in task_list:
        raise BadInput(f"bias_position {oscope['bias_position']} applies to the matching task; add matching to "
                       "tasks", param="bias_position")
    if "binding" in task_list and "binding" not in default_tasks(ds):
        raise BadInput("tasks binding needs a dataset rendered with attributes (its scenes store recognition "
                       "and binding negatives)", param="tasks")
    scenes = scene_split(ds, split)
    reference_set = None
    if references is not None:
        reference_set = load_references(references, dataset_vocabulary(ds, scenes)[0],
                                        ds.manifest["image_size"][0], category_map, references_per_category)
    elif category_map is not None:
        raise BadInput("category_map needs references", param="category_map")
    elif "ior" in task_list and "references" not in ds.split_names:
        raise BadInput(f"ior needs single-object reference images: {str(ds.path)!r} has no 'references' split; "
                       "give references=DIR (one subfolder of images per category, the DomainNet layout)",
                       param="references")
    ds.check([scenes] + (["references"] if "references" in ds.split_names else []))
    extra = "" if references is None else f"-refs-{short_hash(str(Path(references).resolve()))}"
    extra += _oscope_suffix(oscope)

    def run(adapter, text_transform, cache, progress, rows):
        return evaluate_comco(ds, adapter, task_list, text_transform=text_transform, cache=cache,
                              matching_negatives=matching_negatives, seed=seed, progress=progress, check=False,
                              split=scenes, references=reference_set, rows=rows, **oscope)
    return run, f"comco-{'+'.join(task_list)}", extra


def _oscope_suffix(oscope: dict) -> str:
    """Result-file suffix naming the non-default clip-oscope options (``-clip-oscope``, ``-both``, ``-size-order``,
    ``-bias2``), so that their results do not replace the default ones."""
    out = "" if oscope["protocol"] == "bindscope" else f"-{oscope['protocol']}"
    out += "" if oscope["object_order"] == "mention" else f"-{oscope['object_order']}-order"
    return out + ("" if oscope["bias_position"] is None else f"-bias{oscope['bias_position']}")


def _check_seed(seed: int, matching_negatives: int | None) -> None:
    check_int("seed", seed, 0)
    if matching_negatives is not None:
        import numbers

        if not isinstance(matching_negatives, numbers.Integral) or isinstance(matching_negatives, bool) \
                or matching_negatives < 1:
            raise BadInput(f"matching_negatives {matching_negatives!r} is not allowed; use 'all' (every absent "
                           "category) or an integer >= 1", param="matching_negatives")


def _sampled_run(tasks, matching_negatives, seed, objects, vocab, n, captions=None, names=None, oscope=None):
    """TOR on sampled (or given) captions: check the options; return (run, file stem)."""
    from bindscope.evaluation.comco import SAMPLED_TASKS, evaluate_tor_sampled, load_vocabulary, parse_tasks
    from bindscope.evaluation.results import slug

    task_list = parse_tasks("tor" if tasks is None else tasks, SAMPLED_TASKS)
    if matching_negatives is not None:
        raise BadInput("matching_negatives needs a dataset (matching uses the dataset's images)",
                       param="matching_negatives")
    oscope = oscope or {"protocol": "bindscope", "heads": None}
    if captions is not None or names is not None:
        return _given_captions_run(task_list, seed, objects, vocab, n, captions, names, oscope)
    objects, vocab, n = objects or 4, vocab or "comco72", 2000 if n is None else n
    if objects < 2:
        raise BadInput(f"objects must be at least 2 for TOR, got {objects}", param="objects")
    if not 1 <= n <= MAX_SAMPLED_CAPTIONS:
        raise BadInput(f"n {n} is out of range; allowed: 1..{MAX_SAMPLED_CAPTIONS:,} captions", param="n")
    try:  # an unknown set fails here, before the model is loaded
        categories = load_vocabulary(vocab)
    except BadInput as exc:  # the registry names its own parameter (set); here it is vocab
        message = str(exc)
        raise BadInput("vocab" + message[len("set"):] if exc.param == "set" else message, param="vocab") from None
    if objects > len(categories):
        raise BadInput(f"objects {objects} is more than the {len(categories)} categories of vocab {vocab!r}; "
                       f"allowed: 2..{len(categories)}", param="objects")

    def run(adapter, text_transform, cache, progress, rows):
        return evaluate_tor_sampled(adapter, vocab=vocab, objects=objects, n=n, seed=seed, tasks=task_list,
                                    text_transform=text_transform, cache=cache, progress=progress, rows=rows,
                                    protocol=oscope["protocol"], heads=oscope["heads"])
    stem = f"results/comco-sampled-{slug(vocab)}-{objects}obj-n{n}-seed{seed}/{'+'.join(task_list)}"
    return run, stem + _oscope_suffix({"object_order": "mention", "bias_position": None, **oscope})


def _given_captions_run(task_list, seed, objects, vocab, n, captions, names, oscope):
    """TOR on the authors' combination captions or a caption file (``captions``) against ``names``: check them
    (the caption set is built here, before any model is loaded); return (run, file stem)."""
    from bindscope.evaluation.clip_oscope import combination_captions, read_caption_file, read_names
    from bindscope.evaluation.comco import VocabEntry, evaluate_tor_sampled
    from bindscope.evaluation.results import short_hash, slug

    if captions is None:
        raise BadInput(f"names {names!r} applies with captions (captions='combinations' or a caption file)",
                       param="names")
    for param, value, why in (("vocab", vocab, "the candidates are names (comco72, simco18 or a file of names)"),
                              ("n", n, "the caption set is given, not sampled")):
        if value is not None:
            raise BadInput(f"{param} {value!r} does not apply with captions: {why}", param=param)
    if "claim1" in task_list:
        raise BadInput("tasks claim1 draws its own captions; with captions use tasks tor and/or toc", param="tasks")
    names = "comco72" if names is None else str(names)
    name_list = read_names(names)
    if str(captions) == "combinations":
        objects = 3 if objects is None else objects
        lists = combination_captions(name_list, objects)
        source = f"combinations: every itertools.combinations of {names} ({len(name_list)} names), {objects} each"
        tag = f"{objects}obj-combinations"
    else:
        if objects is not None:
            raise BadInput(f"objects {objects} does not apply with a caption file (its lines name the objects)",
                           param="objects")
        lists = read_caption_file(captions, name_list)
        source = f"file {str(Path(captions).resolve())}"
        tag = f"file-{short_hash(str(Path(captions).resolve()))}"
    entries = [VocabEntry(name) for name in name_list]
    names_tag = slug(names) if names in ("comco72", "simco18") else f"names-{short_hash(str(Path(names).resolve()))}"

    def run(adapter, text_transform, cache, progress, rows):
        return evaluate_tor_sampled(adapter, vocab=names, seed=seed, tasks=task_list, text_transform=text_transform,
                                    cache=cache, vocabulary=entries, progress=progress, rows=rows,
                                    protocol=oscope["protocol"], captions=lists, caption_source=source,
                                    heads=oscope["heads"])
    stem = f"results/comco-captions-{names_tag}-{tag}/{'+'.join(task_list)}"
    return run, stem + _oscope_suffix({"object_order": "mention", "bias_position": None, **oscope})


def plan_bench(benchmark: str, data: str | os.PathLike, *, images: str | os.PathLike | None = None,
               flickr_images: str | os.PathLike | None = None, subsets: list[str] | None = None, seed: int = 0,
               text_transform=None) -> EvaluationPlan:
    """ARO or SugarCrepe from their published files (``bindscope bench``; docs/real-data.md) as an
    :class:`EvaluationPlan`: the files and every image are checked here, before any model is loaded
    (:func:`bindscope.evaluation.bench.read_bench`); :func:`run_evaluation` then scores a model
    (:func:`bindscope.evaluation.bench.evaluate_bench`: accuracy per subset with Wilson 95% intervals, macro and
    micro averages). Default result file: ``results/bench/<benchmark>-<model>-<tag>[-<labclip tag>].json``.

    Args:
        benchmark: ``"aro"`` or ``"sugarcrepe"``. data: folder of the benchmark's JSON files.
        images / flickr_images: image roots (SugarCrepe: COCO val2017; ARO: the COCO and Flickr30k roots of
            the order subsets' image paths, default ``data``). subsets: the subsets (default: every subset whose
            file is in ``data``). seed: seed of ARO's order perturbations.
        text_transform: e.g. a LABCLIP map applied to the text embeddings (its ``file_tag`` names the file).

    Raises:
        BadInput: unknown benchmark or subset, a missing folder, file or image, a malformed entry.
    """
    from bindscope.evaluation.bench import evaluate_bench, read_bench

    items = read_bench(benchmark, data, images, flickr_images, subsets, seed=seed)
    tag = getattr(text_transform, "file_tag", None)

    def run(adapter, text_transform, cache, progress, rows):
        return evaluate_bench(benchmark, items, adapter, text_transform=text_transform, cache=cache,
                              data=str(Path(data).resolve()), seed=seed, progress=progress)
    return EvaluationPlan(run, Path("results") / "bench", benchmark, f"-{tag}" if tag else "", text_transform,
                          samples=False)


def _check_new_file(param: str, path: Path | None, overwrite: bool) -> None:
    """BadInput when ``path`` exists and ``overwrite`` is off (the message names ``param``)."""
    if path is not None and path.exists() and not overwrite:
        raise BadInput(f"{param} {str(path)!r} already exists; pass overwrite=True to replace it, or choose "
                       "another file", param=param)


def audit(data, *, out: str | os.PathLike | None = None, plot: str | os.PathLike | None = None,
          overwrite: bool = False, progress: bool = True, **options) -> Evaluation:
    """Audit a MADMAN dataset with the supervised oracle (:func:`bindscope.evaluation.audit.audit_madman`, the
    library call behind ``madman audit``; docs/madman.md): accuracy per attribute and for the digit identity
    (per class, confusion matrices, per size level) of a small CNN trained on the isolated objects.

    Args:
        data: MADMAN dataset folder (or an open Dataset).
        out: result JSON (schema ``bindscope/schemas/audit_result.json``), or None to write none.
        plot: confusion-matrix figure (.png, .pdf or .svg), or None. overwrite: replace existing files.
        progress: tqdm bar on stderr.
        **options: :func:`~bindscope.evaluation.audit.audit_madman`'s ``train_split``, ``test_split``,
            ``epochs``, ``batch_size``, ``lr``, ``width`` (channels), ``seed``, ``max_train_objects``,
            ``max_test_objects``, ``threads`` (torch CPU threads; the result depends on it), ``shift`` (pixels).

    Returns:
        ``Evaluation(result, out path or None, plot path or None)``.

    Raises:
        BadInput / DatasetError: an existing ``out``/``plot`` without ``overwrite``, both the same file, a bad
            suffix or location, a bad option or dataset; all before the oracle is trained.
    """
    from bindscope.evaluation.audit import audit_madman, plot_audit
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path, write_result

    allowed = [name for name in inspect.signature(audit_madman).parameters if name not in ("dataset", "progress")]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise BadInput(f"{unknown[0]} is not an audit option; allowed: {', '.join(allowed)}", param=unknown[0])
    out_path = check_result_path(out, overwrite) if out is not None else None
    plot_path = check_plot_path(plot)
    _check_new_file("plot", plot_path, overwrite)
    if out_path is not None and plot_path is not None and out_path.resolve() == plot_path.resolve():
        raise BadInput(f"out and plot are the same file {str(out_path)!r}; give two paths", param="out")
    check_locations(out_path, plot_path)
    result = audit_madman(data, progress=progress, **options)
    if plot_path is not None:
        plot_audit(result, plot_path)
    if out_path is not None:
        write_result(out_path, result, overwrite=overwrite, schema="audit_result")
    return Evaluation(result, out_path, plot_path)


def caption_bias(data, *, splits: list[str] | None = None, seed: int = 0, out: str | os.PathLike | None = None,
                 overwrite: bool = False, plot: str | os.PathLike | None = None) -> Evaluation:
    """Where captions mention the image's largest object (ComCO Claim 2; the library call behind
    ``bindscope caption-bias``): :func:`bindscope.evaluation.caption_bias.caption_bias` written as canonical
    JSON.

    Args:
        data: any bindscope dataset with captions and an object table (COCO import, ComCO, MADMAN).
        splits: splits to read (default: all but ``references``). seed: bootstrap seed (>= 0).
        out: result JSON (default ``DATA/eval/caption-bias.json``). overwrite: replace an existing result.
        plot: also draw a bar plot into this file (``.png``, ``.pdf`` or ``.svg``); None: no plot.

    Returns:
        ``Evaluation(result, out path, plot path or None)``.

    Raises:
        BadInput / DatasetError: an existing result or plot without ``overwrite``, an unusable location, a plot
            name with another suffix, an unknown split or a dataset without captions; before anything is
            written.
    """
    from bindscope.evaluation.caption_bias import caption_bias as measure
    from bindscope.evaluation.caption_bias import plot_caption_bias
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path
    from bindscope.io.atomic import write_text_atomic
    from bindscope.io.canonical import canonical_json

    out_path = check_result_path(out or Path(data) / "eval" / "caption-bias.json", overwrite)
    plot_path = check_plot_path(plot)
    if plot_path is not None and plot_path.exists() and not overwrite:
        raise BadInput(f"plot {str(plot_path)!r} already exists; pass overwrite=True to replace it", param="plot")
    check_locations(out_path, plot_path)
    result = measure(data, splits=splits, seed=seed)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, canonical_json(result))
    if plot_path is not None:
        plot_caption_bias(result, plot_path)
    return Evaluation(result, out_path, plot_path)


def collect(results: list[str | os.PathLike], out: str | os.PathLike, *, plot: str | os.PathLike | None = None,
            columns: list[str] | None = None, overwrite: bool = False) -> dict:
    """Write one table of result JSONs of every kind (the library call behind ``bindscope collect``; see
    :mod:`bindscope.evaluation.collect`): a row per result file (model, pretrained tag, checkpoint step), a column
    per figure (positions, attributes, size ranks, probe and audit accuracies, caption-bias shares, ...), each
    share in percent with its 95% interval, every column defined.

    Args:
        results: result files or folders of them, of any kind ``bindscope collect`` reads: ``madman eval``,
            ``comco eval``, ``comco attention``, ``bindscope bench``, a training run's ``result.json``,
            ``bindscope probe`` (attributes, conjunctive search), ``bindscope labclip eval``, ``madman audit``,
            ``bindscope caption-bias``.
        out: the table, ``.csv`` (value/low/high columns), ``.md`` (Markdown, with the column definitions) or
            ``.json`` (the table dict). overwrite: replace files.
        plot: also draw the table (.png, .pdf or .svg): curves over training steps for checkpoints, else
            grouped bars. columns: the columns to plot (default: binding and recognition micro averages, else
            the first 8).

    Returns:
        The table dict (``columns``, ``definitions``, ``rows``, ``summary``) of
        :func:`bindscope.evaluation.collect.collect`.

    Raises:
        BadInput: a bad ``out`` suffix, an existing ``out``/``plot`` without ``overwrite``, an unknown column,
            an unreadable file, one of no known kind or failing its kind's schema (named, with the reason);
            before anything is written.
    """
    from bindscope.evaluation.collect import TABLE_SUFFIXES, format_table, plot_table
    from bindscope.evaluation.collect import collect as gather
    from bindscope.evaluation.report import check_plot_path
    from bindscope.io.atomic import write_text_atomic

    out_path = Path(out)
    if out_path.suffix.lower() not in TABLE_SUFFIXES:
        raise BadInput(f"out {str(out)!r}: the file name must end in one of {', '.join(TABLE_SUFFIXES)}",
                       param="out")
    plot_path = check_plot_path(plot)
    for param, path in (("out", out_path), ("plot", plot_path)):
        _check_new_file(param, path, overwrite)
    check_locations(out_path, plot_path)
    table = gather(list(results))
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
