"""The evaluation a training run does (``--eval DATA``, every ``--eval-every`` steps and at the end), through the
evaluation module's own plan (:func:`bindscope.evaluation.api.plan_evaluation`), so a run's ``result.json`` is the
result ``madman eval`` / ``comco eval`` give for its ``model.pt``.

- A dataset with evaluation splits (``test``, ``ood``: MADMAN, any generator's): recognition and binding per
  attribute on the ``eval_splits`` (default: ``test`` and ``ood``, those present;
  :func:`bindscope.evaluation.madman.evaluate_madman`).
- Any other dataset (ComCO / SimCO scenes, COCO imports, ...), or ``eval_tasks`` given: the scene tasks (TOR, IOR,
  I2TOR, matching, and binding on scenes that store negatives; :func:`bindscope.evaluation.comco.evaluate_comco`,
  Abbasi et al., CVPR 2025) on one split of scenes (``eval_splits``: at most one; default ``scenes`` or the only
  split), ``eval_tasks`` defaulting to what ``comco eval`` runs on that dataset (those it holds what they need for).

No embedding cache (the weights change between evaluations), no text transform, matching against every absent
category (``comco eval``'s default).
"""

from __future__ import annotations

from typing import NamedTuple

from bindscope.errors import BadInput, DatasetError

TASK_NAME = "training evaluation (eval_data)"
_RENAMED = {"splits": "eval_splits", "split": "eval_splits", "tasks": "eval_tasks"}
"""Evaluation parameters and the training parameter that sets each (an error names the latter)."""


class RunEvaluation(NamedTuple):
    """A checked evaluation of a training run: ``plan`` (an :class:`~bindscope.evaluation.api.EvaluationPlan`),
    ``kind`` of its result (``madman-eval``: per split; ``comco-eval``: one split of scenes), ``splits`` (the
    splits scored, or the one split of scenes) and ``tasks`` (the scene tasks; None for split tasks)."""

    plan: object
    kind: str
    splits: list[str]
    tasks: list[str] | None


def _renamed(exc: BadInput | DatasetError) -> BadInput | DatasetError:
    """``exc`` in the training call's terms: ``tasks`` -> ``eval_tasks``, ``split(s)`` -> ``eval_splits``."""
    param = getattr(exc, "param", None)
    if param not in _RENAMED:
        return exc
    message = str(exc)
    if message.startswith(param):
        message = _RENAMED[param] + message[len(param):]
    return type(exc)(message, param=_RENAMED[param])


def plan_run_evaluation(eval_data: str, eval_splits: list[str] | None, eval_tasks: list[str] | None,
                        param: str = "eval_data") -> RunEvaluation:
    """Check the evaluation of a run before anything is written: the dataset (finished, its shards readable), the
    splits and the tasks, as :func:`bindscope.evaluation.api.plan_evaluation` chooses them from what the dataset
    holds (:func:`bindscope.evaluation.api.evaluation_kind`).

    Args:
        eval_data: the evaluation dataset folder. eval_splits: for a dataset with evaluation splits (``test``,
            ``ood``) the splits scored (default: those present); else one split of scenes. eval_tasks: scene task
            names (of tor, ior, i2tor, matching, binding, ...; default: ``comco eval``'s). param: the parameter
            named in errors.

    Raises:
        BadInput / DatasetError: naming ``param``, ``eval_splits`` or ``eval_tasks`` and what is allowed.
    """
    from bindscope.evaluation.api import evaluation_kind, plan_evaluation
    from bindscope.evaluation.results import open_dataset
    from bindscope.format.manifest import load_manifest

    manifest = load_manifest(eval_data, param=param)
    available = list(manifest["splits"])
    missing = [s for s in eval_splits or [] if s not in available]
    if missing:
        raise BadInput(f"eval_splits {', '.join(missing)!r}: {param} {eval_data!r} has no such split; "
                       f"it has: {', '.join(available)}", param="eval_splits")
    try:
        ds = open_dataset(eval_data, validate=False)
        kind = "comco-eval" if eval_tasks else evaluation_kind(ds)
        if kind == "madman-eval":
            splits = list(eval_splits) if eval_splits else [s for s in ("test", "ood") if s in available]
            plan = plan_evaluation(ds, kind=kind, splits=splits)
            return RunEvaluation(plan, kind, splits, None)
        if eval_splits and len(eval_splits) > 1:
            raise BadInput(f"eval_splits {', '.join(eval_splits)!r}: {param} {eval_data!r} is evaluated on one "
                           "split of scenes; give one", param="eval_splits")
        from bindscope.evaluation.scenes import plan_scenes

        scenes = plan_scenes(ds, ",".join(eval_tasks) if eval_tasks else None,
                             eval_splits[0] if eval_splits else None)
        plan = plan_evaluation(ds, kind=kind, tasks=scenes.names, splits=scenes.split)
        return RunEvaluation(plan, kind, [scenes.split], scenes.names)
    except (BadInput, DatasetError) as exc:
        raise _renamed(exc) from None


def evaluate_run(evaluation: RunEvaluation, adapter, rows: list | None = None) -> dict:
    """The evaluation module's schema-valid result (``eval_result``) for ``adapter`` (an
    :class:`~bindscope.encoders.interface.EncoderAdapter`, e.g. the model being trained); its per-sample rows are
    appended to ``rows`` when that is a list (what ``madman eval`` writes beside a result)."""
    return evaluation.plan.run(adapter, None, None, False, rows)


def _accuracies(block: dict) -> dict:
    return {attribute: value["accuracy"] for attribute, value in block["per_attribute"].items()}


def binding_summary(result: dict) -> dict:
    """``{split: {"recognition": {attribute: acc}, "binding": {attribute: acc}}}`` from a MADMAN evaluation result.

    Accuracies are fractions in [0, 1] (None where no negative was scored).
    """
    return {split: {kind: _accuracies(metrics[kind]) for kind in ("recognition", "binding")}
            for split, metrics in result["metrics"]["splits"].items()}


def eval_summary(result: dict) -> dict:
    """The figures of an evaluation result that a run's ``log.jsonl`` carries (fractions in [0, 1], None where
    nothing was scored).

    MADMAN (``kind: madman-eval``): :func:`binding_summary`. ComCO / COCO (``comco-eval``): per retrieval task
    (``tor``, ``ior``, ``i2tor``) and number of objects, the unconditional top-1 share of each position (mention
    position for TOR, size rank for IOR / I2TOR; list index 0 = position 1); ``matching``: accuracy per scenario;
    ``binding``: recognition and binding (conditional) per attribute.
    """
    if result["kind"] == "madman-eval":
        return binding_summary(result)
    metrics, summary = result["metrics"], {}
    for task in ("tor", "ior", "i2tor"):
        if task in metrics:
            summary[task] = {count: [p["unconditional"]["share"] for p in group["positions"]]
                             for count, group in metrics[task]["by_num_objects"].items()}
    if "matching" in metrics:
        summary["matching"] = {scenario: block["all"]["accuracy"] for scenario, block in metrics["matching"].items()}
    if "binding" in metrics:
        summary["binding"] = {kind: _accuracies(metrics["binding"][kind]) for kind in ("recognition", "binding")}
    return summary
