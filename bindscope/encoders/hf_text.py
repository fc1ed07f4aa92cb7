"""Any Hugging Face ``transformers`` text encoder as a text-only encoder: ``--model hf:<repo id or folder>``.

ComCO's Table 5 compares CLIP's text tower with text-only encoders (SBERT, SimCSE) on TOR; SimCSE and other
BERT-style models are plain ``transformers`` checkpoints, not sentence-transformers models, so they need an
explicit pooling rule. This adapter loads ``transformers.AutoTokenizer`` and ``AutoModel`` from a Hub repository
id (downloaded on first use, e.g. ``hf:princeton-nlp/sup-simcse-bert-base-uncased``) or a local folder, and
pools the last hidden states:

- ``cls``: the hidden state of the first token (``[CLS]``); SimCSE's evaluation uses this (Gao et al., EMNLP 2021,
  their ``cls_before_pooler`` setting for supervised models);
- ``mean``: the mean of the hidden states over the attention mask (padding excluded), as sentence-transformers'
  ``Pooling(mode="mean")`` does for all-MiniLM-L6-v2.

Texts are truncated to the tokenizer's ``model_max_length`` (at most 512 tokens); :meth:`truncated` says which.
Embeddings are float32 and L2-normalised. The cache key holds the transformers version, the model (repository id
and the revision loaded, or for a local folder its resolved path, the sha256 of its weight files and one sha256 over
all its files), the pooling and the precision.

Models load as data only (:mod:`bindscope.io.model_folder`): ``trust_remote_code=False``, no question on
standard input, and a local folder holding Python code or an ``auto_map`` is refused before it is read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from bindscope.encoders.interface import EncoderAdapter
from bindscope.encoders.model_folder import model_source
from bindscope.io.model_folder import no_prompts, quiet_transformers
from bindscope.encoders.settings import check_pooling
from bindscope.errors import BadInput
from bindscope.io.weights import check_module_finite

HF_PREFIX = "hf:"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
MAX_LENGTH = 512


class HFTextAdapter(EncoderAdapter):
    """A ``transformers`` text encoder with CLS or mean pooling (see the module docstring).

    Args:
        model: ``hf:<repo id>`` or ``hf:<local folder>`` (the prefix is required and recorded in ``name``).
        pooling: ``cls`` or ``mean``.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``. precision: ``fp32`` | ``bf16`` | ``fp16``.
        batch_size: texts per forward pass.

    Raises:
        BadInput: an empty name, an unknown pooling, a folder without weights, or a model that cannot be loaded
            (the message says that Hub models are downloaded on first use).
    """

    supports_images = False

    def __init__(self, model: str, pooling: str = "cls", device: str = "auto", precision: str = "fp32",
                 batch_size: int = 64):
        import torch
        import transformers

        from bindscope.encoders.interface import resolve_device

        source = model[len(HF_PREFIX):].strip()
        if not source:
            raise BadInput(f"model {model!r}: give a Hugging Face repository id or a folder after 'hf:'",
                           param="model")
        self.pooling = check_pooling(pooling)
        self.name = model
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        source, identity, local = model_source(source, model, WEIGHT_FILES)
        try:
            with no_prompts(), quiet_transformers():
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
                net = transformers.AutoModel.from_pretrained(source, trust_remote_code=False)
        except (OSError, ValueError, EOFError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise BadInput(f"could not load transformers model {source!r}: {reason} (Hub models are downloaded on "
                           "first use; offline, give a local model folder)") from None
        check_module_finite(net, f"model {model!r}", param="model")
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        self.model = net.to(self.device, dtype=dtype).eval()
        self.resolved_name = model
        if not local:  # a Hub model: the revision actually loaded
            revision = getattr(net.config, "_commit_hash", None)
            identity = f"{source}@{revision}" if revision else source
        self.pretrained = identity if local else source
        self.context_length = int(min(getattr(self.tokenizer, "model_max_length", MAX_LENGTH) or MAX_LENGTH,
                                      MAX_LENGTH))
        self.embed_dim = int(net.config.hidden_size)
        self.cache_key = f"transformers=={transformers.__version__}|{identity}|pool={pooling}|{precision}"
        self.forward_seconds = 0.0

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        import torch

        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.context_length, return_tensors="pt").to(self.device)
            tick = time.perf_counter()
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state.float()
            self.forward_seconds += time.perf_counter() - tick
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
        if not out:
            return np.zeros((0, self.embed_dim), np.float32)
        return np.concatenate(out).astype(np.float32, copy=False)

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the text has more tokens (special tokens included) than ``context_length``."""
        return [len(self.tokenizer(t)["input_ids"]) > self.context_length for t in texts]

    def limit_context(self, tokens: int) -> None:
        """Texts are tokenized with ``max_length=tokens`` from now on (see the interface)."""
        self.context_length = self.check_context(tokens)
        self.cache_key += f"|context={tokens}"


def is_sentence_transformers_folder(path: str | os.PathLike) -> bool:
    """True for a local sentence-transformers model folder (it holds ``modules.json``)."""
    return (Path(path) / "modules.json").is_file()
