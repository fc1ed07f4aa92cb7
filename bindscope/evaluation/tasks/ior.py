"""IOR, image-based object retrieval (Abbasi et al., CVPR 2025): which of a scene's objects its image embedding
stands for. Each scene image is compared with single-object reference images (the dataset's ``references`` split,
or an external folder, :mod:`bindscope.evaluation.references`, e.g. DomainNet); the top-1 category is attributed
to that object's size rank (1 = largest visible area). ``protocol="clip-oscope"`` / ``"both"``: also (or only) the
authors' statistics under ``metrics["clip_oscope"]["ior"]``, objects in ``object_order``."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.evaluation.report import POSITION_NOTE
from bindscope.evaluation.tasks.registry import Task

ORDER_LABELS = {"mention": "caption mention order (unmentioned objects last)",
                "size": "size rank (1 = largest visible area)"}


def check_object_order(order: str) -> None:
    """BadInput unless ``order`` is an object order (``mention`` or ``size``)."""
    from bindscope.format.records import ordered_objects

    ordered_objects([], order)


@dataclass(frozen=True)
class IorOptions:
    """Options of IOR.

    Attributes:
        protocol: ``bindscope``, ``clip-oscope`` or ``both``.
        object_order: ``mention`` or ``size``: the order standing in for the authors' file names (clip-oscope IOR).
        references: an external folder of single-object images, one subfolder per category (the DomainNet
            layout); None: the dataset's ``references`` split.
        category_map: JSON/YAML file mapping category names to subfolder names (with ``references``).
        references_per_category: images per category (first by file name), averaged into one candidate, >= 1.
    """

    protocol: str = "bindscope"
    object_order: str = field(default="mention", metadata={
        "flag": "--object-order", "choice": ("mention", "size"),
        "help": "With DATA: the object order that stands in for the authors' file names (clip-oscope IOR, IOC, "
                "--bias-position): caption mention order or size rank."})
    references: str | None = field(default=None, metadata={
        "flag": "--reference-images", "path": {},
        "help": "With DATA: external single-object reference images for IOR, one subfolder per category (the "
                "DomainNet layout); default: the dataset's 'references' split."})
    category_map: str | None = field(default=None, metadata={
        "flag": "--category-map", "path": {},
        "help": "With --reference-images: JSON/YAML file mapping category names to subfolder names."})
    references_per_category: int = field(default=10, metadata={
        "flag": "--reference-images-per-category", "range": (1, 10_000),
        "help": "With --reference-images: images per category (first by file name), averaged into one candidate."})

    def check(self) -> IorOptions:
        from bindscope.errors import BadInput
        from bindscope.evaluation.clip_oscope import check_protocol

        check_protocol(self.protocol)
        check_object_order(self.object_order)
        if self.category_map is not None and self.references is None:
            raise BadInput("category_map needs references", param="category_map")
        return self


def compute(run, options: IorOptions) -> None:
    from bindscope.evaluation import clip_oscope as oscope
    from bindscope.evaluation.comco import retrieval_shares
    from bindscope.evaluation.scenes import scene_batches

    if run.references is None:
        refs = list(scene_batches(run.dataset.split("references"), negatives=False))
        ref_names = [(s.objects[0].category if s.objects else s.caption) for batch, _, _ in refs for s in batch]
        ref_emb = run.embedder.image_batches((keys, pixels) for _, pixels, keys in refs)
    else:
        ref_names, ref_emb = run.references.prototypes(run.embedder)
    if options.protocol != "clip-oscope":
        run.metrics["ior"] = {"candidates": len(ref_names), "ordered_by": ORDER_LABELS["size"],
                              "by_num_objects": retrieval_shares(run.scene_emb, ref_emb, ref_names, run.by_rank,
                                                                 run.rows, "ior", run.ids)}
    if options.protocol != "bindscope":
        sims = run.scene_emb @ ref_emb.T
        in_order = run.ordered(options.object_order)
        run.metrics.setdefault("clip_oscope", {})["ior"] = oscope.oscope_block(
            sims, ref_names, in_order, "ior", ordered_by=ORDER_LABELS[options.object_order])
        if run.rows is not None:
            oscope.oscope_rows(sims, ref_names, in_order, "ior", None, run.ids, run.rows)


def report(result: dict) -> list[str]:
    from bindscope.evaluation.clip_oscope import format_oscope
    from bindscope.evaluation.report import retrieval_lines

    metrics = result["metrics"]
    lines = retrieval_lines("IOR", metrics["ior"], "size rank") if "ior" in metrics else []
    return lines + format_oscope({"clip_oscope": {"ior": metrics["clip_oscope"]["ior"]}}
                                 if "ior" in metrics.get("clip_oscope", {}) else {})[:-1]


def columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import oscope_columns, position_columns

    metrics = result["metrics"]
    if "ior" in metrics:
        position_columns(c, "ior", metrics["ior"])
    oscope_columns(c, "ior", metrics.get("clip_oscope", {}).get("ior"))


def panels(result: dict) -> list:
    from bindscope.evaluation.report import position_panel

    return [position_panel("IOR", result["metrics"]["ior"])] if "ior" in result["metrics"] else []


def _settings(run, options):
    from bindscope.evaluation.tasks.tor import protocol_settings

    return protocol_settings(run, options)


TASKS = [Task(
    name="ior", kind="comco-eval", summary="image-based object retrieval against single-object reference images: "
    "which size rank a scene's image embedding stands for (needs a references split or --reference-images)",
    compute=compute, needs=frozenset({"masks", "references"}), supplied_by={"references": "references=DIR"},
    images=True, default=True, options=IorOptions,
    schema={"ior": {"$ref": "#/$defs/retrieval"}, "clip_oscope/ior": {"$ref": "#/$defs/oscope"}},
    settings=_settings, report=report, note=POSITION_NOTE,
    columns=columns, panels=panels)]
