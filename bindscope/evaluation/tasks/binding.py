"""Recognition and binding (Gurung, Hoffmann, Brox, GCPR 2025; :func:`bindscope.evaluation.madman.score_split`):
each sample's image against its caption and its stored negatives; binding counted where recognition of the
attribute succeeded for both objects, and unconditionally. Two tasks of one protocol: ``binding`` of ``madman
eval`` (per evaluation split, ``metrics["splits"]``) and ``binding`` of ``comco eval`` (on the split of scenes,
``metrics["binding"]``)."""

from __future__ import annotations

from bindscope.evaluation.tasks.registry import Task

SPLIT_NOTE = ("binding: counted only where recognition of that attribute succeeded for both digits (paper); binding "
              "(all): every binding negative. Ties count as wrong. 95% CI: Wilson per comparison; CI (images): "
              "bootstrap over images (an image's negatives are not independent).")
BINDING_BLOCK = {"type": "object", "required": ["num_scored", "recognition", "binding", "binding_unconditional"],
                 "properties": {"num_scored": {"type": "integer", "minimum": 1},
                                "recognition": {"$ref": "#/$defs/accuracy_block"},
                                "binding": {"$ref": "#/$defs/accuracy_block"},
                                "binding_unconditional": {"$ref": "#/$defs/accuracy_block"}}}


# ------------------------------------------------------------------------------------------- madman eval
def compute_split(run, options) -> None:
    """One evaluation split (``run.split``) from the ``negatives`` part the runner read and embedded."""
    from bindscope.evaluation.madman import SPLIT_ROLES, score_split

    part = run.part
    scored = score_split(part.image_emb, part.caption_emb, part.samples.negatives, part.negative_emb,
                         run.dataset.attribute_names, part.samples.ids, run.rows, run.seed,
                         row_fields={"split": run.split})
    run.metrics.setdefault("splits", {})[run.split] = {
        "role": SPLIT_ROLES.get(run.split, "evaluation"), "num_samples": part.num_samples,
        "num_scored": len(part.samples.captions), **scored}


def split_settings(run, options) -> dict:
    from bindscope.evaluation.madman import INTERVALS

    return {"interval": INTERVALS, "binding": "conditional on recognition of the attribute for both digits (paper)"}


def split_report(result: dict) -> list[str]:
    from bindscope.evaluation.report import recognition_binding_lines

    lines: list[str] = []
    for name, split in result["metrics"].get("splits", {}).items():
        lines += ([""] if lines else []) + [f"split {name} ({split['role']}): {split['num_scored']} of "
                                            f"{split['num_samples']} samples scored"]
        lines += recognition_binding_lines(split)
    return lines


def split_columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import binding_columns

    for split, block in result["metrics"].get("splits", {}).items():
        binding_columns(c, block, f"{split}/", f"split {split}: ")


def split_panels(result: dict) -> list:
    panels = []
    for name, split in result["metrics"].get("splits", {}).items():
        attrs = list(split["recognition"]["per_attribute"])
        series = {"recognition": [split["recognition"]["per_attribute"][a]["accuracy"] for a in attrs],
                  "binding": [split["binding"]["per_attribute"].get(a, {}).get("accuracy") for a in attrs]}
        panels.append((f"{name} ({split['role'].split(' (')[0]})", attrs, series, "accuracy", 0.5, 1.0))
    return panels


# ------------------------------------------------------------------------------------------- comco eval
def compute_scenes(run, options) -> None:
    """The scenes that store negatives, scored as MADMAN's splits are."""
    import numpy as np

    from bindscope.evaluation.madman import score_split

    scored = [i for i, (_, negs) in enumerate(run.scene_negatives) if negs]
    negatives = [run.scene_negatives[i][1] for i in scored]
    neg_texts = [n.caption for negs in negatives for n in negs]
    emb = run.embed([run.scene_negatives[i][0] for i in scored] + neg_texts)
    bounds = np.cumsum([len(scored)] + [len(negs) for negs in negatives])
    run.metrics["binding"] = {"num_scored": len(scored), **score_split(
        run.scene_emb[scored], emb[:len(scored)], negatives,
        [emb[bounds[k]:bounds[k + 1]] for k in range(len(scored))], run.dataset.attribute_names,
        sample_ids=[run.ids[i] for i in scored], rows=run.rows)}
    run.texts_used += neg_texts


def scenes_report(result: dict) -> list[str]:
    from bindscope.evaluation.report import recognition_binding_lines

    block = result["metrics"].get("binding")
    if not block:
        return []
    return [f"recognition and binding on {block['num_scored']} scenes with attribute negatives (binding: "
            "conditional on recognition for both objects; binding (all): every negative)"] + \
        recognition_binding_lines(block)


def scenes_columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import binding_columns

    if "binding" in result["metrics"]:
        binding_columns(c, result["metrics"]["binding"], "", "")


TASKS = [
    Task(name="binding", kind="madman-eval", summary="recognition and binding accuracy per attribute and split "
         "(binding counted where recognition succeeded for both objects)", compute=compute_split,
         needs=frozenset({"negatives"}), images=True, default=True, reads=frozenset({"negatives"}),
         schema={"splits": {"type": "object", "minProperties": 1,
                            "additionalProperties": {"$ref": "#/$defs/madman_split"}}},
         settings=split_settings, report=split_report, note=SPLIT_NOTE, columns=split_columns,
         panels=split_panels),
    Task(name="binding", kind="comco-eval", summary="recognition and binding on the scenes that store negatives "
         "(datasets rendered with --attributes)", compute=compute_scenes, needs=frozenset({"negatives"}),
         images=True, default=True, reads=frozenset({"negatives"}), schema={"binding": BINDING_BLOCK},
         report=scenes_report, columns=scenes_columns),
]
