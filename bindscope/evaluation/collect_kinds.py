"""The result kinds ``bindscope collect`` reads, and the columns each contributes (with their definitions).

Every result file records its kind in its ``kind`` key (``caption-bias`` files written before that key existed:
``"analysis": "caption-bias"``); :data:`KINDS` maps each kind to the JSON Schema that validates it and to the
function that turns it into columns. A column is ``name -> figure`` with the figure
``{"value", "low", "high", "interval", "unit"}``: ``unit`` ``"%"`` (a share, in percent) or ``"distance"`` (the
LABCLIP modality gap, Euclidean, 0..2); ``interval`` ``"img"`` (95 % percentile cluster bootstrap over images),
``"prompt"`` (the same over prompts), ``"W"`` (95 % Wilson score interval) or ``""`` (the figure has none). Every column also has a definition (what
is counted, conditional or unconditional, macro or micro, the sampling unit), returned beside the figures.
"""

from __future__ import annotations

from bindscope.errors import BadInput
from bindscope.schemas import validate

INTERVALS = {"img": "95% percentile cluster bootstrap over images",
             "prompt": "95% percentile cluster bootstrap over prompts", "W": "95% Wilson score interval",
             "": "no interval"}


class Columns:
    """Figures and definitions of one result, in insertion order."""

    def __init__(self) -> None:
        self.figures: dict[str, dict] = {}
        self.definitions: dict[str, str] = {}

    def add(self, name: str, value, ci=None, interval: str = "W", definition: str = "", unit: str = "%") -> None:
        """Add column ``name``: ``value`` (a 0..1 share, or a distance with ``unit="distance"``), its 95%
        interval ``ci`` (``[low, high]`` or None) of kind ``interval`` (``"img"``/``"prompt"``/``"W"``), its
        definition."""
        scale = 100.0 if unit == "%" else 1.0
        self.figures[name] = {"value": None if value is None else scale * value,
                              "low": None if not ci else scale * ci[0], "high": None if not ci else scale * ci[1],
                              "interval": interval if ci else "", "unit": unit}
        self.definitions[name] = f"{definition}; {INTERVALS[interval if ci else '']}"

    def share(self, name: str, p: dict, definition: str) -> None:
        """A share block (``share``, ``ci95``, optional ``ci95_cluster``: several queries of one image): the
        cluster interval when present, else the Wilson one."""
        self.proportion(name, {"accuracy": p["share"], **p}, definition)

    def proportion(self, name: str, p: dict, definition: str) -> None:
        """A proportion block (``accuracy``, ``ci95``, optional ``ci95_cluster``): the cluster interval when
        present, else the Wilson one."""
        clustered = p.get("ci95_cluster") is not None
        self.add(name, p["accuracy"], p["ci95_cluster"] if clustered else p.get("ci95"),
                 "img" if clustered else "W", definition)


# ---------------------------------------------------------------- evaluation results (schema eval_result)

def task_columns(result: dict, c: Columns) -> None:
    """The columns of an evaluation result: those of each registered task of its kind
    (:attr:`bindscope.evaluation.tasks.registry.Task.columns`), in registration order."""
    from bindscope.evaluation.tasks.registry import tasks

    for task in tasks(result["kind"]):
        if task.columns is not None:
            task.columns(result, c)


def binding_columns(c: Columns, block: dict, prefix: str, where: str) -> None:
    """``<prefix>binding|binding_all|recognition/<attribute>``, ``.../macro``, ``.../micro`` of a recognition and
    binding block (:func:`bindscope.evaluation.madman.score_split`)."""
    texts = {"binding": "binding accuracy conditional on recognition (binding negatives counted only where both "
                        "objects pass every recognition negative of the attribute; the MADMAN paper's)",
             "binding_all": "binding accuracy, unconditional (every binding negative)",
             "recognition": "recognition accuracy (share of recognition negatives passed)"}
    for key, name in (("binding", "binding"), ("binding_unconditional", "binding_all"),
                      ("recognition", "recognition")):
        for attribute, p in block[key]["per_attribute"].items():
            c.proportion(f"{prefix}{name}/{attribute}", p, f"{where}{texts[name]}, attribute {attribute}")
        average = block[key]["average"]
        c.add(f"{prefix}{name}/macro", average["macro"], definition=f"{where}{texts[name]}, macro: unweighted mean "
              "over attributes")
        c.proportion(f"{prefix}{name}/micro", average["micro"], f"{where}{texts[name]}, micro: pooled over "
                     "attributes' negatives")


def position_columns(c: Columns, task: str, block: dict) -> None:
    """``<task>/<n>obj/pos<k>`` (conditional share) and ``.../uncond`` of a retrieval block (TOR, IOR, I2TOR,
    Claim 1: :func:`bindscope.evaluation.comco.retrieval_shares`); the interval is the bootstrap over images
    where an image has several queries (TOR on COCO), else Wilson's (one query per image or caption)."""
    for n, g in block["by_num_objects"].items():
        for p in g["positions"]:
            key, k = f"{task}/{n}obj/pos{p['position']}", p["position"]
            c.share(key, p["conditional"], (
                f"{task}, {n} objects: share of top-1 at position {k}, conditional on the top-1 being one of "
                "the query's objects (the paper's tables)"))
            c.share(f"{key}/uncond", p["unconditional"], (
                f"{task}, {n} objects: share of top-1 at position {k} among all queries (unconditional)"))


def oscope_columns(c: Columns, task: str, block: dict | None) -> None:
    """The ComCO authors' statistics of ``task`` (``--protocol clip-oscope|both``;
    :mod:`bindscope.evaluation.clip_oscope`), nothing when ``block`` is None."""
    for n, g in (block or {}).get("by_num_objects", {}).items():
        key, where = f"clip-oscope/{task}/{n}obj", f"clip-oscope {task}, {n} objects"
        c.proportion(f"{key}/top{n}", {"accuracy": g["top_n_accuracy"]["value"], **g["top_n_accuracy"]},
                     f"{where}: top-{n} accuracy (the authors' script)")
        families = (("position_given_correct_top_n", "pos{}", "position {} given a correct top-n"),
                    ("position_of_top1", "pos{}/all", "position {} of the top-1 over all captions"),
                    ("most_similar_among_present", "present{}", "most similar among the present objects at "
                                                                "position {}"))
        for family, name, text in families:
            for p in g.get(family, {}).get("positions", []):
                c.proportion(f"{key}/{name.format(p['position'])}", {"accuracy": p["value"], **p},
                             f"{where}: {text.format(p['position'])}")
        for field, name in (("mean_precision", "precision"), ("mean_recall", "recall"), ("mean_f1", "f1"),
                            ("map", "map"), ("ndcg", "ndcg")):
            c.add(f"{key}/{name}", g[field]["value"], definition=f"{where}: {field} (mean over queries)")
        for field, name in (("precision_at_k", "P@{}"), ("recall_at_k", "R@{}")):
            for v in g[field]["values"]:
                c.add(f"{key}/{name.format(v['k'])}", v["value"], definition=f"{where}: {field}, k = {v['k']}")


# ---------------------------------------------------------------- alignment results (schema alignment_result)

def probe(result: dict, c: Columns) -> None:
    """Linear probes (bindscope probe): test accuracy per modality and attribute, beside the baselines."""
    for modality, attributes in result["metrics"]["modalities"].items():
        for attribute, s in attributes.items():
            key, where = f"probe/{modality}/{attribute}", f"linear probe on {modality} embeddings, {attribute}"
            c.add(f"{key}/macro", s["accuracy"], definition=f"{where}: test accuracy, macro: mean over target "
                  "categories")
            c.add(f"{key}/micro", s["accuracy_micro"], definition=f"{where}: test accuracy, micro: pooled (sample, "
                  "target) test pairs")
            c.add(f"{key}/bag_of_words/macro", s["bag_of_words"], definition=f"{where}: bag-of-words probe "
                  "(value counts, no pairing), test accuracy, macro over target categories")
            if s.get("bag_of_words_micro") is not None:
                c.add(f"{key}/bag_of_words/micro", s["bag_of_words_micro"], definition=f"{where}: bag-of-words "
                      "probe, test accuracy, micro over test pairs")
            c.add(f"{key}/bag_of_words_bound", s["bag_of_words_bound"], definition=f"{where}: bag-of-words bound "
                  "(expected accuracy of guessing among the values present), mean over target categories")
            c.add(f"{key}/chance", s["chance"], definition=f"{where}: chance, mean of 1 / classes over targets")
            c.add(f"{key}/majority", s["majority"], definition=f"{where}: majority-class baseline, mean over "
                  "target categories")
            for m, p in s.get("by_object_count", {}).items():
                c.proportion(f"{key}/{m}obj", p, f"{where}: test accuracy with {m} objects in view, micro over "
                             "(sample, target) test pairs")


def conjunctive_search(result: dict, c: Columns) -> None:
    """Conjunctive search (bindscope probe --task conjunctive-search): presence-probe accuracy."""
    m = result["metrics"]
    target = " ".join([v for k, v in m["target"].items() if k != "category"] + [m["target"]["category"]])
    where = f"conjunctive search for a {target}"
    c.proportion("conjunctive-search/accuracy", m["accuracy"], f"{where}: presence-probe test accuracy over test "
                 "scenes")
    c.proportion("conjunctive-search/bag_of_words", m["bag_of_words"], f"{where}: bag-of-words probe test accuracy")
    c.add("conjunctive-search/chance", m["chance"], definition=f"{where}: chance (balanced present / absent)")
    for k, block in m["by_distractors"].items():
        c.proportion(f"conjunctive-search/{k}distractors", block["accuracy"],
                     f"{where}: presence-probe test accuracy in scenes with {k} distractors")
        c.proportion(f"conjunctive-search/{k}distractors/bag_of_words", block["bag_of_words"],
                     f"{where}: bag-of-words probe test accuracy in scenes with {k} distractors")


def labclip_eval(result: dict, c: Columns) -> None:
    """LABCLIP (bindscope labclip eval): binding, recognition and the modality gap before and after the map."""
    texts = {"binding": "binding accuracy conditional on recognition (MADMAN protocol; the report's "
                        "binding_given_recognition)",
             "binding_all": "binding accuracy, unconditional (LABCLIP's binding: every selected binding negative)",
             "recognition": "recognition accuracy (share of recognition negatives passed)"}
    for stage in ("before", "after"):
        report = result["metrics"][stage]
        where = f"LABCLIP, {'without' if stage == 'before' else 'with'} the map: "
        for key, name in (("binding_given_recognition", "binding"), ("binding", "binding_all"),
                          ("recognition", "recognition")):
            rates = report[key]
            prefix = f"labclip/{stage}/{name}"
            for attribute, p in rates["per_attribute"].items():
                c.add(f"{prefix}/{attribute}", p["accuracy"], p.get("ci95"),
                      definition=f"{where}{texts[name]}, attribute {attribute}")
            c.add(f"{prefix}/macro", rates["macro"], definition=f"{where}{texts[name]}, macro: mean over attributes")
            c.add(f"{prefix}/micro", rates["accuracy"], rates.get("ci95"),
                  definition=f"{where}{texts[name]}, micro: pooled negatives")
        c.add(f"labclip/{stage}/modality_gap", report["modality_gap"], unit="distance",
              definition=f"{where}modality gap: Euclidean distance of the mean L2-normalised image and caption "
                         "embeddings (0..2)")


# ---------------------------------------------------------------- madman audit, caption bias

def madman_audit(result: dict, c: Columns) -> None:
    """Legibility audit (madman audit): the oracle CNN's test accuracy per attribute and for the digit."""
    def block(prefix: str, name: str, figures: dict, where: str) -> None:
        c.add(f"{prefix}{name}", figures["accuracy"], figures["ci95"], definition=f"{where}oracle CNN test accuracy "
              f"for {name}, micro over test objects (Wilson over objects)")
        if prefix == "audit/":
            c.add(f"{prefix}{name}/macro", figures["macro"], definition=f"{where}oracle CNN accuracy for {name}, "
                  "macro: mean of the per-class accuracies")

    for size, group in [("", result)] + [(f"{s}/", g) for s, g in result["by_size"].items()]:
        where = f"objects of size {size[:-1]}: " if size else ""
        for name, figures in group["attributes"].items():
            if figures.get("trained"):
                block(f"audit/{size}", name, figures, where)
        block(f"audit/{size}", "digit", group["digit"], where)


def caption_bias(result: dict, c: Columns) -> None:
    """Caption bias (bindscope caption-bias): where captions mention the image's largest object."""
    def positions(prefix: str, block: dict, where: str) -> None:
        for key, p in block.items():
            text = "not mentioned" if key == "not_mentioned" else f"mentioned at position {key}"
            c.add(f"{prefix}/{'not_mentioned' if key == 'not_mentioned' else 'pos' + key}", p["share"],
                  p["ci95_cluster"], "img", f"caption bias: share of {where} whose largest object is {text} "
                  "(unconditional; unit: caption, clustered by image)")

    positions("caption-bias", result["positions"], "all captions")
    c.add("caption-bias/first_when_mentioned", result["largest_first_share_when_mentioned"],
          definition="caption bias: share of captions naming the largest object first, conditional on the "
                     "caption mentioning it")
    for m, block in result["by_num_mentioned"].items():
        positions(f"caption-bias/{m}mentioned", block["positions"], f"captions mentioning {m} objects")


def t2i_score(result: dict, c: Columns) -> None:
    """Text-to-image prompt order (comco t2i-score): presence of prompt objects by mention position, per scorer."""
    for name, scorer in result["scorers"].items():
        block, prefix = scorer["presence"], f"t2i/{name}"
        what = f"t2i ({name}): share of prompt objects shown in the image"

        def positions(where: str, figures: dict, scope: str) -> None:
            for k, p in figures.items():
                c.add(f"{where}/pos{k}", p["share"], p["ci95_cluster"], "prompt",
                      f"{what}, mentioned at position {k}{scope} (unit: object in one image, clustered by prompt)")
        c.add(f"{prefix}/all", block["all"]["share"], block["all"]["ci95_cluster"], "prompt",
              f"{what}, every mention (unit: object in one image, clustered by prompt)")
        positions(prefix, block["by_position"], "")
        for end in ("first", "last"):
            p = block["first_vs_last"][end]
            c.add(f"{prefix}/{end}", p["share"], p["ci95_cluster"], "prompt",
                  f"{what}, the {end}-mentioned object of prompts of 2 or more objects")
        for k, group in block["by_objects"].items():
            positions(f"{prefix}/{k}obj", group["by_position"], f", prompts of {k} objects")


# kind -> (schema, column function)
KINDS = {
    "madman-eval": ("eval_result", task_columns),
    "comco-eval": ("eval_result", task_columns),
    "comco-attention": ("eval_result", task_columns),
    "bench": ("eval_result", task_columns),
    "probe": ("alignment_result", probe),
    "conjunctive-search": ("alignment_result", conjunctive_search),
    "labclip-eval": ("alignment_result", labclip_eval),
    "madman-audit": ("audit_result", madman_audit),
    "caption-bias": ("caption_bias_result", caption_bias),
    "t2i-score": ("t2i_result", t2i_score),
}


def result_kind(result: object) -> str | None:
    """The kind a parsed result file records (``kind``; ``analysis`` for caption-bias files written before the
    ``kind`` key), or None when it records none."""
    if not isinstance(result, dict):
        return None
    kind = result.get("kind")
    if kind is None and result.get("analysis") == "caption-bias":
        return "caption-bias"
    return kind if isinstance(kind, str) else None


def result_columns(result: dict) -> Columns:
    """The columns of one result validated by its kind's schema (:data:`KINDS`)."""
    c = Columns()
    KINDS[result_kind(result)][1](result, c)
    return c


def load_result(path) -> dict:
    """A result JSON of any kind of :data:`KINDS`, validated by that kind's schema.

    Raises:
        BadInput: naming the file: not JSON, no ``kind`` key, an unknown kind (the known ones listed), or the
            schema violation.
    """
    from bindscope.io.json_input import load_json

    result = load_json(path, "result")
    kind = result_kind(result)
    where = f"result {str(path)!r}"
    if kind is None:
        raise BadInput(f"{where} records no kind (no 'kind' key); bindscope collect reads results of kind "
                       f"{', '.join(KINDS)}")
    if kind not in KINDS:
        raise BadInput(f"{where}: kind {kind!r} is not a result bindscope collect reads; known kinds: "
                       f"{', '.join(KINDS)}")
    validate(result, KINDS[kind][0], f"{where} (kind {kind}, schema {KINDS[kind][0]})")
    return result
