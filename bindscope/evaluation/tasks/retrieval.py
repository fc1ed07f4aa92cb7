"""Image-text retrieval R@1/5/10 both ways over every caption and scene (:mod:`bindscope.evaluation.retrieval`, as
CLIP_benchmark defines them); with a text transform (a LABCLIP map) also the figures before it. Only when named."""

from __future__ import annotations

from bindscope.evaluation.tasks.registry import Task


def compute(run, options) -> None:
    import numpy as np

    from bindscope.evaluation.results import apply_text_transform
    from bindscope.evaluation.retrieval import recall_at_k

    row_of = {sid: r for r, sid in enumerate(run.ids)}
    owner = np.array([row_of[c] for c in run.caption_ids], np.int64)
    block = recall_at_k(run.cap_emb, run.scene_emb, owner, seed=run.seed, rows=run.rows, image_ids=run.ids,
                        captions=run.captions)
    if run.text_transform is not None:
        block["before_text_transform"] = recall_at_k(apply_text_transform(run.embedder.texts(run.captions), None),
                                                     run.scene_emb, owner, seed=run.seed)
    run.metrics["retrieval"] = block


def settings(run, options) -> dict:
    from bindscope.evaluation.retrieval import INTERVALS, SOURCE, TIE_RULE

    return {"retrieval": {"definition": SOURCE, "ties": TIE_RULE, "interval": INTERVALS}}


def report(result: dict) -> list[str]:
    from bindscope.evaluation.retrieval import format_retrieval

    return format_retrieval(result["metrics"])


def columns(result: dict, c) -> None:
    """Image-text retrieval R@k, and with a text transform the figures without it (``retrieval/before``)."""
    block = result["metrics"].get("retrieval")
    for prefix, part in (("retrieval", block), ("retrieval/before", (block or {}).get("before_text_transform"))):
        for direction, name in (("text_to_image", "text-to-image"), ("image_to_text", "image-to-text")):
            for k, p in (part or {}).get(direction, {}).get("recall", {}).items():
                stage = " without the text transform" if prefix.endswith("before") else ""
                c.proportion(f"{prefix}/{name}/R@{k}", p, f"retrieval {name}{stage}: recall at {k} (share of "
                             f"queries with a correct item among the top {k})")


TASKS = [Task(
    name="retrieval", kind="comco-eval", summary="image-text retrieval R@1/5/10 both ways (only when named; before "
    "and after --labclip)", compute=compute, needs=frozenset({"captions"}), images=True,
    reads=frozenset({"captions"}),
    schema={"retrieval": {"allOf": [{"$ref": "#/$defs/recall_at_k"},
                                    {"properties": {"before_text_transform": {"$ref": "#/$defs/recall_at_k"}}}]}},
    settings=settings, report=report, columns=columns)]
