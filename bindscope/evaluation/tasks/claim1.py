"""Claim 1 (Abbasi et al., CVPR 2025) on captions sampled from a vocabulary: TOR for captions that put a Large
category first (then ``objects - 1`` Medium ones) and for captions that put a Small one first
(:func:`bindscope.evaluation.comco.claim1_captions`)."""

from __future__ import annotations

from bindscope.evaluation.report import POSITION_NOTE
from bindscope.evaluation.tasks.registry import Task

GROUPS = ("large_first", "small_first")


def compute(run, options) -> None:
    from bindscope.evaluation.comco import JOIN, retrieval_shares

    for group, lists in run.claim1_groups.items():
        texts = [JOIN.join(c) for c in lists]
        emb = run.embed(texts)
        run.truncation_captions += texts
        run.metrics.setdefault("claim1", {})[group] = {
            "candidates": len(run.vocab), "ordered_by": "mention position",
            "by_num_objects": retrieval_shares(emb, run.name_emb, run.vocab, lists, run.rows, f"claim1_{group}")}


def report(result: dict) -> list[str]:
    from bindscope.evaluation.report import retrieval_lines

    lines: list[str] = []
    for group in GROUPS:
        if group in result["metrics"].get("claim1", {}):
            lines += ([""] if lines else []) + retrieval_lines(f"Claim 1, {group.replace('_', '-')}",
                                                               result["metrics"]["claim1"][group], "position")
    return lines


def columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import position_columns

    for group, block in result["metrics"].get("claim1", {}).items():
        position_columns(c, f"claim1/{group}", block)


def panels(result: dict) -> list:
    from bindscope.evaluation.report import position_panel

    return [position_panel(f"Claim 1 {g}", b) for g, b in result["metrics"].get("claim1", {}).items()]


TASKS = [Task(
    name="claim1", kind="comco-eval", summary="TOR on sampled captions with a large or a small category first "
    "(without DATA)", compute=compute, sources=("sampled",),
    schema={"claim1": {"type": "object", "required": list(GROUPS), "additionalProperties": False,
                       "properties": {g: {"$ref": "#/$defs/retrieval"} for g in GROUPS}}},
    report=report, note=POSITION_NOTE, columns=columns, panels=panels)]
