"""The prompts of a text-to-image prompt-order experiment: object sets, their orders and their texts (pure, seeded).

An experiment draws ``n`` *object sets* from a list of category names (:func:`plan_prompts`): set ``i`` holds
``k_i`` distinct names, ``k_i`` cycling through the requested counts (``min + i % (max - min + 1)``, so each count
gets the same share of sets up to one, as ``comco render`` does), drawn uniformly without replacement in a random
order by the numpy generator seeded with ``(seed, i)`` alone. Each set gives one prompt per *order variant*
(:data:`ORDERS`):

- ``rotations``: every cyclic rotation of the drawn order (``k`` prompts): each object is named at every position
  once, so an object's identity cannot explain a difference between positions;
- ``reverse``: the drawn order and its reverse (2 prompts): first and last swap;
- ``random``: the drawn order alone (1 prompt).

The prompt text is ``template`` with ``{objects}`` replaced by the names joined with ``" and "``, each after its
indefinite article (``"a"``, or ``"an"`` before a name starting with a vowel letter) unless ``articles`` is off:
``"a photo of {objects}"`` with dog, apple -> ``"a photo of a dog and an apple"`` (the ComCO captions' form, with
articles). Image ``j`` of every prompt of set ``i`` starts from the same initial noise (:func:`latent_seed` of
``(seed, i, j)``), so the order variants of a set differ in the prompt's order alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from bindscope.errors import BadInput
from bindscope.generators.comco.registry import JOIN

ORDERS = {
    "rotations": "every cyclic rotation of the set's seeded random order: each object named at each position once "
                 "(k prompts for k objects)",
    "reverse": "the set's seeded random order and its reverse (2 prompts: first and last swap)",
    "random": "the set's seeded random order (1 prompt)",
}
"""Order variants of an object set -> what they are."""
DEFAULT_TEMPLATE = "a photo of {objects}"
PLACEHOLDER = "{objects}"
MIN_OBJECTS, MAX_OBJECTS = 2, 5
MAX_SETS = 100_000
VOWELS = "aeiou"


@dataclass(frozen=True)
class Prompt:
    """One prompt.

    Attributes:
        index: 0-based prompt number (prompts of set 0 first, in variant order).
        set_index: the object set it names (0-based). variant: its order variant within the set (0-based;
            ``rotations``: the rotation, ``reverse``: 0 drawn order, 1 reversed).
        objects: the category names in mention order. category_ids: their positions in the name list.
        text: the prompt given to the pipeline.
    """

    index: int
    set_index: int
    variant: int
    objects: tuple[str, ...]
    category_ids: tuple[int, ...]
    text: str


def check_template(template) -> str:
    """``template`` if it is a string holding ``{objects}`` exactly once (and no other braces); BadInput
    otherwise."""
    if not isinstance(template, str) or template.count(PLACEHOLDER) != 1 \
            or template.replace(PLACEHOLDER, "").count("{") or template.replace(PLACEHOLDER, "").count("}"):
        raise BadInput(f"template {template!r} is not allowed; give a text holding {PLACEHOLDER} once, e.g. "
                       f"{DEFAULT_TEMPLATE!r}", param="template")
    return template


def article(name: str) -> str:
    """The indefinite article before ``name``: ``"an"`` when it starts with a vowel letter (a, e, i, o, u), else
    ``"a"`` (a letter rule: "an umbrella", "a person", "an hour" is missed)."""
    return "an" if name[:1].lower() in VOWELS else "a"


def prompt_text(template: str, names: list[str] | tuple[str, ...], articles: bool = True) -> str:
    """The prompt of ``names`` in this order (see the module docstring)."""
    parts = [f"{article(n)} {n}" if articles else n for n in names]
    return template.replace(PLACEHOLDER, JOIN.join(parts))


def order_variants(order: str, drawn: list[int]) -> list[list[int]]:
    """The orders of one object set under ``order`` (:data:`ORDERS`), from its drawn order ``drawn``."""
    if order == "rotations":
        return [drawn[r:] + drawn[:r] for r in range(len(drawn))]
    if order == "reverse":
        return [drawn, drawn[::-1]]
    return [drawn]


def check_prompt_settings(names: list[str] | None, objects: tuple[int, int], n: int, order: str,
                          param: str = "names") -> None:
    """BadInput for a setting no prompt set can satisfy: counts outside 2..5, ``n`` outside 1..100,000, an unknown
    ``order``, or fewer names than the largest count (``param`` names the name list in the message; ``names`` None:
    not checked yet)."""
    low, high = objects
    if not MIN_OBJECTS <= low <= high <= MAX_OBJECTS:
        raise BadInput(f"objects {low}-{high} is not allowed; prompts name {MIN_OBJECTS}..{MAX_OBJECTS} objects "
                       "(a count like 3 or a range like 2-5)", param="objects")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SETS:
        raise BadInput(f"n {n!r} is not allowed; use 1..{MAX_SETS:,} object sets", param="n")
    if order not in ORDERS:
        raise BadInput(f"order {order!r} is not allowed; use one of {', '.join(ORDERS)}", param="order")
    if names is not None and len(names) < high:
        raise BadInput(f"{param}: {len(names)} name(s) is too small a prompt set for objects {low}-{high}: a prompt "
                       f"names up to {high} distinct objects; give at least {high} names", param=param)


@dataclass(frozen=True)
class PromptSettings:
    """What the prompts of a ``comco t2i`` run name, and how (:func:`plan_prompts` but the seed); the command's
    options of them are generated from the fields (:func:`bindscope.cli.options.settings_options`).

    Attributes:
        names: the category names: ``comco72``, ``simco18``, ``coco`` (80 COCO categories), an asset folder or a
            text file with one name per line (:func:`bindscope.generators.comco.registry.read_names`; read by the
            call, which checks there are enough for the counts).
        objects: objects per prompt, a count (``"3"``) or a range (``"2-5"``) of counts 2..5, or a ``(min, max)``
            pair. n: object sets, 1..100,000; each gives one prompt per order variant. order: :data:`ORDERS`.
        template: the prompt around ``{objects}`` (None: :data:`DEFAULT_TEMPLATE`). articles: "a" / "an" before
            each name.

    Raises:
        BadInput: a value no prompt set can satisfy (``param`` names the field), at construction.
    """

    names: str | os.PathLike = field(default="comco72", metadata={
        "flag": "--names", "help": "Category names: comco72 | simco18 | coco | asset folder | file with one name per "
                                   "line."})
    objects: str | tuple[int, int] = field(default="2-5", metadata={
        "flag": "--objects", "help": "Objects per prompt: a count (3) or a range (2-5), counts 2..5, spread evenly "
                                     "over the object sets."})
    n: int = field(default=100, metadata={
        "flag": "-n", "range": (1, MAX_SETS), "help": "Object sets to draw; each gives one prompt per --order "
                                                      "variant."})
    order: str = field(default="rotations", metadata={
        "flag": "--order", "choice": tuple(ORDERS), "help": "; ".join(f"{k}: {v}" for k, v in ORDERS.items()) + "."})
    template: str = field(default=DEFAULT_TEMPLATE, metadata={
        "flag": "--template", "help": "Prompt text around {objects} (the names joined with ' and ')."})
    articles: bool = field(default=True, metadata={
        "flag": "--articles/--no-articles", "help": "Put 'a' / 'an' before each name.", "show_default": True})

    def __post_init__(self):
        if not isinstance(self.articles, bool):
            raise BadInput(f"articles {self.articles!r} is not allowed; use True or False", param="articles")
        object.__setattr__(self, "template", check_template(DEFAULT_TEMPLATE if self.template is None
                                                            else self.template))
        check_prompt_settings(None, self.counts(), self.n, self.order)

    def counts(self) -> tuple[int, int]:
        """``objects`` as ``(min, max)``."""
        from bindscope.generators.comco.config import parse_objects  # numpy: not when the commands are imported

        return parse_objects(self.objects) if isinstance(self.objects, str) else tuple(self.objects)


def plan_prompts(names: list[str], objects: tuple[int, int], n: int, order: str, seed: int,
                 template: str = DEFAULT_TEMPLATE, articles: bool = True) -> list[Prompt]:
    """Every prompt of the experiment, in order (see the module docstring).

    Args:
        names: the category names (distinct). objects: ``(min, max)`` objects per prompt, 2..5.
        n: object sets, 1..100,000. order: a key of :data:`ORDERS`. seed: >= 0.
        template: the prompt around ``{objects}``. articles: put "a" / "an" before each name.

    Raises:
        BadInput: see :func:`check_prompt_settings` and :func:`check_template`.
    """
    import numpy as np

    check_prompt_settings(names, objects, n, order)
    check_template(template)
    counts = list(range(objects[0], objects[1] + 1))
    prompts: list[Prompt] = []
    for i in range(n):
        k = counts[i % len(counts)]
        drawn = [int(j) for j in np.random.default_rng([seed, i]).choice(len(names), size=k, replace=False)]
        for variant, ids in enumerate(order_variants(order, drawn)):
            chosen = tuple(names[j] for j in ids)
            prompts.append(Prompt(len(prompts), i, variant, chosen, tuple(ids), prompt_text(template, chosen,
                                                                                              articles)))
    return prompts


def latent_seed(seed: int, set_index: int, image: int) -> int:
    """The torch seed (0..2**63-1) of image ``image`` of every prompt of object set ``set_index``: a pure function
    of the three numbers (numpy ``SeedSequence``)."""
    import numpy as np

    low, high = np.random.SeedSequence([seed, set_index, image]).generate_state(2, dtype=np.uint32)
    return (int(high) << 31) ^ int(low)
