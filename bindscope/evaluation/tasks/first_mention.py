"""first-mention (text side; :mod:`bindscope.evaluation.saliency`): each two-object caption against the two
single-object descriptions it is made of; the share where the first-mentioned object's description is the more
similar (chance 50%), also by the objects' size relation."""

from __future__ import annotations

from bindscope.evaluation.tasks.registry import Task

NOTE = ("first-mention / large-object: strict > (ties count as wrong); CI (images): bootstrap over images, one "
        "comparison per image.")


def compute(run, options) -> None:
    from bindscope.errors import DatasetError
    from bindscope.evaluation.saliency import _relation, score_first_mention

    part, name = run.part, run.split
    picked = part.samples
    parts = [s.caption.split(" and ") for s in picked]
    bad = [s.caption for s, p in zip(picked, parts) if len(p) != 2]
    if bad:
        raise DatasetError(f"caption {bad[0]!r} of split {name!r} is not two descriptions joined by ' and '")
    relation = []
    for s in picked:
        first, second = sorted(s.objects, key=lambda o: o.mention_position)
        relation.append(_relation(part.levels[first.attributes["size"]], part.levels[second.attributes["size"]]))
    descriptions = [d for p in parts for d in p]
    emb = run.embed([s.caption for s in picked] + descriptions)
    n = len(picked)
    split_rows = [] if run.rows is not None else None
    block = score_first_mention(emb[:n], emb[n:].reshape(n, 2, -1), relation, part.ids, split_rows, run.seed)
    run.metrics.setdefault("first_mention", {})[name] = {"num_scored": n, **block}
    run.captions["saliency"] += [s.caption for s in picked]
    run.texts["saliency"] += descriptions
    if run.rows is not None:
        run.rows.extend({"split": name, **row} for row in split_rows)


def share_settings(run, options) -> dict:
    """The settings of the ``saliency`` part (first-mention, large-object)."""
    from bindscope.evaluation.saliency import INTERVALS

    return {"interval": INTERVALS, "size_levels": "compared by their parameter in the config's attributes.size"}


def share_lines(result: dict, task: str, key: str, groups: str, title: str) -> list[str]:
    """The per-split share lines of a saliency block (``first_mention`` / ``large_object``)."""
    from bindscope.evaluation.report import ci, pct

    lines: list[str] = []
    for name, block in result["metrics"].get(task, {}).items():
        lines += ([""] if lines else []) + [f"{title}, split {name}: {block['num_scored']} images; share {groups} "
                                            "(chance 50%)"]
        for label, p in [("all", block["all"]), *block[key].items()]:
            lines.append(f"  {label:<16} {pct(p['accuracy']):>7}  CI (images) {ci(p.get('ci95_cluster')):<16} "
                         f"n={p['total']}")
    return lines


def share_columns(result: dict, c, task: str, key: str, definition: str, part_text: str) -> None:
    """``<split>/<task>`` and ``<split>/<task>/<group>`` columns of a saliency block."""
    for split, block in result["metrics"].get(task, {}).items():
        text = f"split {split}: {definition}"
        c.proportion(f"{split}/{task}", block["all"], text)
        for part, p in block[key].items():
            c.proportion(f"{split}/{task}/{part}", p, f"{text}, {part_text} {part}")


def share_panels(result: dict, task: str, key: str, title: str) -> list:
    """One plot panel per split of a saliency block."""
    panels = []
    for name, block in result["metrics"].get(task, {}).items():
        labels = ["all", *block[key]]
        values = [block["all"]["accuracy"], *(p["accuracy"] for p in block[key].values())]
        panels.append((f"{title}, {name}", labels, {"share": values}, "share", 0.5, 1.0))
    return panels


def share_task(name: str, summary: str, compute, needs: set[str], by: str, groups: str, definition: str,
               part_text: str, images: bool = False) -> Task:
    """A MADMAN saliency task (first-mention, large-object): its share block ``<key>[split]`` (key: ``name`` with
    underscores) grouped by ``by``, reported, tabulated and plotted the same way."""
    key, side = name.replace("-", "_"), "image side" if images else "text side"
    return Task(
        name=name, kind="madman-eval", summary=summary, compute=compute, needs=frozenset(needs), images=images,
        reads=frozenset({"saliency"}),
        schema={key: {"type": "object", "minProperties": 1, "additionalProperties": {"$ref": f"#/$defs/{key}"}}},
        report=lambda r: share_lines(r, key, by, groups, f"{name} ({side})"), settings=share_settings, note=NOTE,
        columns=lambda r, c: share_columns(r, c, key, by, definition, part_text),
        panels=lambda r: share_panels(r, key, by, name))


TASKS = [share_task(
    "first-mention", "does a two-object caption stand for its first-mentioned object? (each caption against its "
    "two single-object descriptions)", compute, {"mentions", "attributes"}, "by_relation",
    "caption ~ first-mentioned digit", "share of two-digit captions more similar to the description of their "
    "first-mentioned digit than to the other's (chance 50%), unconditional", "among captions with")]
