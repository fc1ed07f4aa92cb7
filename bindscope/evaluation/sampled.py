"""The scene tasks that run without a dataset (``comco eval`` without DATA): TOR, TOC and Claim 1 on captions
sampled from a vocabulary, or on a given caption set (the authors' ``itertools.combinations`` captions or a caption
file; :mod:`bindscope.evaluation.clip_oscope`). :class:`SampledCaptions` says which captions; the tasks run on a
:class:`~bindscope.evaluation.scenes.SceneRun` whose captions are these (no images, no scenes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.errors import BadInput, check_int
from bindscope.evaluation.tasks.registry import Task, parse_tasks, resolve_options, shared_option, tasks
from bindscope.limits import MAX_OBJECTS, MAX_SEED

if TYPE_CHECKING:
    from bindscope.encoders.embedding_cache import Embedder

# numpy and the runner's modules (scenes, results: the dataset reader, h5py) are imported inside the functions:
# ``comco eval`` builds its options from SampledCaptions when the commands are imported, which load nothing heavy.
KIND = "comco-eval"

MAX_SAMPLED_CAPTIONS = 1_000_000  # captions per group
JOIN = " and "
"""How captions join category names (the ComCO paper's form)."""


@dataclass(frozen=True)
class VocabEntry:
    """A category as the evaluation needs it: caption name and size class (``""`` when unknown)."""

    name: str
    size_class: str = ""


def load_vocabulary(spec: str) -> list[VocabEntry]:
    """Categories of a set: ``comco72``, ``simco18`` or an imported asset folder, in registry order.

    Reads them with :func:`bindscope.generators.comco.registry.load_set` (pure Python, no Blender).

    Raises:
        BadInput: an unknown set or a broken asset folder (the message names the registry's ``set`` parameter).
    """
    from bindscope.generators.comco.registry import load_set

    return [VocabEntry(c.name, c.size_class) for c in load_set(spec)]


def sample_captions(vocab: list[VocabEntry], objects: int, n: int, seed: int) -> list[list[str]]:
    """``n`` lists of ``objects`` distinct category names in uniformly random order; caption i uses the seed
    sequence ``(seed, i)`` alone.

    Raises:
        BadInput: fewer categories than ``objects``.
    """
    import numpy as np

    if objects > len(vocab):
        raise BadInput(f"objects {objects} is more than the {len(vocab)} categories of the vocabulary",
                       param="objects")
    names = [v.name for v in vocab]
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        out.append([names[j] for j in rng.choice(len(names), size=objects, replace=False)])
    return out


def claim1_captions(vocab: list[VocabEntry], objects: int, n: int, seed: int, first: str) -> list[list[str]]:
    """Claim-1 captions: a ``first``-class category (``large`` or ``small``) first, then ``objects - 1``
    distinct ``medium`` categories in random order; caption i uses the seed sequence ``(seed, i, group)``.

    Raises:
        BadInput: the vocabulary has no size classes, no ``first`` category or too few medium ones.
    """
    import numpy as np

    firsts = [v.name for v in vocab if v.size_class == first]
    mediums = [v.name for v in vocab if v.size_class == "medium"]
    if not firsts or len(mediums) < objects - 1:
        raise BadInput(f"claim1 needs categories of size class {first!r} and at least {objects - 1} 'medium' ones; "
                       f"the vocabulary has {len(firsts)} {first} and {len(mediums)} medium (SimCO has no size "
                       "classes: use comco72)")
    group = 1 if first == "large" else 2
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i, group])
        rest = [mediums[j] for j in rng.choice(len(mediums), size=objects - 1, replace=False)]
        out.append([firsts[int(rng.integers(len(firsts)))]] + rest)
    return out


@dataclass(frozen=True)
class SampledCaptions:
    """Captions without a dataset: sampled from a vocabulary (``captions`` None) or given.

    Attributes:
        objects: objects per sampled caption, >= 2 (default 4); with ``captions="combinations"``: names per
            combination (default 3).
        vocab: the categories sampled from and compared with: ``comco72`` (default), ``simco18``, an asset folder,
            or a list of :class:`~bindscope.evaluation.comco.VocabEntry`.
        n: captions to sample per group, 1..1,000,000 (default 2000).
        captions: ``"combinations"`` (every ``itertools.combinations`` of ``names`` with ``objects`` names each, in
            list order: the authors' caption set), a text file (one caption per line, objects separated by
            ``" and "``), or a list of name lists; None: sampled.
        names: with ``captions``: the name list and candidates, ``comco72`` (default), ``simco18``, an asset
            folder, a file of names (one per line) or a list of :class:`~bindscope.evaluation.comco.VocabEntry`.

    ``comco eval``'s options of these (without DATA) are generated from the fields
    (:func:`bindscope.cli.options.settings_options`).
    """

    objects: int | None = field(default=None, metadata={
        "flag": "--objects", "range": (2, MAX_OBJECTS), "help": "Without DATA: objects per sampled caption [4]."})
    vocab: object = field(default=None, metadata={
        "flag": "--vocab", "help": "Without DATA: category set comco72 | simco18 | asset folder [comco72]."})
    n: int | None = field(default=None, metadata={
        "flag": "-n", "range": (1, MAX_SAMPLED_CAPTIONS), "help": "Without DATA: captions to sample (per group) [2000]."})
    captions: object = field(default=None, metadata={
        "flag": "--captions",
        "help": "Without DATA: 'combinations' (every itertools.combinations of --names with --objects names, default 3, "
                "in list order: the authors' caption set) or a text file, one caption per line, objects separated by "
                "' and '."})
    names: object = field(default=None, metadata={
        "flag": "--names",
        "help": "With --captions: the name list and candidates, comco72 | simco18 | coco | asset folder | file with "
                "one name per line [comco72]."})


@dataclass
class SampledPlan:
    """Sampled-caption tasks checked before any model is loaded: the chosen tasks and their names as given, their
    options, the candidates, the caption lists of TOR / TOC (``lists``) and of Claim 1 (``claim1``), the settings
    that describe the captions and the default result file's stem."""

    chosen: list[Task]
    names: list[str]
    options: dict
    entries: list
    lists: list[list[str]] | None
    claim1: dict = field(default_factory=dict)
    described: dict = field(default_factory=dict)
    stem: str = ""


def plan_sampled(source: SampledCaptions | None = None, task_names=None, options: dict | None = None,
                 seed: int = 0) -> SampledPlan:
    """Check a sampled-caption evaluation and build its captions before any model is loaded.

    Raises:
        BadInput: an unknown task or option, a bad or inapplicable caption setting (named), claim1 with given
            captions, a vocabulary without the size classes claim1 needs.
    """
    from bindscope.evaluation.results import slug
    from bindscope.evaluation.scenes import oscope_suffix

    source = source or SampledCaptions()
    check_int("seed", seed, 0, MAX_SEED)
    allowed = tasks(KIND, "sampled")
    given = parse_tasks("tor" if task_names is None else task_names, allowed)
    chosen = [t for t in allowed if t in given]
    resolved = resolve_options(chosen, options, KIND)
    names = [t.name for t in given]
    protocol = shared_option(chosen, resolved, "protocol", "bindscope")
    suffix = oscope_suffix(protocol, "mention", None)
    needs_lists = any(t.reads for t in chosen)
    if source.captions is not None or source.names is not None:
        entries, lists, described, stem = _given_captions(source, names)
        return SampledPlan(chosen, names, resolved, entries, lists, {}, described, stem + suffix)
    objects, n = 4 if source.objects is None else source.objects, 2000 if source.n is None else source.n
    check_int("objects", objects, 2)
    if not 1 <= n <= MAX_SAMPLED_CAPTIONS:
        raise BadInput(f"n {n} is out of range; allowed: 1..{MAX_SAMPLED_CAPTIONS:,} captions", param="n")
    explicit = isinstance(source.vocab, (list, tuple))
    vocab = "comco72" if source.vocab is None else source.vocab
    if explicit:
        entries = list(vocab)
    else:
        try:  # an unknown set fails here, before the model is loaded
            entries = load_vocabulary(vocab)
        except BadInput as exc:  # the registry names its own parameter (set); here it is vocab
            message = str(exc)
            raise BadInput("vocab" + message[len("set"):] if exc.param == "set" else message,
                           param="vocab") from None
    if objects > len(entries):
        raise BadInput(f"objects {objects} is more than the {len(entries)} categories of vocab "
                       f"{'(explicit)' if explicit else repr(vocab)}; allowed: 2..{len(entries)}", param="objects")
    lists = sample_captions(entries, objects, n, seed) if needs_lists else None
    claim1 = {}
    if "claim1" in names:
        claim1 = {group: claim1_captions(entries, objects, n, seed, first)
                  for group, first in (("large_first", "large"), ("small_first", "small"))}
    described = {"vocabulary": {"source": "explicit" if explicit else vocab, "size": len(entries)},
                 "objects": objects, "n": n, "seed": seed, "order": "uniformly random (seeded), distinct categories"}
    label = "explicit" if explicit else slug(str(vocab))
    stem = f"results/comco-sampled-{label}-{objects}obj-n{n}-seed{seed}/{'+'.join(names)}"
    return SampledPlan(chosen, names, resolved, entries, lists, claim1, described, stem + suffix)


def _given_captions(source: SampledCaptions, names: list[str]):
    """``(candidates, caption lists, settings entries, file stem)`` of a given caption set."""
    from bindscope.evaluation.clip_oscope import combination_captions, read_caption_file
    from bindscope.evaluation.results import short_hash, slug
    from bindscope.generators.comco.registry import read_names

    if source.captions is None:
        raise BadInput(f"names {source.names!r} applies with captions (captions='combinations' or a caption file)",
                       param="names")
    for param, value, why in (("vocab", source.vocab, "the candidates are names (comco72, simco18 or a file of "
                                                      "names)"),
                              ("n", source.n, "the caption set is given, not sampled")):
        if value is not None:
            raise BadInput(f"{param} {value!r} does not apply with captions: {why}", param=param)
    if "claim1" in names:
        raise BadInput("tasks claim1 draws its own captions; with captions use tasks tor and/or toc", param="tasks")
    spec = "comco72" if source.names is None else source.names
    explicit = isinstance(spec, (list, tuple))
    entries = list(spec) if explicit else [VocabEntry(name) for name in read_names(str(spec))]
    name_list = [e.name for e in entries]
    objects = source.objects
    if isinstance(source.captions, (list, tuple)):
        lists, text, tag = [list(c) for c in source.captions], "given", f"given-{len(source.captions)}"
    elif str(source.captions) == "combinations":
        objects = 3 if objects is None else objects
        lists = combination_captions(name_list, objects)
        text = f"combinations: every itertools.combinations of {spec if not explicit else 'the names'} " \
               f"({len(name_list)} names), {objects} each"
        tag = f"{objects}obj-combinations"
    else:
        if objects is not None:
            raise BadInput(f"objects {objects} does not apply with a caption file (its lines name the objects)",
                           param="objects")
        lists = read_caption_file(source.captions, name_list)
        text = f"file {str(Path(source.captions).resolve())}"
        tag = f"file-{short_hash(str(Path(source.captions).resolve()))}"
    names_tag = "explicit" if explicit else slug(spec) if spec in ("comco72", "simco18") else \
        f"names-{short_hash(str(Path(spec).resolve()))}"
    described = {"vocabulary": {"source": "explicit", "size": len(entries)}, "captions": text, "n": len(lists),
                 "order": "as given (combinations: itertools.combinations of the name list, in list order)"}
    return entries, lists, described, f"results/comco-captions-{names_tag}-{tag}/{'+'.join(names)}"


def run_sampled(plan: SampledPlan, adapter, *, text_transform=None, embedder: Embedder | None = None, cache=None,
                seed: int = 0, progress: bool = True, rows: list | None = None) -> dict:
    """Run a checked :class:`SampledPlan` with ``adapter`` (any encoder with a text tower); return the result
    (schema ``eval_result``, ``kind = "comco-eval"``, ``dataset = null``)."""
    from bindscope.encoders.embedding_cache import Embedder
    from bindscope.evaluation.results import transform_name
    from bindscope.evaluation.scenes import SceneRun, scene_result

    run = SceneRun(adapter=adapter, embedder=embedder or Embedder(adapter, cache, progress=progress),
                   text_transform=text_transform, chosen=plan.chosen, options=plan.options, names=plan.names,
                   seed=seed, rows=rows, progress=progress, vocab=[e.name for e in plan.entries],
                   claim1_groups=plan.claim1, oscope_rows_first=True)
    run.texts_used = list(run.vocab)
    try:
        run.name_emb = run.embed(run.vocab)
        if plan.lists is not None:
            run.mentions = plan.lists
            run.captions = [JOIN.join(c) for c in plan.lists]
            run.cap_emb = run.embed(run.captions)
            run.truncation_captions += run.captions
        run.compute_tasks()
    finally:
        run.embedder.flush()
    settings = {"task": "comco-sampled", "tasks": plan.names, **plan.described,
                "text_transform": transform_name(text_transform), "comparison": "strict > (ties count as wrong)",
                "interval": "Wilson score, 95%", "caption_form": "category names joined with ' and '"}
    return scene_result(run, run.texts_used + run.truncation_captions, settings, None, without=("object_order",))
