"""TOC (the ComCO authors' ``TOC_*.py``): one linear head per mention position on frozen caption embeddings,
predicting the category at that position (:func:`bindscope.evaluation.position_heads.position_classification`;
captions split by text). Only when named."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.evaluation.tasks.registry import Task
from bindscope.limits import MAX_EPOCHS


@dataclass(frozen=True)
class HeadOptions:
    """Training of the position heads (:class:`~bindscope.evaluation.position_heads.HeadSettings`): epochs >= 1,
    Adam learning rate > 0, batch size >= 1, held-out share in (0, 1), seed (None: the evaluation's)."""

    head_epochs: int = field(default=25, metadata={
        "flag": "--head-epochs", "range": (1, MAX_EPOCHS), "help": "toc/ioc: training epochs per head."})
    head_lr: float = 1e-3
    head_batch_size: int = 32
    head_test_fraction: float = field(default=0.2, metadata={
        "flag": "--head-test-fraction", "range": (0, 1), "float": True, "open": (True, True),
        "help": "toc/ioc: share of captions (toc) or scenes (ioc) held out for testing."})
    head_seed: int | None = None

    def check(self):
        self.head_settings(0)
        return self

    def head_settings(self, seed: int):
        """The checked :class:`~bindscope.evaluation.position_heads.HeadSettings` (``seed`` when ``head_seed`` is
        None)."""
        from bindscope.evaluation.position_heads import HeadSettings

        return HeadSettings(epochs=self.head_epochs, lr=self.head_lr, batch_size=self.head_batch_size,
                            test_fraction=self.head_test_fraction,
                            seed=seed if self.head_seed is None else self.head_seed).check()


def compute(run, options: HeadOptions) -> None:
    from bindscope.evaluation.position_heads import TOC_SOURCE, position_classification

    run.metrics["toc"] = position_classification(run.cap_emb, run.mentions, run.vocab, run.captions,
                                                 options.head_settings(run.seed), TOC_SOURCE, "mention position")


def settings(run, options: HeadOptions) -> dict:
    return {"heads": options.head_settings(run.seed).to_dict()}


def report_heads(result: dict, task: str) -> list[str]:
    """The lines of the ``task`` (``toc`` / ``ioc``) block of a result (empty when absent)."""
    from bindscope.evaluation.position_heads import format_heads

    block = result["metrics"].get(task)
    return format_heads({task: block})[:-1] if block else []


def heads_columns(result: dict, c, task: str) -> None:
    """``<task>/<n>obj/pos<k>`` (test accuracy) and ``.../majority`` of a position-heads block."""
    for n, g in result["metrics"].get(task, {}).get("by_num_objects", {}).items():
        for p in g["positions"]:
            key, k = f"{task}/{n}obj/pos{p['position']}", p["position"]
            c.proportion(key, p["test"], f"{task} head, {n} objects, position {k}: test accuracy")
            c.proportion(f"{key}/majority", p["majority_baseline"],
                         f"{task} head, {n} objects, position {k}: majority-class baseline")


TASKS = [Task(
    name="toc", kind="comco-eval", summary="linear heads reading each mention position's category from caption "
    "embeddings (only when named)", compute=compute, needs=frozenset({"mentions"}), reads=frozenset({"captions"}),
    sources=("dataset", "sampled"), options=HeadOptions, schema={"toc": {"$ref": "#/$defs/position_heads"}},
    settings=settings, report=lambda result: report_heads(result, "toc"),
    columns=lambda result, c: heads_columns(result, c, "toc"))]
