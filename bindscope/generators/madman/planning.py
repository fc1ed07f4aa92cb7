"""Pure, seeded planning of MADMAN samples: which digits, their attributes, the caption and its negatives.

Nothing here touches pixels: a plan (:func:`plan_sample`) is a JSON-serialisable dict that
:mod:`bindscope.generators.madman.render` realises. Sample ``i`` of split ``s`` draws all its randomness
from ``random.Random("madman/<seed>/<s>/<i>")`` and uses only ``random()`` of it (whose sequence Python
guarantees across versions), so a plan depends on (config, seed, split, index) alone.

Sampling rules (Gurung et al., GCPR 2025, docs/papers.md section 2: the four data properties; exact rules are
project choices):

``train`` split
  1. **multi-object images**: the image shows two digits with probability ``multi_object_images``, else one.
  2. Digit classes are uniform over 0..9; the two digits of an image have different classes. Instances are
     uniform within the class in the split's pool (see :mod:`~bindscope.generators.madman.mnist`).
     Every attribute value is uniform over the attribute's values (sorted by name), leaving out
     held-out (digit, attribute, value) combinations.
  3. Object 1 is the **salient** digit, drawn at the canvas centre (and on top); object 2 sits off-centre.
  4. **multi-object captions**: a two-digit image's caption describes both digits with probability
     ``multi_object_captions``, otherwise one.
  5. **saliency bias**: with probability ``saliency_bias`` the salient digit is described first (or is the
     only digit described); otherwise the other one is. One-digit images describe their digit. Which digit is
     salient is ``saliency``: ``centre`` (default, the paper's) object 1, the centred digit; ``size`` the digit
     of the larger size level, and none where both share a level: those images are described in random order
     (the salient-first draw is then made with probability 0.5 instead of ``saliency_bias``).
  6. **attribute density** d: each described digit mentions k attributes, drawn independently per digit:
     ``two-point`` (default) k = floor(d) + Bernoulli(d - floor(d)), the integer distribution with mean d and
     least variance; ``binomial`` k ~ Binomial(n, d / n) with n = number of caption attributes. The k
     attributes are a uniform random subset of ``caption_order``.

``test`` split (in-distribution evaluation)
  Two digits, both described, mention order uniform (no saliency bias), held-out combinations excluded;
  both digits are described with the same attribute subset of size k >= 1, k drawn as in rule 6 from
  ``eval_attribute_density`` (default: ``attribute_density``), so every mentioned attribute yields negatives.

``ood`` split (only with a hold-out)
  As ``test``, but one digit (object 1 or 2 with equal probability) carries a held-out combination chosen
  uniformly among them, and that attribute is always mentioned. Other values are unrestricted.

Every two-digit sample whose caption describes both digits carries its recognition and binding negatives
(:func:`bindscope.generators.madman.captions.make_negatives`).
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from bindscope.format.records import Negative
from bindscope.generators.madman.attributes import ATTRIBUTES
from bindscope.generators.madman.captions import describe, make_negatives

#: Other instances of the same class drawn for each digit (``alternates``): the renderer draws the most legible
#: of ``source`` and ``alternates`` with the digit's attributes (``Renderer.choose``).
ALTERNATES = 7


def _pick(u: float, items: Sequence):
    return items[min(int(u * len(items)), len(items) - 1)]


def _subset(rng: random.Random, items: Sequence[str], k: int) -> list[str]:
    pool = list(items)
    for i in range(k):
        j = i + min(int(rng.random() * (len(pool) - i)), len(pool) - i - 1)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def draw_count(rng: random.Random, density: float, n: int, distribution: str) -> int:
    """Number of attributes mentioned for one described digit (rule 6); 0 <= result <= n."""
    if distribution == "binomial":
        p = density / n
        return sum(rng.random() < p for _ in range(n))
    base = math.floor(density)
    return min(n, base + (rng.random() < density - base))


def holdout_set(config: dict) -> set[tuple[int, str, str]]:
    """The held-out ``(digit, attribute, value)`` combinations of a resolved config."""
    out = set()
    for spec in config["ood"]["holdout"]:
        digit, rest = spec.split(":", 1)
        attribute, value = rest.split("=", 1)
        out.add((int(digit), attribute, value))
    return out


class Planner:
    """Plans samples for one resolved config, seed and digit pools (pure Python; picklable).

    Args:
        config: the resolved config (:func:`bindscope.generators.madman.config.resolve`).
        seed: the run's seed.
        pools: per pool name ``"train"`` (used by the train split) / ``"eval"`` (test and ood), the 10
            per-class lists of MNIST indices.
    """

    def __init__(self, config: dict, seed: int, pools: dict[str, list[list[int]]]):
        self.config = config
        self.seed = seed
        self.pools = pools
        self.values = {a: sorted(config["attributes"][a]) for a in ATTRIBUTES}
        self.order = list(config["caption_order"])
        self.holdout = sorted(holdout_set(config))
        held = set(self.holdout)
        self.allowed = {(d, a): [v for v in self.values[a] if (d, a, v) not in held]
                        for d in range(10) for a in ATTRIBUTES}

    def _digit(self, rng: random.Random, split: str, digit: int, restricted: bool) -> dict:
        pool = self.pools["train" if split == "train" else "eval"][digit]
        source = _pick(rng.random(), pool)
        attributes = {}
        for a in ATTRIBUTES:
            options = self.allowed[(digit, a)] if restricted else self.values[a]
            attributes[a] = _pick(rng.random(), options)
        cuts = int(self.config["attributes"]["fracture"][attributes["fracture"]])
        return {"digit": digit, "source": int(source), "attributes": attributes,
                "swell": rng.random(), "cuts": [rng.random() for _ in range(cuts)]}

    def _classes(self, u, split: str, two: bool) -> tuple[list[int], tuple | None, int | None]:
        """The digit classes (object 1 first) and, for ``ood``, the held-out combination and the object
        (1 or 2) that carries it; draws from ``u`` in plan order."""
        if split == "ood":
            holdout = _pick(u(), self.holdout)
            held_index = 1 if u() < 0.5 else 2
            other = _pick(u(), [d for d in range(10) if d != holdout[0]])
            return ([holdout[0], other] if held_index == 1 else [other, holdout[0]]), holdout, held_index
        first = int(u() * 10) % 10
        classes = [first]
        if two:
            classes.append(_pick(u(), [d for d in range(10) if d != first]))
        return classes, None, None

    def _mentions(self, rng: random.Random, split: str, two: bool, holdout: tuple | None,
                  digits: list[dict]) -> list[dict]:
        """Which objects the caption describes, in order, and their mentioned attributes: in ``train`` from
        the four data properties (multi-object captions, saliency bias, attribute density); in test and ood
        both objects with one shared attribute subset (holding the held-out attribute in ood)."""
        cfg, n, u = self.config, len(self.order), rng.random
        if split == "train":
            if two:
                both = u() < cfg["multi_object_captions"]
                salient = salient_object(cfg, digits)
                salient_first = u() < (0.5 if salient is None else cfg["saliency_bias"])
                first, other = (1, 2) if salient in (1, None) else (2, 1)
                if not salient_first:
                    first, other = other, first
                described = [first, other] if both else [first]
            else:
                described = [1]
            mentions = []
            for k in described:
                count = draw_count(rng, cfg["attribute_density"], n, cfg["density_distribution"])
                mentions.append({"index": k, "attributes": _subset(rng, self.order, count)})
            return mentions
        density = cfg["eval_attribute_density"]
        density = cfg["attribute_density"] if density is None else density
        count = max(1, draw_count(rng, density, n, cfg["density_distribution"]))
        if holdout is not None:
            subset = [holdout[1]] + _subset(rng, [a for a in self.order if a != holdout[1]], count - 1)
        else:
            subset = _subset(rng, self.order, count)
        described = [1, 2] if u() < 0.5 else [2, 1]
        return [{"index": k, "attributes": list(subset)} for k in described]

    def plan(self, split: str, index: int) -> tuple[dict, str, list[Negative]]:
        """Plan sample ``index`` of ``split``; return ``(spec, caption, negatives)``.

        The spec holds ``digits`` (object 1 first: digit class, MNIST source index, the six attribute
        values, swelling and fracture draws, :data:`ALTERNATES` other source indices of the class as
        ``alternates``), ``layout`` (centre jitter in pixels, direction of object 2 in
        radians), ``mentions`` (object index and mentioned attributes, in caption order) and ``holdout``.
        """
        cfg = self.config
        rng = random.Random(f"madman/{self.seed}/{split}/{index}")
        u = rng.random
        two = u() < cfg["multi_object_images"] if split == "train" else True
        classes, holdout, held_index = self._classes(u, split, two)
        digits = [self._digit(rng, split, c, restricted=split != "ood") for c in classes]
        if holdout is not None:
            digits[held_index - 1]["attributes"][holdout[1]] = holdout[2]
            cuts = int(cfg["attributes"]["fracture"][digits[held_index - 1]["attributes"]["fracture"]])
            digits[held_index - 1]["cuts"] = digits[held_index - 1]["cuts"][:cuts] + [
                u() for _ in range(cuts - len(digits[held_index - 1]["cuts"]))]
        jitter = cfg["layout"]["centre_jitter"]
        layout = {"jitter": [(2 * u() - 1) * jitter, (2 * u() - 1) * jitter], "direction": 2 * math.pi * u()}
        mentions = self._mentions(rng, split, two, holdout, digits)
        for m in mentions:
            m["attributes"] = [a for a in self.order if a in m["attributes"]]
        parts = [(k, digits[k - 1]["digit"], {a: digits[k - 1]["attributes"][a] for a in m["attributes"]})
                 for m in mentions for k in [m["index"]]]
        caption = describe([(d, attrs) for _, d, attrs in parts], self.order)
        negatives = make_negatives(parts, self.values, u, self.order)
        for d in digits:  # drawn last, so that nothing above depends on them
            pool = self.pools["train" if split == "train" else "eval"][d["digit"]]
            d["alternates"] = [int(_pick(u(), pool)) for _ in range(ALTERNATES)]
        spec = {"split": split, "index": index, "digits": digits, "layout": layout, "mentions": mentions,
                "holdout": None if holdout is None else f"{holdout[0]}:{holdout[1]}={holdout[2]}"}
        return spec, caption, negatives

    def replan(self, spec: dict, attempt: int) -> dict:
        """A new try at placing a plan whose two digits the renderer could not keep apart
        (:class:`~bindscope.generators.madman.render.Unplaceable`): the same classes, attributes, swelling and
        fracture draws, caption and negatives, with other source instances (``source`` and ``alternates``, drawn
        from the split's pool as in :meth:`plan`) and another ``layout`` (jitter and direction), all drawn from
        ``random.Random("madman/<seed>/<split>/<index>/replan/<attempt>")``. The result records ``replans``:
        ``attempt`` (1, 2, ...). Being a pure function of the plan and ``attempt``, it keeps the dataset
        deterministic, and it leaves the attribute distribution as planned."""
        rng = random.Random(f"madman/{self.seed}/{spec['split']}/{spec['index']}/replan/{attempt}")
        u = rng.random
        pools = self.pools["train" if spec["split"] == "train" else "eval"]
        digits = [{**d, "source": int(_pick(u(), pools[d["digit"]]))} for d in spec["digits"]]
        for d in digits:
            d["alternates"] = [int(_pick(u(), pools[d["digit"]])) for _ in range(ALTERNATES)]
        jitter = self.config["layout"]["centre_jitter"]
        layout = {"jitter": [(2 * u() - 1) * jitter, (2 * u() - 1) * jitter], "direction": 2 * math.pi * u()}
        return {**spec, "digits": digits, "layout": layout, "replans": attempt}


def saliency_mode(config: dict) -> str:
    """``"centre"`` or ``"size"``: the config's ``saliency`` (a resolved config leaves the default, ``centre``,
    unrecorded, so that configs written before the key existed keep their hash)."""
    return config.get("saliency", "centre")


def salient_object(config: dict, digits: list[dict]) -> int | None:
    """The salient object (1 or 2) of a plan's ``digits`` under ``saliency_mode(config)``: ``centre`` object 1 (the
    centred digit); ``size`` the digit of the larger size level (its parameter in ``config["attributes"]["size"]``),
    None when the two digits share a level. A one-digit plan's digit is object 1 in both."""
    if saliency_mode(config) == "centre" or len(digits) == 1:
        return 1
    sizes = [config["attributes"]["size"][d["attributes"]["size"]] for d in digits]
    return None if sizes[0] == sizes[1] else (1 if sizes[0] > sizes[1] else 2)


def plan_counts(spec: dict, negatives: list[Negative], saliency: str = "centre",
                salient: int | None = 1) -> dict[str, float]:
    """Additive statistics of one plan (summed over samples, then turned into rates by the generator).

    ``saliency``: the config's (:func:`saliency_mode`); ``salient``: the salient object of a two-digit plan
    (:func:`salient_object`; None: none, as for two digits of one size level under ``saliency: size``). Under
    ``size`` the counts also hold ``two_digit_unequal`` (two-digit images with a salient digit; the
    ``two_digit_salient_first`` images are among them), ``two_digit_equal`` (the others) and
    ``two_digit_equal_object1_first`` (of those, the ones that describe object 1 first).
    """
    two = len(spec["digits"]) == 2
    mentions = spec["mentions"]
    counts = {
        "images": 1, "two_digit_images": int(two),
        "two_digit_both_described": int(two and len(mentions) == 2),
        "two_digit_salient_first": int(two and mentions[0]["index"] == salient),
        "described_digits": len(mentions),
        "mentioned_attributes": sum(len(m["attributes"]) for m in mentions),
        "negatives_recognition": sum(n.kind == "recognition" for n in negatives),
        "negatives_binding": sum(n.kind == "binding" for n in negatives),
    }
    if saliency == "size":
        counts["two_digit_unequal"] = int(two and salient is not None)
        counts["two_digit_equal"] = int(two and salient is None)
        counts["two_digit_equal_object1_first"] = int(two and salient is None and mentions[0]["index"] == 1)
    for m in mentions:
        for a in m["attributes"]:
            counts[f"mentions/{a}"] = counts.get(f"mentions/{a}", 0) + 1
    for d in spec["digits"]:
        counts[f"digits/{d['digit']}"] = counts.get(f"digits/{d['digit']}", 0) + 1
        for a, v in d["attributes"].items():
            counts[f"values/{a}/{v}"] = counts.get(f"values/{a}/{v}", 0) + 1
    return counts
