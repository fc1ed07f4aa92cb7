"""Image-text matching (Abbasi et al., CVPR 2025), scenarios 1 and 2 (:func:`bindscope.evaluation.comco.
matching_captions`): the share of (image, wrong caption) pairs with cos(image, correct) > cos(image, wrong), on the
scenes with two or more objects. With ``bias_position`` K the captions are the authors' (object K of
``object_order`` biased; :func:`bindscope.evaluation.clip_oscope.matching_captions_at`)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

from bindscope.evaluation.tasks.registry import Task
from bindscope.limits import MAX_OBJECTS


@dataclass(frozen=True)
class MatchingOptions:
    """Options of matching.

    Attributes:
        matching_negatives: wrong captions per scene and scenario: None or ``"all"`` = every absent category (the
            protocol); K >= 1 (or its digits as text) = a seeded sample of K absent categories per scene.
        bias_position: the biased object is the K-th (1-based) of ``object_order``, captions as the authors'
            ``Image_Text_Matching.py`` builds them (scenes with fewer objects are left out); None: the largest
            object.
        object_order: ``mention`` or ``size`` (with ``bias_position``).
    """

    matching_negatives: int | str | None = field(default=None, metadata={
        "flag": "--matching-negatives",
        "help": "Wrong captions per scene and scenario: 'all' (every absent category, the default) or K (a seeded "
                "sample of K)."})
    bias_position: int | None = field(default=None, metadata={
        "flag": "--bias-position", "range": (1, MAX_OBJECTS),
        "help": "With DATA, matching: the biased object is the K-th of --object-order (1-based), captions as the "
                "authors' Image_Text_Matching.py builds them; default: the largest object."})
    object_order: str = "mention"

    def check(self) -> MatchingOptions:
        from dataclasses import replace

        from bindscope.errors import BadInput, check_int
        from bindscope.evaluation.tasks.ior import check_object_order

        negatives = None if self.matching_negatives == "all" else self.matching_negatives
        if isinstance(negatives, str) and negatives.strip().isdigit():  # K as the command line gives it
            negatives = int(negatives)
        if negatives is not None and (not isinstance(negatives, numbers.Integral) or isinstance(negatives, bool)
                                      or negatives < 1):
            raise BadInput(f"matching_negatives {negatives!r} is not allowed; use 'all' (every absent "
                           "category) or an integer >= 1", param="matching_negatives")
        if self.bias_position is not None:
            check_int("bias_position", self.bias_position, 1)
        check_object_order(self.object_order)
        return replace(self, matching_negatives=negatives)


def compute(run, options: MatchingOptions) -> None:
    """Both scenarios on the scenes with two or more objects (with ``bias_position`` K: at least K); appends one
    row per (scene, scenario, wrong caption)."""
    import numpy as np

    from bindscope.evaluation.clip_oscope import matching_captions_at
    from bindscope.evaluation.comco import matching_accuracy, matching_captions

    plans = []
    names_in_order = run.ordered(options.object_order) if options.bias_position is not None else None
    for sample, sample_objects in enumerate(run.objects):
        present = {o.category for o in sample_objects}
        absent = [v for v in run.vocab if v not in present]
        if options.matching_negatives is not None and options.matching_negatives < len(absent):
            rng = np.random.default_rng([run.seed, sample])
            keep = np.sort(rng.choice(len(absent), size=options.matching_negatives, replace=False))
            absent = [absent[i] for i in keep]
        if options.bias_position is not None:
            names = names_in_order[sample]
            usable_scene = len(names) >= max(2, options.bias_position)
            plans.append(matching_captions_at(names, absent, options.bias_position) if usable_scene else None)
            continue
        plans.append(matching_captions(sample_objects, absent) if len(sample_objects) >= 2 else None)
    usable = [i for i, p in enumerate(plans) if p is not None]
    metrics = {}
    for scenario in ("scenario_1", "scenario_2"):
        correct = [plans[i][scenario][0] for i in usable]
        wrong = [plans[i][scenario][1] for i in usable]
        flat = [w for ws in wrong for w in ws]
        emb = run.embed(correct + flat)
        bounds = np.cumsum([len(correct)] + [len(ws) for ws in wrong])
        wrong_emb = [emb[bounds[k]:bounds[k + 1]] for k in range(len(wrong))]
        pair_rows = [] if run.rows is not None else None
        metrics[scenario] = matching_accuracy(
            run.scene_emb[usable], emb[:len(correct)], wrong_emb, [len(run.objects[i]) for i in usable],
            [run.ids[i] for i in usable], pair_rows, run.seed)
        position = {run.ids[i]: j for j, i in enumerate(usable)}
        for row in pair_rows or []:
            j = position[row["sample"]]
            run.rows.append({"task": "matching", "scenario": scenario, "correct": correct[j],
                             "wrong_caption": wrong[j][row["wrong"]], **row})
        run.texts_used += correct + flat
    run.metrics["matching"] = metrics


def settings(run, options: MatchingOptions) -> dict:
    from bindscope.evaluation import clip_oscope as oscope

    if options.bias_position is None:
        return {}
    return {"matching_bias_position": options.bias_position, "object_order": options.object_order,
            "matching_captions": f"{oscope.REPOSITORY}: {oscope.MATCHING_SOURCE}",
            "matching_scenes_without_position": sum(len(o) < max(2, options.bias_position) for o in run.objects)}


def report(result: dict) -> list[str]:
    from bindscope.evaluation.report import ci, pct

    block = result["metrics"].get("matching")
    if not block:
        return []
    lines = ["image-text matching (share of (image, wrong caption) pairs with correct > wrong)"]
    for scenario, part in block.items():
        a = part["all"]
        lines.append(f"  {scenario.replace('_', ' ')}: {pct(a['accuracy'])} %  Wilson {ci(a['ci95'])}  "
                     f"bootstrap over images {ci(a.get('ci95_cluster'))}  ({a['correct']}/{a['total']} pairs "
                     f"from {a.get('clusters', '?')} images)")
    return lines


def columns(result: dict, c) -> None:
    for scenario, block in result["metrics"].get("matching", {}).items():
        c.proportion(f"matching/{scenario}", block["all"], f"image-text matching {scenario}: accuracy")


def panels(result: dict) -> list:
    block = result["metrics"].get("matching")
    if not block:
        return []
    labels = list(block)
    return [("image-text matching", labels, {"accuracy": [block[s]["all"]["accuracy"] for s in labels]}, "accuracy",
             None, 1.0)]


TASKS = [Task(
    name="matching", kind="comco-eval", summary="image-text matching: is the correct caption preferred to one "
    "naming an absent category (scenarios 1 and 2)", compute=compute, needs=frozenset({"masks"}), images=True,
    default=True, options=MatchingOptions,
    schema={"matching": {"type": "object", "required": ["scenario_1", "scenario_2"], "additionalProperties": False,
                         "properties": {"scenario_1": {"$ref": "#/$defs/matching"},
                                        "scenario_2": {"$ref": "#/$defs/matching"}}}},
    settings=settings, report=report,
    note="image-text matching: ties count as wrong; CI: Wilson 95% per pair, and a 95% bootstrap over images.",
    columns=columns, panels=panels)]
