"""The config keys ``comco render`` sets by flag (:class:`ComcoOverrides`), apart from the config module so that the
command's options import nothing heavy (the config's defaults need numpy)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from bindscope.generators.comco.saliency import SALIENCY

SIZE_MODES = ("one-large", "equal", "random")
"""The values of ``size_mode`` (see ``layout.scales_for``)."""


def _flag(flag: str, help: str, **more) -> dict:
    return {"flag": flag, "help": help, **more}


@dataclass(frozen=True)
class ComcoOverrides:
    """The config keys ``comco render`` sets by flag, above ``--config`` (None: not set); the command makes it with
    one click decorator generated from the fields (each field's ``metadata`` holds its flag, help and range;
    :func:`bindscope.cli.options.settings_options`) and passes :meth:`config` to :func:`bindscope.comco.render` as
    its ``**overrides``. The values are checked with the whole config (schema ``comco_config`` and
    :func:`~bindscope.generators.comco.config.resolve_render_config`) before anything is written; the keys are
    those of :data:`~bindscope.generators.comco.config.DEFAULT_CONFIG` (docs/comco.md)."""

    n: int | None = field(default=None, metadata=_flag(
        "-n", "Multi-object scenes to render [config n: 1000].", schema=("comco_config", "n")))
    objects: str | None = field(default=None, metadata=_flag(
        "--objects", "Objects per scene: a count (3) or a range (2-5), counts 1..5, spread evenly [2-5]."))
    set: str | None = field(default=None, metadata=_flag(
        "--set", "Object set: comco72, simco18, or an asset folder from `comco assets import` [comco72]."))
    size_mode: str | None = field(default=None, metadata=_flag(
        "--size-mode", "one-large: one object at scale.large, the rest at scale.small; equal; random [one-large].",
        choice=SIZE_MODES))
    resolution: int | None = field(default=None, metadata=_flag(
        "--resolution", "Image side in pixels (square) [224].", schema=("comco_config", "resolution")))
    samples: int | None = field(default=None, metadata=_flag(
        "--samples", "Cycles samples per pixel of the RGB render [those of render.quality].",
        schema=("comco_config", "samples")))
    references: bool | None = field(default=None, metadata=_flag(
        "--references/--no-references", "Also render the single-object reference split (one image per category) "
        "[on]."))
    attributes: str | None = field(default=None, metadata=_flag(
        "--attributes", "Per-object attributes sampled and written into captions: any of colour, material, size "
        "(comma-separated), e.g. colour,material [none]."))
    task: str | None = field(default=None, metadata=_flag(
        "--task", "scenes, or conjunctive-search: the target conjunction (config conjunctive_search.target) present "
        "or absent among distractors sharing one attribute with it [scenes].",
        choice=("scenes", "conjunctive-search")))
    depth: bool | None = field(default=None, metadata=_flag(
        "--depth/--no-depth", "Also store a float16 depth map per sample [off]."))
    saliency: str | None = field(default=None, metadata=_flag(
        "--saliency", "Which object the caption names first with probability --saliency-bias: "
        + "; ".join(f"{k}: {v}" for k, v in SALIENCY.items()) + " [none: uniform mention order].",
        metavar="none|size|position"))
    saliency_bias: float | None = field(default=None, metadata=_flag(
        "--saliency-bias", "Probability that the salient object (see --saliency) is mentioned first [1].",
        schema=("comco_config", "saliency_bias")))

    def config(self) -> dict:
        """The config keys these set (the fields that are not None)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
