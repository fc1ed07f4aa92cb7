"""CLS attention by object size rank (Abbasi et al., CVPR 2025, Figure 3; :mod:`bindscope.evaluation.attention`):
the share of a ViT's class-token attention on each object's patches, per size rank. ``comco attention``."""

from __future__ import annotations

from dataclasses import dataclass

from bindscope.evaluation.tasks.registry import Task


@dataclass(frozen=True)
class AttentionOptions:
    """Options of attention: ``layers`` (``last`` or ``all`` blocks), ``use_rollout`` (also attention rollout),
    ``top_k`` (most-attended patches counted, >= 1), ``limit`` (only the first N samples; None: all)."""

    layers: str = "last"
    use_rollout: bool = False
    top_k: int = 10
    limit: int | None = None

    def check(self) -> AttentionOptions:
        from bindscope.errors import BadInput, check_int
        from bindscope.evaluation.attention import LAYER_CHOICES

        if self.layers not in LAYER_CHOICES:
            raise BadInput(f"layers {self.layers!r} is not allowed; use one of {', '.join(LAYER_CHOICES)}",
                           param="layers")
        check_int("top_k", self.top_k, 1)
        if self.limit is not None:
            check_int("limit", self.limit, 1)
        return self


def compute(run, options: AttentionOptions) -> None:
    """``run.result``: the attention result of ``run.adapter`` on split ``run.split`` of ``run.dataset``."""
    from bindscope.evaluation.attention import cls_attention_by_size

    run.result = cls_attention_by_size(run.dataset, run.adapter, layers=options.layers,
                                       use_rollout=options.use_rollout, top_k=options.top_k, split=run.split,
                                       limit=options.limit, batch_size=run.batch_size, seed=run.seed,
                                       progress=run.progress, check=False)


def blocks(result: dict) -> list[tuple[str, dict]]:
    """``(title, block)`` for each reported block of an attention result (layers by index, then rollout)."""
    metrics = result["metrics"]
    out = [(f"block {k}", b) for k, b in metrics["layers"].items()]
    if "rollout" in metrics:
        out.append(("rollout", metrics["rollout"]))
    return out


def report(result: dict) -> list[str]:
    from bindscope.evaluation.report import ci, pct

    m = result["metrics"]
    lines = [f"patch grid {m['grid'][0]}x{m['grid'][1]}, {m['blocks']} blocks, top-k = {m['top_k']}"]
    for title, block in blocks(result):
        lines += ["", f"CLS attention, {title} (all scenes)",
                  f"  {'size rank':<10} {'objects':>7} {'mass %':>8} {'95% CI':>14} {'mass/patch %':>12} "
                  f"{'area (patches)':>14} {'top-k patches':>13}"]
        for r in block["all"]:
            lines.append(f"  {r['size_rank']:<10} {r['objects']:>7} {pct(r['mass']['mean']):>8} "
                         f"{ci(r['mass']['ci95']):>14} {pct(r['mass_per_patch']['mean']):>12} "
                         f"{r['patch_area']['mean']:>14.2f} {r['top_k_patches']['mean']:>13.2f}")
    return lines


def columns(result: dict, c) -> None:
    for name, block in ((t.replace("block ", "block"), b) for t, b in blocks(result)):
        for r in block["all"]:
            c.add(f"attention/{name}/rank{r['size_rank']}", r["mass"]["mean"], r["mass"]["ci95"], "img",
                  f"CLS attention, {name}: mean share of the attention on the object of size rank {r['size_rank']}")


def panels(result: dict) -> list:
    grid = result["metrics"]["grid"]
    uniform = 1.0 / (grid[0] * grid[1])
    out = []
    for title, block in blocks(result)[-2:]:
        width = max((len(g) for g in block["by_num_objects"].values()), default=1)
        labels = [str(k) for k in range(1, width + 1)]
        figures: dict = {"mass": {}, "mass_per_patch": {}}
        for n, ranks in block["by_num_objects"].items():
            pad = [None] * (width - len(ranks))
            for name, series in figures.items():
                series[f"{n} objects"] = [r[name]["mean"] for r in ranks] + pad
        out.append((f"CLS attention on the object, {title}", labels, figures["mass"],
                    "share of CLS attention, by size rank", None, None))
        out.append((f"per patch of the object, {title} (dotted: uniform)", labels, figures["mass_per_patch"],
                    "share of CLS attention per patch", uniform, None))
    return out


TASKS = [Task(
    name="attention", kind="comco-attention", summary="CLS-to-patch attention by object size rank (a ViT)",
    compute=compute, needs=frozenset({"masks"}), images=True, default=True, options=AttentionOptions,
    schema={"": {"type": "object", "required": ["grid", "blocks", "top_k", "layers"],
                 "properties": {"grid": {"type": "array", "items": {"type": "integer", "minimum": 1},
                                         "minItems": 2, "maxItems": 2},
                                "layers": {"type": "object", "minProperties": 1,
                                           "additionalProperties": {"$ref": "#/$defs/attention_block"}},
                                "rollout": {"$ref": "#/$defs/attention_block"}}}},
    report=report, note=("mass = share of the CLS attention on the object's pixels; size rank 1 = largest visible "
                         "area. CI: 95% percentile bootstrap over scenes."), columns=columns, panels=panels)]
