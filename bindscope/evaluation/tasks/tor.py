"""TOR, text-based object retrieval (Abbasi et al., CVPR 2025): which of a caption's objects its embedding stands
for. Each caption is compared with the bare category names; the top-1 name is attributed to its mention position
(:func:`bindscope.evaluation.comco.retrieval_shares`). ``protocol="clip-oscope"`` / ``"both"``: also (or only) the
authors' statistics (:mod:`bindscope.evaluation.clip_oscope`) under ``metrics["clip_oscope"]["tor"]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.evaluation.report import POSITION_NOTE
from bindscope.evaluation import PROTOCOLS
from bindscope.evaluation.tasks.registry import Task


@dataclass(frozen=True)
class TorOptions:
    """Options of TOR. protocol: ``bindscope`` (default), ``clip-oscope`` (the authors' statistics) or ``both``.

    A field's ``metadata`` is its ``comco eval`` option (:func:`bindscope.cli.options.task_options`; one option per
    field name, from the first task that has it), as in every task's options."""

    protocol: str = field(default="bindscope", metadata={
        "flag": "--protocol", "choice": PROTOCOLS,
        "help": "TOR/IOR statistics: bindscope's, the authors' scripts' (clip-oscope/clip-oscope: top-n accuracy, "
                "per-position figures, P@k, R@k, MAP, NDCG; docs/clip-oscope.md), or both side by side."})

    def check(self) -> TorOptions:
        from bindscope.evaluation.clip_oscope import check_protocol

        check_protocol(self.protocol)
        return self


def compute(run, options: TorOptions) -> None:
    from bindscope.evaluation import clip_oscope as oscope
    from bindscope.evaluation.comco import retrieval_shares

    def ours():
        run.metrics["tor"] = {"candidates": len(run.vocab), "ordered_by": "mention position",
                              "by_num_objects": retrieval_shares(run.cap_emb, run.name_emb, run.vocab, run.mentions,
                                                                 run.rows, "tor", run.caption_ids, run.seed)}

    def theirs():
        sims = run.cap_emb @ run.name_emb.T
        run.metrics.setdefault("clip_oscope", {})["tor"] = oscope.oscope_block(
            sims, run.vocab, run.mentions, "tor", run.captions, "mention position", run.caption_ids, run.seed)
        if run.rows is not None:
            oscope.oscope_rows(sims, run.vocab, run.mentions, "tor", run.captions, run.caption_ids, run.rows)

    steps = [(ours, options.protocol != "clip-oscope"), (theirs, options.protocol != "bindscope")]
    for step, wanted in (reversed(steps) if run.oscope_rows_first else steps):
        if wanted:
            step()
    run.truncation_captions += run.captions


def protocol_settings(run, options) -> dict:
    """The settings of a clip-oscope protocol (TOR and IOR): the protocol and the object order."""
    if options.protocol == "bindscope":
        return {}
    return {"protocol": options.protocol, "object_order": run.option("object_order", "mention")}


def report(result: dict) -> list[str]:
    from bindscope.evaluation.clip_oscope import format_oscope
    from bindscope.evaluation.report import retrieval_lines

    metrics = result["metrics"]
    lines = retrieval_lines("TOR", metrics["tor"], "position") if "tor" in metrics else []
    return lines + format_oscope({"clip_oscope": {"tor": metrics["clip_oscope"]["tor"]}}
                                 if "tor" in metrics.get("clip_oscope", {}) else {})[:-1]


def columns(result: dict, c) -> None:
    from bindscope.evaluation.collect_kinds import oscope_columns, position_columns

    metrics = result["metrics"]
    if "tor" in metrics:
        position_columns(c, "tor", metrics["tor"])
    oscope_columns(c, "tor", metrics.get("clip_oscope", {}).get("tor"))


def panels(result: dict) -> list:
    from bindscope.evaluation.report import position_panel

    return [position_panel("TOR", result["metrics"]["tor"])] if "tor" in result["metrics"] else []


TASKS = [Task(
    name="tor", kind="comco-eval", summary="text-based object retrieval: which mention position a caption's "
    "embedding stands for (with DATA or on sampled captions)", compute=compute, needs=frozenset({"mentions"}),
    reads=frozenset({"captions"}), default=True, sources=("dataset", "sampled"), options=TorOptions,
    schema={"tor": {"$ref": "#/$defs/retrieval"}, "clip_oscope/tor": {"$ref": "#/$defs/oscope"}},
    settings=protocol_settings, report=report, note=POSITION_NOTE,
    columns=columns, panels=panels)]
