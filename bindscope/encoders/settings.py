"""The one encoder settings object: which encoder to load, how it runs, and its embedding cache.

Every library call that loads an encoder (:func:`bindscope.evaluate`, :func:`bindscope.probe`,
``bindscope.labclip.fit`` / ``eval``, :func:`bindscope.encoders.registry.load_encoder`, ...) takes an
:class:`EncoderSettings`, and every command that loads one makes it with the one click decorator
:func:`bindscope.cli.options.encoder_settings`, whose options are generated from the fields below (each field's
``metadata`` holds its flag and help text). Every value is checked here, in :meth:`EncoderSettings.__post_init__`,
with one :class:`~bindscope.errors.BadInput` naming the field, the value and what is allowed.

Example::

    from bindscope import EncoderSettings
    encoder = EncoderSettings("ViT-B-32", pretrained="none", device="cpu", use_cache=False)
    bindscope.evaluate("data/madman", encoder)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace

from bindscope.errors import (DEVICE_GRAMMAR, PRECISIONS, BadInput, check_device, check_int, check_precision,
                              check_utf8_path)
from bindscope.limits import MAX_BATCH

POOLINGS = ("cls", "mean")
"""Pooling rules of ``hf:`` text encoders (:mod:`bindscope.encoders.hf_text`)."""
MAX_BATCH_SIZE = MAX_BATCH
"""Largest ``batch_size``: 65,536 images of 224 px are 9.9 GB as uint8 before preprocessing."""
MIN_CONTEXT_LENGTH = 2
"""Smallest ``context_length``: the start and end tokens."""
MAX_CONTEXT_LENGTH = 4096
"""Largest ``context_length`` (the largest text context of the CLIPs ``bindscope train`` builds)."""


def check_pooling(pooling) -> str:
    """``pooling`` if it is one of :data:`POOLINGS`; BadInput naming them otherwise."""
    if pooling not in POOLINGS:
        raise BadInput(f"pooling {pooling!r} is not allowed; use one of {', '.join(POOLINGS)}", param="pooling")
    return pooling


def _option(flag: str, help: str, **more) -> dict:
    return {"flag": flag, "help": help, **more}


@dataclass(frozen=True)
class EncoderSettings:
    """Which encoder, how it runs, and its embedding cache (frozen; :meth:`replace` gives a changed copy).

    Attributes:
        model: open_clip name (``ViT-B-32``, ``RN50``, ...), ``hf-hub:<org>/<repo>``, ``hf-vlm:<repo id or
            folder>`` (a ``transformers`` CLIP / SigLIP model), ``hf:<repo id or folder>`` (a ``transformers`` text
            encoder), ``sentence-transformers/<name>`` or a sentence-transformers folder
            (text only), a checkpoint file or run folder of ``bindscope train``, an open_clip model config
            ``.json`` (with ``pretrained`` its checkpoint), or a kind registered with
            :func:`bindscope.encoders.registry.register_encoder` (the registry's module docstring lists the
            order in which they are tried). A non-empty string. The eval commands also take a comma-separated
            list, a list file or a glob here (:mod:`bindscope.evaluation.model_list`). A path is kept as its
            string.
        pretrained: open_clip pretrained tag (``openai``, ``laion2b_s34b_b79k``, ...), ``"none"`` (random
            weights, seed 0), a local checkpoint file or ``hf-hub:<org>/<repo>``; None: ``openai`` where listed,
            else the model's first listed tag. Ignored by text-only kinds and run folders.
        device: ``auto`` (CUDA when torch sees a GPU, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``fp32``, ``bf16`` or ``fp16``: the encoder's weights and inputs (embeddings are float32).
        batch_size: inputs per forward pass, 1..65,536; None: 64 on a CPU, 512 on CUDA
            (:func:`bindscope.encoders.interface.default_batch_size`).
        pooling: ``cls`` or ``mean``: how an ``hf:`` text encoder pools its last hidden states (SimCSE: ``cls``;
            sentence-transformers-style models: ``mean``); other kinds pool as they were trained and ignore it.
        context_length: None (the model's own, e.g. 77 tokens for CLIP) or 2..4,096 tokens, at most the model's
            own: texts are cut to this many tokens, start and end tokens included (the result records
            ``context_length`` and how many texts were cut). For ``hf:``, sentence-transformers and open_clip
            models with CLIP's BPE tokenizer; other kinds refuse a number.
        cache_dir: embedding cache folder; None: ``$BINDSCOPE_CACHE/embeddings``, else
            ``$XDG_CACHE_HOME/bindscope/embeddings``, else ``~/.cache/bindscope/embeddings``
            (:func:`bindscope.encoders.embedding_cache.default_cache_dir`).
        use_cache: read and write the on-disk embedding cache (:mod:`bindscope.encoders.embedding_cache`).

    Raises:
        BadInput: any value outside the ranges above (``param`` names the field).
    """

    model: str = field(metadata=_option(
        "--model", "open_clip name (ViT-B-32, RN50, ...), hf-hub:<org>/<repo>, hf-vlm:<repo or folder> (a "
        "transformers CLIP / SigLIP), hf:<repo or folder> (a transformers text encoder, see --pooling), sentence-transformers/<name> (text only), a checkpoint file or run folder "
        "from `bindscope train`, or an open_clip model config .json (`bindscope export open-clip-config`) with "
        "--pretrained its checkpoint (open_clip_train's epoch_N.pt).", required=True))
    pretrained: str | None = field(default=None, metadata=_option(
        "--pretrained", "open_clip tag (openai, laion2b_s34b_b79k, ...), 'none' (random weights), a local "
        "checkpoint file or hf-hub:<org>/<repo>. Default: 'openai' where listed, else the model's first listed "
        "tag."))
    device: str = field(default="auto", metadata=_option(
        "--device", f"{DEVICE_GRAMMAR} (auto: CUDA when torch sees a GPU, else the CPU).", metavar="DEVICE"))
    precision: str = field(default="fp32", metadata=_option(
        "--precision", "Encoder weights and inputs in float32, bfloat16 or float16 (embeddings are float32).",
        choices=PRECISIONS))
    batch_size: int | None = field(default=None, metadata=_option(
        "--batch-size", "Inputs per forward pass [64 on a CPU, 512 on CUDA].", range=(1, MAX_BATCH_SIZE, "inputs per forward pass"),
        metavar="N"))
    pooling: str = field(default="cls", metadata=_option(
        "--pooling", "Pooling of hf:<model> text encoders (SimCSE: cls; sentence-transformers-style: mean); "
        "other models ignore it.", choices=POOLINGS))
    context_length: int | None = field(default=None, metadata=_option(
        "--context-length", "Cut texts to at most N tokens (start and end included), at most the model's own "
        "[the model's own, e.g. 77]; hf:, sentence-transformers and BPE open_clip models.",
        range=(MIN_CONTEXT_LENGTH, MAX_CONTEXT_LENGTH, "tokens"), metavar="N"))
    cache_dir: str | None = field(default=None, metadata=_option(
        "--cache-dir", "Embedding cache folder (default $BINDSCOPE_CACHE/embeddings, else "
        "$XDG_CACHE_HOME/bindscope/embeddings, else ~/.cache/bindscope/embeddings).", metavar="DIR"))
    use_cache: bool = field(default=True, metadata=_option(
        "--no-cache", "Do not read or write the on-disk embedding cache.", negated=True))

    def __post_init__(self):
        if not isinstance(self.model, (str, os.PathLike)) or not os.fspath(self.model).strip():
            raise BadInput(f"model {self.model!r} is not allowed; give a model name, a checkpoint or a folder",
                           param="model")
        check_utf8_path("model", self.model)
        object.__setattr__(self, "model", os.fspath(self.model))
        if self.pretrained is not None:
            if not isinstance(self.pretrained, (str, os.PathLike)) or not os.fspath(self.pretrained).strip():
                raise BadInput(f"pretrained {self.pretrained!r} is not allowed; give a tag, 'none', a checkpoint "
                               "file or hf-hub:<org>/<repo>, or None for the default tag", param="pretrained")
            check_utf8_path("pretrained", self.pretrained)
            object.__setattr__(self, "pretrained", os.fspath(self.pretrained))
        check_device(self.device)
        check_precision(self.precision)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1, MAX_BATCH_SIZE, what="inputs per forward pass")
        check_pooling(self.pooling)
        if self.context_length is not None:
            check_int("context_length", self.context_length, MIN_CONTEXT_LENGTH, MAX_CONTEXT_LENGTH, what="tokens")
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, os.PathLike)) or not os.fspath(self.cache_dir):
                raise BadInput(f"cache_dir {self.cache_dir!r} is not allowed; give a folder path, or None for "
                               "the default", param="cache_dir")
            check_utf8_path("cache_dir", self.cache_dir)
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
        if not isinstance(self.use_cache, bool):
            raise BadInput(f"use_cache {self.use_cache!r} is not allowed; use True or False", param="use_cache")

    def replace(self, **changes) -> EncoderSettings:
        """A copy with ``changes`` (field names as keywords), checked again (e.g. one model of a list:
        ``settings.replace(model="RN50", pretrained="openai")``)."""
        return replace(self, **changes)

    @classmethod
    def of(cls, encoder: EncoderSettings | str | os.PathLike, **changes) -> EncoderSettings:
        """``encoder`` itself (with ``changes``), or for a model string or path the settings of that model with
        every other field at its default (or in ``changes``): the convenience behind the library calls'
        ``encoder`` argument, so ``bindscope.evaluate(data, "ViT-B-32")`` works.

        Raises:
            BadInput: ``encoder`` is neither, or a value is out of range (see the class).
        """
        if isinstance(encoder, cls):
            return encoder.replace(**changes) if changes else encoder
        if isinstance(encoder, (str, os.PathLike)):
            return cls(model=encoder, **changes)
        raise BadInput(f"encoder {encoder!r} is not allowed; give an EncoderSettings or a model name or path",
                       param="encoder")


SETTING_NAMES = tuple(f.name for f in fields(EncoderSettings))
"""Every field of :class:`EncoderSettings`, in declaration (and command-line option) order."""
