"""A ``bindscope train`` run folder: its files, its record (``run.json``) and its claim
(:mod:`bindscope.io.claim`, kind ``train-run``).

The folder's claim names the run by :func:`run_id`, the sha256 of the run's identity and its training data's
``config_sha256`` (not of the whole config: ``--device``, ``--threads``, the logging and checkpoint intervals
may change between an interrupted and a resumed command). The claim decides: a new or empty folder (a stale
lock file of a ``kill -9`` is taken over) is started; the same run resumes (or, finished, only reports its
result); another train run is replaced only with ``overwrite`` and under the lock; anything else is refused and
nothing in it is deleted. The claim files are the marker, ``run.json`` and ``vocab.json``: a run that fails
before its first checkpoint leaves no claimed folder, so the corrected command starts afresh.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from bindscope.io.atomic import write_text_atomic
from bindscope.io.canonical import canonical_json
from bindscope.io.claim import OutputClaim, OutputKind, claim_output, inspect_output
from bindscope.io.ownership import resolve_output, write_marker
from bindscope.training.checkpoint import RUN
from bindscope.training.model import WORD_SPECIALS

VOCAB = "vocab.json"
LOG = "log.jsonl"
RESULT = "result.json"

TRAIN_RUN = OutputKind("train-run", "madman train run", identity="identity", claim_files=(RUN, VOCAB),
                       finished=lambda folder, run_id: (folder / RESULT).is_file())
"""The claim kind of a run folder: finished once ``result.json`` is written."""


def run_id(record: dict) -> str:
    """The hex sha256 naming a run: of its ``identity`` and ``data_config_sha256`` (entries of ``record``, the
    content of ``run.json``)."""
    named = {key: record[key] for key in ("identity", "data_config_sha256")}
    return hashlib.sha256(canonical_json(named).encode()).hexdigest()


def _recorded(folder: Path) -> dict:
    """The folder's ``run.json`` as a dict ({} when missing or unreadable)."""
    try:
        record = json.loads((folder / RUN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def claim_run_folder(out, record: dict, overwrite: bool) -> OutputClaim:
    """The claim (not entered: nothing written yet) of the run folder ``out`` for the run ``record``.

    A folder of the same run marked by an earlier bindscope, whose marker named the run by the sha256 of its whole
    record, is marked with :func:`run_id` first (its ``run.json`` says it is this run). The claim's identity words
    name the identity entries that differ from a folder's other run (for the message refusing it).

    Raises:
        BadInput: the folder is not usable for this run (see :func:`bindscope.io.claim.claim_output`).
    """
    path, name = resolve_output(out), run_id(record)
    state = inspect_output(path, TRAIN_RUN)
    kind = TRAIN_RUN
    if state.holds == "ours" and state.run_id != name:
        old = _recorded(path)
        if run_id({"identity": old.get("identity"), "data_config_sha256": old.get("data_config_sha256")}) == name:
            write_marker(path, TRAIN_RUN.kind, name)
        else:
            ours, theirs = record["identity"], old.get("identity") if isinstance(old.get("identity"), dict) else {}
            changed = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))
            changed += ["training data"] if old.get("data_config_sha256") != record["data_config_sha256"] else []
            kind = replace(TRAIN_RUN, identity=", ".join(changed) or "identity")
    return claim_output(path, kind, name, overwrite=overwrite)


def write_run_files(folder: Path, record: dict, model) -> None:
    """Write the claim files of a new run: ``vocab.json`` (word tokenizer runs) and ``run.json`` (``record``)."""
    if model.tokenizer == "word":
        write_text_atomic(folder / VOCAB, canonical_json({
            "tokenizer": "word", "words": list(model.vocabulary), "special": dict(zip(WORD_SPECIALS, range(3))),
            "end": model.vocab_size - 1}))
    write_text_atomic(folder / RUN, canonical_json(record))
