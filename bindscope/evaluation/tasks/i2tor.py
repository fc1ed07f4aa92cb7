"""I2TOR (Abbasi et al., CVPR 2025): as IOR, but each scene image is compared with the text embeddings of the
category names; the top-1 name is attributed to that object's size rank."""

from __future__ import annotations

from bindscope.evaluation.report import POSITION_NOTE
from bindscope.evaluation.tasks.registry import Task


def compute(run, options) -> None:
    from bindscope.evaluation.comco import retrieval_shares

    run.metrics["i2tor"] = {"candidates": len(run.vocab), "ordered_by": "size rank (1 = largest visible area)",
                            "by_num_objects": retrieval_shares(run.scene_emb, run.name_emb, run.vocab, run.by_rank,
                                                               run.rows, "i2tor", run.ids)}


def report(result: dict) -> list[str]:
    from bindscope.evaluation.report import retrieval_lines

    block = result["metrics"].get("i2tor")
    return retrieval_lines("I2TOR", block, "size rank") if block else []


def columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import position_columns

    if "i2tor" in result["metrics"]:
        position_columns(c, "i2tor", result["metrics"]["i2tor"])


def panels(result: dict) -> list:
    from bindscope.evaluation.report import position_panel

    return [position_panel("I2TOR", result["metrics"]["i2tor"])] if "i2tor" in result["metrics"] else []


TASKS = [Task(
    name="i2tor", kind="comco-eval", summary="image-to-text object retrieval: which size rank a scene's image "
    "embedding stands for among the category names", compute=compute, needs=frozenset({"masks"}), images=True,
    default=True, schema={"i2tor": {"$ref": "#/$defs/retrieval"}}, report=report, note=POSITION_NOTE,
    columns=columns, panels=panels)]
