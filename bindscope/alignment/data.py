"""What the alignment tools read from a dataset split: captions, objects, negatives, described attributes,
and embeddings through an :class:`~bindscope.encoders.interface.EncoderAdapter`.

Reading tables touches no image; images are read shard by shard only when image embeddings are needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bindscope.encoders.interface import l2_normalise
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.format.records import Negative, ObjectRecord


@dataclass
class SplitTable:
    """The non-pixel content of one split, one entry per sample (index = position in the split).

    Attributes:
        generator: the name of the generator that made the dataset.
        split: split name.
        attributes: the dataset's object attribute names (manifest ``object_attributes``).
        captions: caption per sample.
        objects: :class:`ObjectRecord` list per sample.
        negatives: :class:`Negative` list per sample (stored negatives, or swaps built by
            :func:`build_binding_swaps` where the dataset stores none).
        described: per sample, ``{object index: set of attribute names the caption gives for it}``.
        composed: the attributes written into recomposed captions (:func:`compose_caption`), or ``[]`` when
            the stored captions are used.
        sample_of: row -> sample index in the split when a row is one of several captions of a sample
            (:func:`caption_rows`); empty when row i is sample i.
    """

    generator: str
    split: str
    attributes: list[str]
    captions: list[str] = field(default_factory=list)
    objects: list[list[ObjectRecord]] = field(default_factory=list)
    negatives: list[list[Negative]] = field(default_factory=list)
    described: list[dict[int, set[str]]] = field(default_factory=list)
    composed: list[str] = field(default_factory=list)
    sample_of: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.captions)

    def sample(self, row: int) -> int:
        """The split's sample index of row ``row``."""
        return self.sample_of[row] if self.sample_of else int(row)

    def triples(self, index: int) -> set[tuple[str, str, str]]:
        """The ``(category, attribute, value)`` combinations that sample ``index``'s caption describes."""
        by_index = {o.index: o for o in self.objects[index]}
        return {(by_index[k].category, a, by_index[k].attributes[a])
                for k, names in self.described[index].items() for a in names}


def _phrase_in(value: str, text: str) -> bool:
    return bool(value) and re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text) is not None


def caption_parser(dataset: Dataset) -> Callable | None:
    """The caption parser the dataset's generator class offers (``caption_parser(config)``, e.g. MADMAN's
    :func:`~bindscope.generators.madman.captions.parse_caption` bound to the manifest's value sets), or None when
    it offers none (or the generator is not installed)."""
    from bindscope.build.registry import generator_class

    try:
        cls = generator_class(dataset.generator)
    except BadInput:
        return None
    make = getattr(cls, "caption_parser", None)
    return make(dataset.manifest.get("config", {})) if make is not None else None


def described_attributes(caption: str, objects: list[ObjectRecord], attributes: list[str],
                         parser: Callable | None = None) -> dict[int, set[str]]:
    """Which attributes the caption gives for each mentioned object.

    With ``parser`` (the generator's, :func:`caption_parser`: e.g. MADMAN's, which returns one ``(digit,
    {attribute: value})`` pair per described digit in mention order) the parsed attributes are used. Otherwise
    the caption is cut at ``" and "`` into one part per mentioned object (mention order) and an attribute counts
    as described when its value occurs as a whole phrase in that object's part.

    Returns:
        ``{object index: set(attribute names)}`` for every object with ``mention_position > 0``.
    """
    mentioned = sorted((o for o in objects if o.mention_position > 0), key=lambda o: o.mention_position)
    if parser is not None:
        try:
            parsed = list(parser(caption))
        except Exception:  # a caption the parser does not know: fall back to the generic rule
            parsed = None
        if parsed is not None and len(parsed) == len(mentioned):
            out = {}
            for obj, item in zip(mentioned, parsed):
                values = item[1] if isinstance(item, (tuple, list)) else getattr(item, "attributes", {})
                out[obj.index] = {a for a in values if a in attributes}
            return out
    parts = caption.split(" and ")
    if len(parts) != len(mentioned):
        parts = [caption] * len(mentioned)
    return {o.index: {a for a in attributes if _phrase_in(o.attributes.get(a, ""), part)}
            for o, part in zip(mentioned, parts)}


def _replace_once(text: str, old: str, new: str) -> str | None:
    hits = list(re.finditer(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text))
    if len(hits) != 1:
        return None
    start, end = hits[0].span()
    return text[:start] + new + text[end:]


def build_binding_swaps(caption: str, objects: list[ObjectRecord], described: dict[int, set[str]],
                        attributes: list[str]) -> list[Negative]:
    """Attribute-swapped negatives built from the object table (for datasets that store none, e.g. ComCO).

    The caption is cut at ``" and "`` into one part per mentioned object (mention order). For each attribute
    and each pair of mentioned objects that both have it described with different values, the first object's
    value is replaced by the second's inside the first object's part and vice versa; each value must occur
    exactly once as a whole phrase in its part (else that pair is skipped). A swap that reproduces the
    caption, or only reorders its parts (two objects the caption describes alike but for the swapped values,
    ``"blue cube and red cube"`` -> ``"red cube and blue cube"``: the same scene), is never emitted.

    Returns:
        ``Negative(kind="binding", attribute=a, objects=(i, j), original="vi|vj", replacement="vj|vi")`` list.
    """
    out = []
    mentioned = sorted((o for o in objects if o.mention_position > 0), key=lambda o: o.mention_position)
    parts = caption.split(" and ")
    if len(parts) != len(mentioned):
        return out
    for a in attributes:
        for x in range(len(mentioned)):
            for y in range(x + 1, len(mentioned)):
                p, q = mentioned[x], mentioned[y]
                vp, vq = p.attributes.get(a, ""), q.attributes.get(a, "")
                if not vp or not vq or vp == vq or a not in described.get(p.index, ()) \
                        or a not in described.get(q.index, ()):
                    continue
                new_p, new_q = _replace_once(parts[x], vp, vq), _replace_once(parts[y], vq, vp)
                if new_p is None or new_q is None:
                    continue
                swapped_parts = list(parts)
                swapped_parts[x], swapped_parts[y] = new_p, new_q
                swapped = " and ".join(swapped_parts)
                if swapped != caption and sorted(swapped_parts) != sorted(parts):
                    out.append(Negative("binding", swapped, a, (p.index, q.index), f"{vp}|{vq}", f"{vq}|{vp}"))
    return out


def compose_caption(objects: list[ObjectRecord], attributes: list[str]) -> str:
    """A caption that gives ``attributes`` for every mentioned object, from the object table.

    Mentioned objects (mention order) are each written as their non-empty values of ``attributes`` (in the
    given order) followed by the category name, joined with ``" and "``: e.g. ``"large pizza and small apple"``.
    Used for datasets whose captions name objects without attributes (ComCO/SimCO), so that attribute
    binding can be probed and swapped.
    """
    mentioned = sorted((o for o in objects if o.mention_position > 0), key=lambda o: o.mention_position)
    return " and ".join(" ".join([o.attributes[a] for a in attributes if o.attributes.get(a, "")] + [o.category])
                        for o in mentioned)


def varying_attributes(objects_per_sample: list[list[ObjectRecord]], attributes: list[str]) -> list[str]:
    """The attributes whose value differs between two objects of one category somewhere in the split
    (per-category constants such as ComCO's ``size_class`` are excluded), in ``attributes`` order."""
    seen: dict[tuple[str, str], set[str]] = {}
    for objects in objects_per_sample:
        for o in objects:
            for a in attributes:
                if o.attributes.get(a, ""):
                    seen.setdefault((a, o.category), set()).add(o.attributes[a])
    return [a for a in attributes if any(len(v) > 1 for (name, _), v in seen.items() if name == a)]


def load_table(dataset: Dataset, split: str, build_swaps: bool = True, compose="auto") -> SplitTable:
    """Read captions, objects, negatives and described attributes of ``split`` (no pixels).

    Args:
        dataset: an open :class:`~bindscope.format.reader.Dataset`.
        split: split name (DatasetError naming the available ones if absent).
        build_swaps: for samples without any stored ``"binding"`` negative, add the swaps of
            :func:`build_binding_swaps`.
        compose: ``"auto"``: when no caption of the split gives any attribute (ComCO/SimCO captions are bare
            names), captions are recomposed with :func:`compose_caption` from the attributes that vary within a
            category (:func:`varying_attributes`; ComCO: ``size``) and the stored negatives, which belong to
            the stored captions, are dropped; a list of attribute names forces that composition; None or
            ``[]`` keeps the stored captions.

    Raises:
        BadInput: ``compose`` names an attribute the dataset does not have.
    """
    part = dataset.split(split)
    table = SplitTable(dataset.generator, split, list(dataset.attribute_names))
    parser = caption_parser(dataset)
    stored = []
    for reader in part.shards():
        for local in range(reader.count):
            caption, objects = reader.captions[local], reader.objects(local)
            stored.append((caption, objects, reader.negatives(local),
                           described_attributes(caption, objects, table.attributes, parser)))
    if compose == "auto":
        compose = [] if any(any(d.values()) for *_, d in stored) else \
            varying_attributes([objs for _, objs, _, _ in stored], table.attributes)
    for a in compose or []:
        if a not in table.attributes:
            raise BadInput(f"caption attribute {a!r}: the dataset has {', '.join(table.attributes)}")
    table.composed = list(compose or [])
    for caption, objects, negatives, described in stored:
        if table.composed:
            caption = compose_caption(objects, table.composed)
            negatives = []
            described = {o.index: {a for a in table.composed if o.attributes.get(a, "")}
                         for o in objects if o.mention_position > 0}
        if build_swaps and not any(n.kind == "binding" for n in negatives):
            negatives = negatives + build_binding_swaps(caption, objects, described, table.attributes)
        table.captions.append(caption)
        table.objects.append(objects)
        table.negatives.append(negatives)
        table.described.append(described)
    return table



def make_embedder(adapter, cache_dir: str | None = None, use_cache: bool = True, progress: bool = False):
    """An evaluation-module :class:`~bindscope.encoders.embedding_cache.Embedder` for ``adapter``.

    With ``use_cache`` the embeddings go through the on-disk
    :class:`~bindscope.encoders.embedding_cache.EmbeddingCache` under ``cache_dir`` (default
    :func:`~bindscope.encoders.embedding_cache.default_cache_dir`), so a rerun does not re-encode. ``progress``: tqdm
    bars on stderr while encoding.
    """
    from bindscope.encoders.embedding_cache import Embedder, open_cache

    return Embedder(adapter, open_cache(adapter, cache_dir, use_cache), progress=progress)


def encode_texts(embedder, texts: list[str], normalise: bool = True) -> np.ndarray:
    """``(len(texts), D)`` float32 text embeddings through an ``Embedder`` (each unique text once), unit-norm when
    ``normalise``, else as the embedder's adapter gives them."""
    if not texts:
        return np.zeros((0, embedder.adapter.embed_dim), np.float32)
    out = np.asarray(embedder.texts(list(texts)), np.float32)
    return l2_normalise(out) if normalise else out


def encode_split_images(embedder, dataset: Dataset, split: str, indices, normalise: bool = True) -> np.ndarray:
    """``(len(indices), D)`` float32 image embeddings of samples ``indices`` of ``split``, unit-norm when
    ``normalise``, else as the embedder's adapter gives them.

    Images are streamed from the shards through the ``Embedder`` (cached, each unique image once).

    Raises:
        BadInput: the adapter has no image tower.
    """
    adapter = embedder.adapter
    if not getattr(adapter, "supports_images", True):
        raise BadInput(f"model {adapter.name!r} is text-only: image probes, LABCLIP and the modality gap "
                       "need an image encoder")
    part = dataset.split(split)
    indices = np.asarray(indices, dtype=np.int64)
    if not len(indices):
        return np.zeros((0, adapter.embed_dim), np.float32)
    out = np.asarray(embedder.images(part[int(i)].image for i in indices), np.float32)
    return l2_normalise(out) if normalise else out


def dataset_identity(dataset) -> str:
    """A string naming a dataset exactly: its manifest's ``config_sha256`` when present, else its absolute path."""
    return dataset.manifest.get("config_sha256") or str(dataset.path.resolve())


def default_split(dataset) -> str:
    """``"test"`` (MADMAN's two-digit evaluation split), else ``"scenes"`` (ComCO), else the first split."""
    for name in ("test", "scenes"):
        if name in dataset.split_names:
            return name
    return dataset.split_names[0]


NEGATIVE_SOURCES = ("stored", "shuffled")
"""``negatives=`` of LABCLIP: the dataset's binding negatives (stored, or swaps built from the object table), or
captions with their nouns and adjectives shuffled (:func:`bindscope.text.negatives.shuffled_negative`)."""
TAGGERS = ("lexicon", "spacy")
SHUFFLED = "shuffled"
"""The ``attribute`` of a shuffled negative (its figures appear under this name in ``per_attribute``)."""


def caption_lexicon(dataset: Dataset, table: SplitTable) -> tuple[list[str], list[str]]:
    """The nouns and adjectives of a split's captions, for :func:`bindscope.text.negatives.lexicon_tagger`.

    * a split whose captions are recorded with their mention phrases (holding ``phrases``: a COCO import): nouns
      = every phrase of the COCO mention table (:mod:`bindscope.importers.mentions`,
      singular and plural, e.g. ``"man"``, ``"hot dog"``) of the categories in the split; adjectives =
      :data:`bindscope.text.negatives.COMMON_ADJECTIVES` (colour, size, age and material words: the importer
      knows no attribute words);
    * any other dataset: nouns = the category names of the split's objects; adjectives = the values of the
      attributes its captions describe (``described``; recomposed captions: the composed attributes), less any
      word that is also a noun.

    Returns:
        ``(nouns, adjectives)``, sorted lists of lower-case words and phrases.
    """
    from bindscope.text.negatives import COMMON_ADJECTIVES

    categories = {o.category for objects in table.objects for o in objects}
    if "phrases" in dataset.split(table.split).holds:
        from bindscope.importers.mentions import mention_table

        known = mention_table()
        nouns = {f.lower() for c in categories for f in known.get(c) or [c, c + "s"]}
        return sorted(nouns), sorted(set(COMMON_ADJECTIVES) - nouns)
    nouns = {c.lower() for c in categories}
    adjectives = set()
    for objects, described in zip(table.objects, table.described):
        for o in objects:
            adjectives.update(o.attributes[a].lower() for a in described.get(o.index, ()) if o.attributes.get(a))
    return sorted(nouns), sorted(adjectives - nouns)


def make_tagger(tagger: str, dataset: Dataset, table: SplitTable):
    """The caption tagger named ``tagger``: ``"lexicon"`` (:func:`caption_lexicon`) or ``"spacy"``.

    Raises:
        BadInput: an unknown name, or spaCy missing (with the install command).
    """
    from bindscope.text.negatives import lexicon_tagger, spacy_tagger

    if tagger not in TAGGERS:
        raise BadInput(f"tagger {tagger!r} is not allowed; allowed: {', '.join(TAGGERS)}", param="tagger")
    return spacy_tagger() if tagger == "spacy" else lexicon_tagger(*caption_lexicon(dataset, table))


def shuffle_negatives(table: SplitTable, tagger, seed: int) -> int:
    """Replace every sample's negatives by one shuffled caption (NegCLIP's noun/adjective shuffle), seeded by
    ``(seed, sample index)`` so that fitting and evaluation make the same one: a
    ``Negative("binding", text, attribute="shuffled")``, or none where the caption cannot change (one noun and
    at most one adjective). Returns the number of samples that got one."""
    from bindscope.text.negatives import shuffled_negative

    made = 0
    for i, caption in enumerate(table.captions):
        text = shuffled_negative(caption, (seed, i), tagger=tagger)
        table.negatives[i] = [] if text is None else [Negative("binding", text, SHUFFLED)]
        made += text is not None
    return made


MAX_CAPTIONS_PER_IMAGE = 5  # the LABCLIP authors' captions[0:5] of a COCO image


def caption_rows(dataset: Dataset, table: SplitTable, limit: int = MAX_CAPTIONS_PER_IMAGE) -> SplitTable:
    """``table`` with one row per (sample, caption): every caption a sample records in its spec (``spec["captions"]``
    of a COCO import, in the stored order, at most ``limit``), else the sample's caption. Objects and described
    attributes are repeated per row, negatives are empty (:func:`shuffle_negatives` makes them), ``sample_of`` maps
    each row to its sample."""
    part = dataset.split(table.split)
    out = SplitTable(table.generator, table.split, table.attributes, composed=table.composed)
    sample = 0
    for reader in part.shards():
        for local in range(reader.count):
            spec = reader.spec(local)
            recorded = spec.get("captions") if isinstance(spec, dict) else None
            texts = [c["text"] for c in recorded[:limit]] if isinstance(recorded, list) and recorded else \
                [table.captions[sample]]
            for text in texts:
                out.captions.append(text)
                out.objects.append(table.objects[sample])
                out.negatives.append([])
                out.described.append(table.described[sample])
                out.sample_of.append(sample)
            sample += 1
    return out


def labclip_table(dataset: Dataset, split: str, negatives: str | None = None, tagger: str = "lexicon",
                  seed: int = 0, captions: str = "first", caption_text: str = "as written") -> tuple[SplitTable, str]:
    """The split's table with the negatives LABCLIP fits on, and the source used.

    Args:
        negatives: ``"stored"`` (:func:`load_table`'s binding negatives), ``"shuffled"``
            (:func:`shuffle_negatives` with ``tagger`` and ``seed``), or None: stored where the split has any
            binding negative, else shuffled (a COCO import).
        tagger: ``"lexicon"`` or ``"spacy"`` (:func:`make_tagger`; shuffled negatives only).
        captions: ``"first"`` (one row per sample) or ``"all"`` (shuffled negatives: one row per caption a sample
            records, :func:`caption_rows`).
        caption_text: ``"as written"`` or ``"lower-cased"`` (shuffled negatives: every caption normalised by
            :func:`bindscope.text.negatives.aro_caption` before its negative is made).

    Raises:
        BadInput: an unknown ``negatives`` or ``tagger``, spaCy missing.
    """
    if negatives is not None and negatives not in NEGATIVE_SOURCES:
        raise BadInput(f"negatives {negatives!r} is not allowed; allowed: {', '.join(NEGATIVE_SOURCES)}",
                       param="negatives")
    if tagger not in TAGGERS:
        raise BadInput(f"tagger {tagger!r} is not allowed; allowed: {', '.join(TAGGERS)}", param="tagger")
    table = load_table(dataset, split, build_swaps=negatives != SHUFFLED)
    if negatives is None:
        negatives = "stored" if any(n.kind == "binding" for negs in table.negatives for n in negs) else SHUFFLED
    if negatives == SHUFFLED:
        if captions == "all":
            table = caption_rows(dataset, table)
        if caption_text == "lower-cased":
            from bindscope.text.negatives import aro_caption

            table.captions = [aro_caption(c) for c in table.captions]
        shuffle_negatives(table, make_tagger(tagger, dataset, table), seed)
    return table, negatives
