"""large-object (image side; :mod:`bindscope.evaluation.saliency`): each image of two objects of different size
levels against single-object renders of its two objects (redrawn from the sample's plan by the dataset's
generator); the share where the larger object's render is the more similar (chance 50%), also per size pair."""

from __future__ import annotations

from bindscope.evaluation.tasks.first_mention import share_task


def compute(run, options) -> None:
    from bindscope.evaluation.saliency import score_large_object, single_digit_renders

    part, name = run.part, run.split
    picked = part.samples
    renders = single_digit_renders(run.dataset, name, run.generator)
    emb = run.embedder.images([s.image for s in picked] + [r for s in picked for r in renders[s.index]])
    n = len(picked)
    sizes = [tuple(o.attributes["size"] for o in sorted(s.objects, key=lambda o: o.index)) for s in picked]
    split_rows = [] if run.rows is not None else None
    block = score_large_object(emb[:n], emb[n:].reshape(n, 2, -1), sizes, part.levels, part.ids, split_rows,
                               run.seed)
    run.metrics.setdefault("large_object", {})[name] = {"num_scored": n - block["equal_size_skipped"], **block}
    if run.rows is not None:
        run.rows.extend({"split": name, **row} for row in split_rows)


TASKS = [share_task(
    "large-object", "does an image stand for its larger object? (each image against single-object renders of its "
    "two objects)", compute, {"plans", "attributes"}, "by_size_pair", "image ~ larger digit",
    "share of images of two digits of different size levels more similar to the render of the larger digit alone "
    "than to the smaller's (chance 50%)", "size levels", images=True)]
