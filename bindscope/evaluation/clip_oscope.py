"""The statistics of the ComCO/SimCO authors' released scripts, computed as those scripts define them.

Source: the repository ``clip-oscope/clip-oscope`` (Abbasi et al., "CLIP Under the Microscope", CVPR 2025),
files ``Text_Encoder_Experiments/TOR_ComCO_CLIP.py`` (and its SimCO / NegCLIP twins, which differ only in the
name list, ``n`` and the weights) for TOR, ``Image_Encoder_Experiments/IOR.py`` for IOR and
``Image_Encoder_Experiments/Image_Text_Matching.py`` for the matching captions. bindscope's own protocol
(:mod:`bindscope.evaluation.comco`) differs on purpose (strict top-1 with ties counted as wrong, random caption
order); ``comco eval --protocol clip-oscope|both`` reports these figures instead of / beside it. Each statistic
in a result carries its definition string (:data:`DEFINITIONS`); docs/clip-oscope.md maps every line the
scripts print to its result key.

What the scripts do, per query (a caption for TOR, a scene image for IOR) with ``n`` objects:

- similarities ``s`` (C,) to the C candidates (TOR: text embeddings of the bare names; IOR: image embeddings of
  one reference image per class); ``order = numpy.argsort(s)`` (numpy's default sort, ascending);
  the **top-n list** = ``order[-n:]``, i.e. the n most similar candidates *in ascending order of similarity*
  (its first entry is the n-th most similar one); the **top-1** = ``numpy.argmax(s)`` (the first index on a
  tie). Ties are therefore broken by numpy, never counted as wrong.
- **top-n correct**: TOR: every name of the top-n list occurs as a *substring* of the caption string (so
  ``"car"`` counts as inside a caption naming ``"carrot"``); IOR: every name of the top-n list is one of the
  image's objects (exact list membership).
- **position k given a correct top-n**: among the queries with a correct top-n list, the share whose top-1
  equals the k-th object (exact string equality). When no query is correct the scripts report 0.
- **position k of the top-1, all queries** (TOR only): the same count divided by every caption. The script
  prints it under the same label as the conditional figure.
- **most similar among the present objects** (IOR only): the position j (0..n-1) whose object comes last in
  ``order``, i.e. the argmax restricted to the n objects present; share of images per position.
- per query, with ``relevant = set(objects)`` and ``retrieved = set(top-n list)``: precision
  ``|relevant & retrieved| / |retrieved|``, recall ``|relevant & retrieved| / |relevant|``, F1 ``2PR/(P+R)``
  (0 when P + R = 0); **P@k** ``|relevant & set(top-n list[:k])| / k`` and **R@k** ``... / |relevant|`` for
  k = 1..n (on the ascending top-n list); **AP** = sum over the hits of the top-n list (in its order) of
  ``hits so far / (index + 1)``, divided by ``|relevant|``; **NDCG** = DCG / IDCG with relevance 1 for a
  top-n entry among the objects (exact), ``DCG = sum rel_i / log2(i + 2)``, IDCG the DCG of the same
  relevances sorted descending (0 when IDCG = 0). These use exact names, not substrings. The means are over all
  queries; MAP is the mean AP, "Mean NDCG" the mean NDCG.

The scripts run one fixed ``n`` per call; here queries are grouped by their number of objects and every group
is reported with ``n`` = that number. Where bindscope has no file name, "the order in the file name" is
:func:`ordered_objects` (caption mention order by default). The scripts compute similarities under fp16
autocast; here they are products of the adapter's float32 embeddings, so near-ties may break differently.
"""

from __future__ import annotations

import os
from itertools import combinations
from math import comb
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.evaluation import PROTOCOLS
from bindscope.evaluation.stats import wilson_interval
from bindscope.format.records import OBJECT_ORDERS, ordered_objects  # noqa: F401 (part of this API)
from bindscope.generators.comco.registry import JOIN

REPOSITORY = "clip-oscope/clip-oscope"
TOR_SOURCE = "Text_Encoder_Experiments/TOR_ComCO_CLIP.py"
IOR_SOURCE = "Image_Encoder_Experiments/IOR.py"
MATCHING_SOURCE = "Image_Encoder_Experiments/Image_Text_Matching.py"
MAX_CAPTIONS = 1_000_000
"""Most captions ``--captions combinations`` or ``--captions FILE`` may hold (the sampled-caption limit)."""

DEFINITIONS = {
    "top_n_list": "the n candidates of highest cosine similarity, numpy.argsort(similarities)[-n:], listed in "
                  "ascending order of similarity (first entry = n-th most similar); numpy breaks ties",
    "top1": "numpy.argmax(similarities): the most similar candidate, the first one on a tie",
    "top_n_accuracy_tor": "share of captions whose every top-n name is a substring of the caption string "
                          "(so 'car' is inside a caption naming 'carrot')",
    "top_n_accuracy_ior": "share of images whose every top-n candidate is one of the image's objects (exact names)",
    "position_given_correct_top_n": "among queries with a correct top-n list, share whose top-1 equals the k-th "
                                    "object (exact name); 0 when no query is correct",
    "position_of_top1": "share of all captions whose top-1 equals the k-th object (exact name); the script "
                        "prints it under the same 'in Correct Top-n' label",
    "most_similar_among_present": "share of images whose k-th object comes last in numpy.argsort(similarities) "
                                  "among the image's n objects (the argmax restricted to the objects present)",
    "mean_precision": "mean over queries of |objects & top-n| / |top-n| (sets of exact names)",
    "mean_recall": "mean over queries of |objects & top-n| / |objects| (sets of exact names)",
    "mean_f1": "mean over queries of 2PR/(P+R), 0 where P+R = 0",
    "map": "mean over queries of AP: sum over top-n entries (ascending list order) that are objects of "
           "hits-so-far / (index + 1), divided by |objects|",
    "ndcg": "mean over queries of DCG/IDCG, relevance 1 for a top-n entry that is an object, DCG = sum rel_i / "
            "log2(i + 2) over the ascending top-n list, IDCG = DCG of the relevances sorted descending; 0 if "
            "IDCG = 0",
    "precision_at_k": "mean over queries of |objects & first k of the ascending top-n list| / k, k = 1..n",
    "recall_at_k": "mean over queries of |objects & first k of the ascending top-n list| / |objects|, k = 1..n",
}
"""The definition string stored beside each statistic of a clip-oscope block (see the module docstring)."""


# ------------------------------------------------------------------------------------------ captions and names
def combination_captions(names: list[str], objects: int) -> list[list[str]]:
    """Every ``itertools.combinations(names, objects)``, in its order (the authors' TOR caption set).

    Args:
        names: the name list, in the authors' list order. objects: objects per caption, 2..len(names).

    Returns:
        ``C(len(names), objects)`` lists of names; caption i is ``" and ".join(list i)``.

    Raises:
        BadInput: ``objects`` out of range, or more than :data:`MAX_CAPTIONS` combinations.
    """
    if not 2 <= objects <= len(names):
        raise BadInput(f"objects {objects} is not allowed with --captions combinations; allowed: 2..{len(names)} "
                       "(the number of names)", param="objects")
    total = comb(len(names), objects)
    if total > MAX_CAPTIONS:
        raise BadInput(f"objects {objects}: {len(names)} names give {total:,} combinations, more than the "
                       f"{MAX_CAPTIONS:,} allowed; use fewer objects or a shorter name list", param="objects")
    return [list(c) for c in combinations(names, objects)]


def read_caption_file(path: str | os.PathLike, names: list[str]) -> list[list[str]]:
    """Captions from a UTF-8 text file, one per line, objects separated by ``" and "`` (blank lines skipped).

    Args:
        path: the file. names: the candidate names; every object must be one of them.

    Returns:
        Per caption its objects in caption order (the caption text is ``" and ".join`` of them).

    Raises:
        BadInput: unreadable or empty file, more than :data:`MAX_CAPTIONS` lines, a line with fewer than two
            objects, an object named twice in a line, or an object that is not one of ``names`` (the message
            names the line).
    """
    text = str(path)
    try:
        lines = Path(text).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"captions {text!r}: not 'combinations' and not a readable caption file ({exc})",
                       param="captions") from None
    known = set(names)
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        objects = [part.strip() for part in line.strip().split(JOIN)]
        if len(objects) < 2:
            raise BadInput(f"captions {text!r} line {number}: {line.strip()!r} names fewer than 2 objects; write "
                           "objects separated by ' and '", param="captions")
        if len(set(objects)) < len(objects):
            raise BadInput(f"captions {text!r} line {number}: an object is named twice; name each once",
                           param="captions")
        unknown = [o for o in objects if o not in known]
        if unknown:
            raise BadInput(f"captions {text!r} line {number}: {unknown[0]!r} is not one of the {len(names)} names "
                           f"of --names (e.g. {', '.join(names[:5])})", param="captions")
        out.append(objects)
        if len(out) > MAX_CAPTIONS:
            raise BadInput(f"captions {text!r}: more than {MAX_CAPTIONS:,} captions", param="captions")
    if not out:
        raise BadInput(f"captions {text!r}: the file holds no caption; write one per line", param="captions")
    return out


def check_protocol(protocol: str) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`; BadInput naming it otherwise."""
    if protocol not in PROTOCOLS:
        raise BadInput(f"protocol {protocol!r} is not allowed; use {', '.join(PROTOCOLS)}", param="protocol")
    return protocol


# ------------------------------------------------------------------------------------------------ the statistics
def _share(count: int, total: int) -> dict:
    """A count statistic: value = count / total, 0.0 when total is 0 (the scripts' convention), Wilson ci95."""
    return {"value": count / total if total else 0.0, "count": int(count), "of": int(total),
            "ci95": wilson_interval(count, total)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _set_scores(actual: list[str], predicted: list[str]) -> tuple[float, float, float]:
    relevant, retrieved = set(actual), set(predicted)
    hits = len(relevant & retrieved)
    precision = hits / len(retrieved) if retrieved else 0.0
    recall = hits / len(relevant) if relevant else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def average_precision(actual: list[str], predicted: list[str]) -> float:
    """AP of a ranked list: sum over the entries of ``predicted`` found in ``actual`` of (hits so far) / (1-based
    index), divided by ``len(set(actual))``; 0.0 when ``actual`` is empty (``TOR_ComCO_CLIP.py``)."""
    relevant = set(actual)
    hits, score = 0, 0.0
    for i, name in enumerate(predicted):
        if name in relevant:
            hits += 1
            score += hits / (i + 1.0)
    return score / len(relevant) if relevant else 0.0


def ndcg(actual: list[str], predicted: list[str]) -> float:
    """NDCG of a ranked list with binary relevance (entry of ``predicted`` in ``actual``), normalised by the same
    relevances sorted descending; 0.0 when no entry is relevant (``TOR_ComCO_CLIP.py``)."""
    relevance = [1 if name in actual else 0 for name in predicted]

    def dcg(values):
        return sum(r / np.log2(i + 2) for i, r in enumerate(values))

    ideal = dcg(sorted(relevance, reverse=True))
    return float(dcg(relevance) / ideal) if ideal > 0 else 0.0


def oscope_statistics(similarities: np.ndarray, candidate_names: list[str], objects: list[list[str]],
                      kind: str, texts: list[str] | None = None, sample_ids: list[int] | None = None,
                      seed: int = 0) -> dict:
    """The authors' TOR or IOR statistics (see the module docstring), grouped by number of objects.

    Args:
        similarities: (N, C) float cosines of each query with each candidate.
        candidate_names: the C candidate names (distinct).
        objects: per query its object names, in position order (caption order for TOR; the file-name order,
            :func:`ordered_objects`, for IOR).
        kind: ``"tor"`` (substring containment test on ``texts``, the position-of-top-1 figure over all
            captions) or ``"ior"`` (exact membership test, the restricted-argmax figure).
        texts: TOR: the N caption strings the substring test reads.
        sample_ids: per query its sample (image); where some sample has several queries (the captions of a COCO
            image), every count statistic also gets ``ci95_cluster``, a 95% cluster bootstrap over samples
            (``seed``; :func:`~bindscope.evaluation.stats.cluster_bootstrap`), and ``clusters``.

    Returns:
        ``{"<n>": block}``; block = ``{"n", "num_queries", "top1_ties" (queries whose largest similarity is
        shared), "top_n_accuracy", "position_given_correct_top_n", "position_of_top1" (TOR) or
        "most_similar_among_present" (IOR), "mean_precision", "mean_recall", "mean_f1", "map", "ndcg",
        "precision_at_k", "recall_at_k"}``. Count statistics are ``{"value", "count", "of", "ci95"}`` (value in
        [0, 1]; per-position families hold ``{"definition", "positions": [{"position", ...}]}``), means
        ``{"value", "of", "definition"}``, ``@k`` families ``{"definition", "values": [{"k", "value"}]}``.

    Raises:
        BadInput: ``kind`` unknown, a shape mismatch, TOR without ``texts``, or an IOR object that is not a
            candidate (the script cannot rank it either).
    """
    if kind not in ("tor", "ior"):
        raise BadInput(f"kind {kind!r} is not allowed; use tor or ior", param="kind")
    sims = np.asarray(similarities)
    if sims.ndim != 2 or sims.shape != (len(objects), len(candidate_names)):
        raise BadInput(f"similarities of shape {sims.shape} do not match {len(objects)} queries x "
                       f"{len(candidate_names)} candidates")
    if kind == "tor" and (texts is None or len(texts) != len(objects)):
        raise BadInput("texts: TOR needs one caption string per query")
    index = {name: j for j, name in enumerate(candidate_names)}
    groups: dict[int, dict] = {}
    for q, names in enumerate(objects):
        n = len(names)
        g = groups.setdefault(n, {"queries": 0, "correct": 0, "ties": 0, "given": [0] * n, "all": [0] * n,
                                  "present": [0] * n, "p": [], "r": [], "f1": [], "ap": [], "ndcg": [],
                                  "p_at": [[] for _ in range(n)], "r_at": [[] for _ in range(n)], "each": []})
        row = sims[q]
        order = np.argsort(row)
        predicted = [candidate_names[i] for i in order[-n:]] if n else []
        top1 = candidate_names[int(np.argmax(row))]
        g["queries"] += 1
        g["ties"] += int((row == row.max()).sum() > 1)
        if kind == "tor":
            correct = all(name in texts[q] for name in predicted)
        else:
            correct = all(name in names for name in predicted)
        hit = next((k for k in range(n) if names[k] == top1), None)
        g["each"].append([q, correct, hit if correct and hit is not None else -1, -1 if hit is None else hit, -1])
        if correct:
            g["correct"] += 1
            if hit is not None:
                g["given"][hit] += 1
        if kind == "tor" and hit is not None:
            g["all"][hit] += 1
        if kind == "ior" and n:
            missing = [name for name in names if name not in index]
            if missing:
                raise BadInput(f"IOR object {missing[0]!r} is not among the {len(candidate_names)} reference "
                               "classes; every object needs a reference image")
            place = {int(c): p for p, c in enumerate(order)}
            g["each"][-1][4] = max(range(n), key=lambda j: place[index[names[j]]])
            g["present"][g["each"][-1][4]] += 1
        precision, recall, f1 = _set_scores(names, predicted)
        g["p"].append(precision)
        g["r"].append(recall)
        g["f1"].append(f1)
        g["ap"].append(average_precision(names, predicted))
        g["ndcg"].append(ndcg(names, predicted))
        relevant = set(names)
        for k in range(1, n + 1):
            found = len(relevant & set(predicted[:k]))
            g["p_at"][k - 1].append(found / k)
            g["r_at"][k - 1].append(found / len(relevant) if relevant else 0.0)
    out = {}
    for n in sorted(groups):
        g = groups[n]
        accuracy = DEFINITIONS["top_n_accuracy_tor" if kind == "tor" else "top_n_accuracy_ior"]
        block = {"n": n, "num_queries": g["queries"], "top1_ties": g["ties"],
                 "top_n_accuracy": {**_share(g["correct"], g["queries"]), "definition": accuracy},
                 "position_given_correct_top_n": {
                     "definition": DEFINITIONS["position_given_correct_top_n"],
                     "positions": [{"position": k + 1, **_share(c, g["correct"])} for k, c in enumerate(g["given"])]}}
        if kind == "tor":
            block["position_of_top1"] = {
                "definition": DEFINITIONS["position_of_top1"],
                "positions": [{"position": k + 1, **_share(c, g["queries"])} for k, c in enumerate(g["all"])]}
        else:
            block["most_similar_among_present"] = {
                "definition": DEFINITIONS["most_similar_among_present"],
                "positions": [{"position": k + 1, **_share(c, g["queries"])} for k, c in enumerate(g["present"])]}
        for key, values in (("mean_precision", g["p"]), ("mean_recall", g["r"]), ("mean_f1", g["f1"]),
                            ("map", g["ap"]), ("ndcg", g["ndcg"])):
            block[key] = {"value": _mean(values), "of": len(values), "definition": DEFINITIONS[key]}
        for key, lists in (("precision_at_k", g["p_at"]), ("recall_at_k", g["r_at"])):
            block[key] = {"definition": DEFINITIONS[key],
                          "values": [{"k": k + 1, "value": _mean(v)} for k, v in enumerate(lists)]}
        if sample_ids is not None and len(set(sample_ids)) < len(sample_ids):
            _cluster_intervals(block, np.asarray(g["each"], dtype=np.int64), np.asarray(sample_ids), seed)
        out[str(n)] = block
    return out


def _cluster_intervals(block: dict, each: np.ndarray, sample_ids: np.ndarray, seed: int) -> None:
    """Add ``ci95_cluster`` and ``clusters`` to the count statistics of one group: ``each`` holds per query
    ``(index, top-n correct, position given a correct top-n, position of the top-1, most similar present)``
    (positions 0-based, -1 for none)."""
    from bindscope.evaluation.stats import cluster_bootstrap

    units = sample_ids[each[:, 0]]
    ones, correct = np.ones(len(each)), each[:, 1].astype(np.float64)
    count = int(len(set(units.tolist())))

    def add(stat: dict, hits: np.ndarray, den: np.ndarray) -> None:
        stat["ci95_cluster"] = cluster_bootstrap(hits.astype(np.float64), den, units, seed=seed)
        stat["clusters"] = count

    add(block["top_n_accuracy"], correct, ones)
    for family, column, den in (("position_given_correct_top_n", 2, correct), ("position_of_top1", 3, ones),
                                ("most_similar_among_present", 4, ones)):
        for k, stat in enumerate(block.get(family, {}).get("positions", [])):
            add(stat, each[:, column] == k, den)


def oscope_block(similarities: np.ndarray, candidate_names: list[str], objects: list[list[str]], kind: str,
                 texts: list[str] | None = None, ordered_by: str = "", sample_ids: list[int] | None = None,
                 seed: int = 0) -> dict:
    """One ``metrics["clip_oscope"][kind]`` entry: where the definitions come from, the candidates, and
    :func:`oscope_statistics` under ``by_num_objects`` (``sample_ids`` and ``seed`` as there)."""
    return {"source": f"{REPOSITORY}: {TOR_SOURCE if kind == 'tor' else IOR_SOURCE}",
            "candidates": len(candidate_names), "ordered_by": ordered_by,
            "top_n_list": DEFINITIONS["top_n_list"], "top1": DEFINITIONS["top1"],
            "by_num_objects": oscope_statistics(similarities, candidate_names, objects, kind, texts, sample_ids,
                                                seed)}


def oscope_rows(similarities: np.ndarray, candidate_names: list[str], objects: list[list[str]], kind: str,
                texts: list[str] | None, sample_ids: list[int] | None, rows: list) -> None:
    """Append one per-query row ``{"task": "clip-oscope-<kind>", "sample", "objects", "top_n" (ascending, as
    the script lists it), "top_n_correct", "top1"}`` to ``rows``."""
    sims = np.asarray(similarities)
    for q, names in enumerate(objects):
        order = np.argsort(sims[q])
        predicted = [candidate_names[i] for i in order[-len(names):]] if names else []
        correct = all(p in texts[q] for p in predicted) if kind == "tor" else all(p in names for p in predicted)
        rows.append({"task": f"clip-oscope-{kind}", "sample": int(sample_ids[q]) if sample_ids is not None else q,
                     "objects": list(names), "top_n": predicted, "top_n_correct": bool(correct),
                     "top1": candidate_names[int(np.argmax(sims[q]))]})


# ------------------------------------------------------------------------------------------ matching captions
def matching_captions_at(names: list[str], absent: list[str], bias_position: int) -> dict[str, tuple[str, list[str]]]:
    """Both matching scenarios' captions with the biased object at a chosen position (``Image_Text_Matching.py``).

    Args:
        names: the scene's object names in file-name order (:func:`ordered_objects`), at least 2.
        absent: categories not in the scene, in reference-set order; one wrong caption each.
        bias_position: 1-based position of the biased object in ``names`` (1..len(names)).

    Returns:
        ``{"scenario_1": (correct, wrongs), "scenario_2": (correct, wrongs)}``. With b = the biased object and
        ``front`` = ``names`` with b swapped into the first place: scenario 1: correct = ``front``, wrong i =
        ``front`` with its first name replaced by ``absent[i]``; scenario 2: correct = ``names`` with b swapped
        into the last place, wrong i = ``front`` with its *last* name replaced by ``absent[i]`` (so the wrong
        caption keeps b first). Names joined with ``" and "``.

    Raises:
        BadInput: ``bias_position`` outside 1..len(names), or fewer than 2 names.
    """
    if len(names) < 2:
        raise BadInput(f"matching needs at least 2 objects, got {len(names)}")
    if not 1 <= bias_position <= len(names):
        raise BadInput(f"bias_position {bias_position} is not allowed for {len(names)} objects; use "
                       f"1..{len(names)}", param="bias_position")
    b = bias_position - 1

    def swapped(target):
        out = list(names)
        out[b], out[target] = out[target], out[b]
        return out

    front, back = swapped(0), swapped(len(names) - 1)
    return {"scenario_1": (JOIN.join(front), [JOIN.join([a] + front[1:]) for a in absent]),
            "scenario_2": (JOIN.join(back), [JOIN.join(front[:-1] + [a]) for a in absent])}


# ------------------------------------------------------------------------------------------------ the printout
def format_oscope(metrics: dict) -> list[str]:
    """The authors' printed lines for the clip-oscope blocks of ``metrics`` (one group per number of objects),
    each followed by nothing else; empty when there is none. Labels as in the scripts, except that the
    second TOR per-position family says ``(all captions)`` where the script repeats the first label."""
    lines: list[str] = []
    blocks = metrics.get("clip_oscope", {})
    for kind in ("tor", "ior"):
        if kind not in blocks:
            continue
        word = "Word" if kind == "tor" else "Object"
        lines.append(f"clip-oscope {kind.upper()} ({blocks[kind]['source']}), {blocks[kind]['candidates']} "
                     f"candidates, objects by {blocks[kind]['ordered_by']}")
        for n, g in blocks[kind]["by_num_objects"].items():
            lines.append(f"  {n} objects ({g['num_queries']} queries, {g['top1_ties']} with a tied top-1)")
            lines.append(f"  Top-{n} Accuracy: {g['top_n_accuracy']['value']:.4f}")
            for p in g["position_given_correct_top_n"]["positions"]:
                lines.append(f"  {word} {p['position']} Accuracy in Correct Top-{n}: {p['value']:.4f}")
            if kind == "tor":
                for p in g["position_of_top1"]["positions"]:
                    lines.append(f"  Word {p['position']} Accuracy in Correct Top-{n} (all captions): "
                                 f"{p['value']:.4f}")
            else:
                for p in g["most_similar_among_present"]["positions"]:
                    lines.append(f"  Object {p['position']} has most similarity between {n} objects: {p['value']}")
            lines.append(f"  Mean Precision: {g['mean_precision']['value']:.2f}")
            lines.append(f"  Mean Recall: {g['mean_recall']['value']:.2f}")
            lines.append(f"  Mean F1 Score: {g['mean_f1']['value']:.2f}")
            lines.append(f"  Mean Average Precision (MAP): {g['map']['value']:.2f}")
            lines.append(f"  Mean NDCG: {g['ndcg']['value']:.2f}")
            for p, r in zip(g["precision_at_k"]["values"], g["recall_at_k"]["values"]):
                lines.append(f"  Mean P@{p['k']}: {p['value']:.2f}, Mean R@{r['k']}: {r['value']:.2f}")
        lines.append("")
    return lines
