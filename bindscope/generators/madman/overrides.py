"""The config keys ``madman generate`` sets by flag (:class:`MadmanOverrides`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.generators.madman.config import DEFAULTS, PROPERTIES, SALIENCY
from bindscope.limits import MAX_COUNT


def _flag(flag, help: str, **more) -> dict:
    return {"flag": flag, "help": help, **more}


def _property(key: str) -> dict:
    return _flag("--" + key.replace("_", "-"), PROPERTIES[key], schema=("madman_config", key))


@dataclass(frozen=True)
class MadmanOverrides:
    """The config keys ``madman generate`` sets by flag, above ``--preset`` and ``--config`` (None: not set); the
    command makes it with one click decorator generated from the fields (each field's ``metadata`` holds its flag,
    help and range; :func:`bindscope.cli.options.settings_options`) and passes :meth:`config` to
    :func:`bindscope.madman.generate` as its ``**overrides``. The values are checked with the whole config
    (schema ``madman_config`` and :func:`bindscope.generators.madman.config.resolve`) before anything is written.

    Attributes:
        multi_object_images, multi_object_captions, attribute_density, saliency_bias: the four data properties
            (:data:`~bindscope.generators.madman.config.PROPERTIES`). saliency: ``centre`` or ``size``
            (:data:`~bindscope.generators.madman.config.SALIENCY`).
        num_images: images per split (train, test and ood). image_size: canvas side in pixels.
        holdout: ``"DIGIT:ATTRIBUTE=VALUE"`` combinations held out into the ood split. holdout_fraction: the
            share of all combinations also held out (seeded).
    """

    multi_object_images: float | None = field(default=None, metadata=_property("multi_object_images"))
    multi_object_captions: float | None = field(default=None, metadata=_property("multi_object_captions"))
    attribute_density: float | None = field(default=None, metadata=_property("attribute_density"))
    saliency_bias: float | None = field(default=None, metadata=_property("saliency_bias"))
    saliency: str | None = field(default=None, metadata=_flag(
        "--saliency", "Which digit is the salient one: " + "; ".join(f"{k}: {v}" for k, v in SALIENCY.items())
        + " [default: centre].", metavar="centre|size"))
    num_images: int | None = field(default=None, metadata=_flag(
        ("-n", "--num-images"), "Images per split (train, test and ood); default from the config (1000 / 500 / 500).",
        range=(1, MAX_COUNT)))
    image_size: int | None = field(default=None, metadata=_flag(
        "--image-size", f"Canvas side in pixels (default {DEFAULTS['image_size']}).",
        schema=("madman_config", "image_size")))
    holdout: tuple[str, ...] = field(default=(), metadata=_flag(
        "--holdout", "Hold a digit-attribute combination out of train/test into the ood split (repeatable), e.g. "
        "--holdout 7:colour=red.", multiple=True, metavar="DIGIT:ATTRIBUTE=VALUE"))
    holdout_fraction: float | None = field(default=None, metadata=_flag(
        "--holdout-fraction", "Also hold out this share (0..0.5) of all digit-attribute-value combinations (seeded).",
        schema=("madman_config", "ood.holdout_fraction")))

    def __post_init__(self):
        object.__setattr__(self, "holdout", tuple(self.holdout or ()))

    def config(self) -> dict:
        """The config keys these set, nested as in the config (``num_images`` -> ``splits``, ``holdout`` and
        ``holdout_fraction`` -> ``ood``)."""
        out: dict = {k: getattr(self, k) for k in (*PROPERTIES, "saliency", "image_size")
                     if getattr(self, k) is not None}
        if self.num_images is not None:
            out["splits"] = {"train": self.num_images, "test": self.num_images, "ood": self.num_images}
        if self.holdout or self.holdout_fraction is not None:
            out["ood"] = {}
            if self.holdout:
                out["ood"]["holdout"] = list(self.holdout)
            if self.holdout_fraction is not None:
                out["ood"]["holdout_fraction"] = self.holdout_fraction
        return out
