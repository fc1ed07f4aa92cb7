"""IOC (the ComCO authors' ``IOC.py``): one linear head per object position (``object_order``) on frozen scene
image embeddings, predicting the category at that position
(:func:`bindscope.evaluation.position_heads.position_classification`; scenes split by scene). Only when named."""

from __future__ import annotations

from dataclasses import dataclass

from bindscope.evaluation.tasks.registry import Task
from bindscope.evaluation.tasks.toc import HeadOptions, heads_columns, report_heads


@dataclass(frozen=True)
class IocOptions(HeadOptions):
    """The head training of :class:`~bindscope.evaluation.tasks.toc.HeadOptions`, and ``object_order``
    (``mention`` or ``size``): the order standing in for the authors' file names."""

    object_order: str = "mention"

    def check(self):
        from bindscope.evaluation.tasks.ior import check_object_order

        check_object_order(self.object_order)
        return super().check()


def compute(run, options: IocOptions) -> None:
    from bindscope.evaluation.position_heads import IOC_SOURCE, position_classification
    from bindscope.evaluation.tasks.ior import ORDER_LABELS

    run.metrics["ioc"] = position_classification(run.scene_emb, run.ordered(options.object_order), run.vocab,
                                                 run.ids, options.head_settings(run.seed), IOC_SOURCE,
                                                 ORDER_LABELS[options.object_order])


def settings(run, options: IocOptions) -> dict:
    return {"heads": options.head_settings(run.seed).to_dict(), "object_order": options.object_order}


TASKS = [Task(
    name="ioc", kind="comco-eval", summary="linear heads reading each object position's category from scene image "
    "embeddings (only when named)", compute=compute, needs=frozenset({"objects"}), images=True, options=IocOptions,
    schema={"ioc": {"$ref": "#/$defs/position_heads"}}, settings=settings,
    report=lambda result: report_heads(result, "ioc"), columns=lambda result, c: heads_columns(result, c, "ioc"))]
