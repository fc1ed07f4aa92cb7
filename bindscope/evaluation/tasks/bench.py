"""ARO and SugarCrepe from their published files (:mod:`bindscope.evaluation.bench`; ``bindscope bench``): accuracy
per subset (the subsets the files hold, or those chosen), macro and micro averages. One task per benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.errors import BadInput
from bindscope.evaluation import IMAGE_FITS
from bindscope.evaluation.tasks.registry import Task


@dataclass(frozen=True)
class BenchOptions:
    """Options of the benchmarks (``bindscope bench``'s options are generated from the fields:
    :func:`bindscope.cli.options.task_options`).

    Attributes:
        image_fit: ``"centre-crop"`` (the models' own preprocessing, which the benchmarks' published tables use) or
            ``"letterbox"`` (:func:`bindscope.evaluation.bench.evaluate_bench`).
        tagger: noun/adjective tagger of ARO's order subsets, ``"spacy"``, ``"lexicon"`` or None (spaCy where
            installed, else the word-list tagger, recorded; :class:`bindscope.evaluation.aro.OrderTagger`).
    """

    image_fit: str = field(default="centre-crop", metadata={
        "flag": "--image-fit", "choice": IMAGE_FITS,
        "help": "How an image (ARO VG: its box) becomes the model's square input: centre-crop (shorter side scaled, "
                "centre kept: the models' own preprocessing, which the benchmarks' published tables use) or "
                "letterbox (longer side scaled, black padding: every pixel kept)."})
    tagger: str | None = field(default=None, metadata={
        "flag": "--tagger", "choice": ("spacy", "lexicon"),
        "help": "How ARO's order perturbations find nouns and adjectives: spaCy's en_core_web_sm (ARO's) or the "
                "word-list tagger (COCO mention table, colour/size words). Default: spaCy where installed, else the "
                "word list (recorded in the result)."})

    def check(self) -> BenchOptions:
        if self.image_fit not in IMAGE_FITS:
            raise BadInput(f"image_fit {self.image_fit!r} is not allowed; allowed: {', '.join(IMAGE_FITS)}",
                           param="image_fit")
        return self


def compute(run, options: BenchOptions) -> None:
    """``run.result``: the benchmark result of ``run.adapter`` on the items ``run.items`` read before."""
    from bindscope.evaluation.bench import evaluate_bench

    run.result = evaluate_bench(run.benchmark, run.items, run.adapter, text_transform=run.text_transform,
                                cache=run.cache, data=run.data, seed=run.seed, image_fit=run.image_fit,
                                tagger=run.tagger, progress=run.progress)


def report(result: dict) -> list[str]:
    from bindscope.evaluation.bench import format_bench

    metrics = result["metrics"]
    return [f"{metrics['benchmark']}: {len(metrics['subsets'])} subsets"] + format_bench(result).split("\n")[1:]


def columns(result: dict, c) -> None:
    metrics = result["metrics"]
    name = metrics["benchmark"]
    for subset, block in metrics["subsets"].items():
        c.proportion(f"{name}/{subset}", block["accuracy"], f"{name} subset {subset}: accuracy (caption preferred "
                     "to its negative)")
    for subset, block in metrics["subsets"].items():
        if block["group_average"] is not None:
            c.add(f"{name}/{subset}/group-macro", block["group_average"]["macro"],
                  definition=f"{name} subset {subset}: bindscope's macro, unweighted mean over every group")
        if block.get("aro_macro") is not None:
            c.add(f"{name}/{subset}/aro-macro", block["aro_macro"]["macro"],
                  definition=f"{name} subset {subset}: {block['aro_macro']['definition']}")
    c.add(f"{name}/macro", metrics["average"]["macro"], definition=f"{name}: macro accuracy, mean over subsets")
    c.proportion(f"{name}/micro", metrics["average"]["micro"], f"{name}: micro accuracy, pooled over items")


def _schema(benchmark: str) -> dict:
    return {"type": "object", "required": ["benchmark", "subsets", "average"], "additionalProperties": False,
            "properties": {"benchmark": {"const": benchmark},
                           "subsets": {"type": "object", "minProperties": 1,
                                       "additionalProperties": {"$ref": "#/$defs/bench_subset"}},
                           "average": {"$ref": "#/$defs/average"}}}


TASKS = [Task(name=name, kind="bench", summary=summary, compute=compute, images=True, schema={"": _schema(name)},
              report=report, columns=columns, options=BenchOptions)
         for name, summary in (("aro", "ARO: VG-Relation, VG-Attribution, COCO-Order, Flickr-Order"),
                               ("sugarcrepe", "SugarCrepe: add, replace and swap of objects, attributes, relations"))]
