"""LABCLIP: a linear map on text embeddings that restores cross-modal attribute binding.

Koishigarina, Uselis, Oh, "CLIP Behaves like a Bag-of-Words Model Cross-modally but not Uni-modally",
LABCLIP, as restated in docs/papers.md section 3. With frozen L2-normalised image embeddings ``x`` and text
embeddings ``t`` (D-dimensional):

* map: ``t' = W t / ||W t||`` with ``W`` a D×D matrix, no bias, initialised to the identity (so at step 0
  every similarity, and thus every accuracy, equals the original model's);
* similarity: ``s * <x, t'>`` with a learnable temperature ``s = exp(log_s)`` (log-parameterised,
  initialised to CLIP's ``1/0.07``, clamped to at most 100 as in CLIP);
* negatives: attribute-swapped captions (MADMAN: the stored ``"binding"`` negatives; ComCO/SimCO: swaps
  built from the object table, :func:`bindscope.alignment.data.build_binding_swaps`);
* loss per batch of B (image, caption) pairs with K negatives of those pairs:
  ``L = ½ [CE(s·X·[T'; N']ᵀ, diag) + CE(s·T'·Xᵀ, diag)]`` — image→text cross-entropy over the batch's
  positives plus negatives, text→image cross-entropy over the positives; optimiser Adam.

:class:`LabclipMap` applies a fitted map with numpy alone to any stored text embeddings (no re-encoding —
the paper's backward-compatibility point). Torch is imported only inside the fitting and file functions.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bindscope.alignment.protocols import AUTHORS_REPOSITORY, CLIP_INIT_LOGIT_SCALE  # noqa: F401 (named here too)
from bindscope.encoders.interface import l2_normalise, torch_threads
from bindscope.errors import BadInput, check_int, check_number
from bindscope.io.atomic import atomic_open
from bindscope.io.weights import all_finite, check_plain, read_torch_file

FORMAT = "bindscope-labclip"
FORMAT_VERSION = 1
MAX_LOGIT_SCALE = 100.0




@dataclass
class LabclipMap:
    """A fitted LABCLIP map (numpy).

    Attributes:
        weight: ``(D, D)`` float32 matrix ``W`` (applied as ``t @ W.T``).
        logit_scale: the learnt temperature ``s`` (> 0).
        meta: JSON-compatible provenance: model, pretrained, cache_key, dataset, split, held-out
            combinations, hyper-parameters, loss history.
    """

    weight: np.ndarray
    logit_scale: float = CLIP_INIT_LOGIT_SCALE
    meta: dict = field(default_factory=dict)

    @classmethod
    def identity(cls, dim: int) -> "LabclipMap":
        """The identity map of dimension ``dim`` (LABCLIP's initialisation)."""
        return cls(np.eye(dim, dtype=np.float32))

    @property
    def name(self) -> str:
        """A label for results: ``LABCLIP(<file name>)`` once saved or loaded, else ``LABCLIP``."""
        path = self.meta.get("path")
        return f"LABCLIP({os.path.basename(path)})" if path else "LABCLIP"

    @property
    def dim(self) -> int:
        return int(self.weight.shape[0])

    @property
    def file_tag(self) -> str | None:
        """``labclip-<short hash of the resolved map file path>`` (suffix of result file names), None if unsaved."""
        from bindscope.evaluation.results import short_hash

        path = self.meta.get("path")
        return f"labclip-{short_hash(str(Path(path).resolve()))}" if path else None

    def check_encoder(self, adapter) -> None:
        """Raise BadInput unless the map fits ``adapter``'s embeddings (see :func:`check_dimension`)."""
        check_dimension(self, adapter)

    def __call__(self, text_embeddings: np.ndarray) -> np.ndarray:
        """Map ``(N, D)`` text embeddings: returns ``(N, D)`` float32 ``normalise(t @ W.T)``.

        Usable as the ``text_transform`` of the evaluation functions and on stored embeddings.

        Raises:
            BadInput: the embeddings' dimension differs from the map's.
        """
        t = np.asarray(text_embeddings, dtype=np.float32)
        if t.ndim != 2 or t.shape[1] != self.dim:
            raise BadInput(f"LABCLIP map is {self.dim}-dimensional; text embeddings have shape {t.shape}")
        return l2_normalise(t @ self.weight.T)

    def save(self, path: str | os.PathLike) -> None:
        """Write the map with ``torch.save`` atomically (temp file, fsync, rename)."""
        import torch

        path = Path(path)
        payload = {"format": FORMAT, "format_version": FORMAT_VERSION,
                   "weight": torch.from_numpy(np.ascontiguousarray(self.weight, dtype=np.float32)),
                   "logit_scale": float(self.logit_scale), "meta": self.meta}
        with atomic_open(path) as handle:
            torch.save(payload, handle)


MAX_DIM = 16384  # embedding dimensions of a map (the largest CLIPs have 1,024-1,280)
MAX_MAP_BYTES = 4 * MAX_DIM * MAX_DIM + (64 << 20)  # the weight at MAX_DIM plus room for the meta record
MAP_KEYS = frozenset({"format", "format_version", "weight", "logit_scale", "meta"})
AUTHORS_KEYS = frozenset({"linear.weight", "t"})
AUTHORS_FORMAT = "state dict of the LABCLIP authors' CLIPAlignment (linear.weight, t)"
_META_TEXT = ("model", "pretrained", "cache_key", "dataset", "dataset_id", "split", "path")


def _map_problem(path: Path, problem: str) -> BadInput:
    return BadInput(f"LABCLIP map {str(path)!r}: {problem}")


def _check_meta(path: Path, meta, dim: int) -> dict:
    """The map's ``meta`` record, checked against the map: JSON-like, the fields read back of the right types
    (texts; ``held_out`` a list of ``[category, attribute, value]``), ``embed_dim`` equal to the weight's side."""
    if not isinstance(meta, dict):
        raise _map_problem(path, f"meta is a {type(meta).__name__}, not a mapping")
    check_plain(meta, "meta", lambda problem: _map_problem(path, problem))
    for key in _META_TEXT:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise _map_problem(path, f"meta.{key} is {meta[key]!r}, not a text")
    held = meta.get("held_out", [])
    if not isinstance(held, list) or not all(
            isinstance(t, list) and len(t) == 3 and all(isinstance(v, (str, int, float)) for v in t) for t in held):
        raise _map_problem(path, "meta.held_out is not a list of [category, attribute, value] combinations")
    if "embed_dim" in meta and (meta["embed_dim"] != dim or isinstance(meta["embed_dim"], bool)):
        raise _map_problem(path, f"meta.embed_dim {meta['embed_dim']!r} differs from the weight's dimension {dim}")
    return dict(meta)


def load_labclip(path: str | os.PathLike) -> LabclipMap:
    """Read a LABCLIP map: ``torch.load`` with ``weights_only=True`` of a regular file of at most
    :data:`MAX_MAP_BYTES`, in either format, checked before the map is made:

    * bindscope's (:meth:`LabclipMap.save`): the keys, format and version, the weight (:func:`_check_weight`), the
      temperature (a finite float in ``(0, MAX_LOGIT_SCALE]``) and the ``meta`` record (:func:`_check_meta`);
    * the LABCLIP authors' (:data:`AUTHORS_REPOSITORY`, ``alignment/learning_alignment.py``: ``torch.save`` of the
      state dict of their ``CLIPAlignment`` module): exactly the entries ``linear.weight``, the ``(D, D)`` matrix
      their ``torch.nn.Linear(D, D, bias=False)`` applies as ``t @ W.T`` before normalising (bindscope's ``weight``
      as it is), and ``t``, the scalar log-temperature (logits are multiplied by ``exp(t)``; bindscope's
      ``logit_scale = exp(t)``, any finite positive value, as their training does not clamp it). The weight is
      checked as bindscope's; ``meta`` records the format and the file. Their fine-tuning variant
      (``CLIPFTAlignment``, whose state dict also holds the CLIP model under ``model.``) is not a map on frozen
      embeddings and is refused.

    The map's dimension is checked against the encoder where it is used (:func:`check_dimension`).

    Raises:
        BadInput: naming the file and the problem: missing, unreadable, too large, holding objects other than
            tensors and plain values (a pickled payload is refused unread), or not a sound map of either format.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"LABCLIP map {str(path)!r}: no such file")
    payload = read_torch_file(path, "map", MAX_MAP_BYTES, label="LABCLIP map")
    if isinstance(payload, dict) and "linear.weight" in payload:
        return _authors_map(path, payload)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise BadInput(f"{str(path)!r} is not a LABCLIP map written by `bindscope labclip fit` nor a state dict of "
                       "the LABCLIP authors' CLIPAlignment (linear.weight, t)")
    if set(payload) != MAP_KEYS:
        missing, unexpected = sorted(MAP_KEYS - set(payload)), sorted(set(payload) - MAP_KEYS, key=str)
        raise _map_problem(path, "has " + "; ".join(p for p in (
            f"no {', '.join(missing)}" if missing else "",
            f"unexpected entries {', '.join(map(repr, unexpected[:5]))}" if unexpected else "") if p))
    version = payload["format_version"]
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise _map_problem(path, f"has format version {version!r}; this bindscope reads version {FORMAT_VERSION}")
    weight = _check_weight(path, payload["weight"], "weight")
    scale = payload["logit_scale"]
    if not (isinstance(scale, float) and math.isfinite(scale) and 0 < scale <= MAX_LOGIT_SCALE):
        raise _map_problem(path, f"logit_scale {scale!r} is not a number in (0, {MAX_LOGIT_SCALE:g}]")
    meta = _check_meta(path, payload["meta"], int(weight.shape[0]))
    meta["path"] = str(path)
    return LabclipMap(weight, scale, meta)


def _check_weight(path: Path, weight, name: str) -> np.ndarray:
    """``weight`` as a float32 numpy copy, if it is a dense float32 ``(D, D)`` tensor with ``1 <= D <=``
    :data:`MAX_DIM` and finite values; else BadInput naming the file and ``name``."""
    import torch

    if not isinstance(weight, torch.Tensor):
        raise _map_problem(path, f"{name} is a {type(weight).__name__}, not a tensor")
    if weight.layout != torch.strided or weight.is_quantized or weight.dtype != torch.float32:
        raise _map_problem(path, f"{name} is a {weight.layout} {weight.dtype} tensor; expected a dense float32 one")
    if weight.ndim != 2 or weight.shape[0] != weight.shape[1] or not 1 <= weight.shape[0] <= MAX_DIM:
        raise _map_problem(path, f"{name} has shape {tuple(weight.shape)}, expected (D, D) with 1 <= D <= {MAX_DIM}")
    if not all_finite(weight):
        raise _map_problem(path, f"{name} holds NaN or infinite values")
    return weight.detach().numpy().astype(np.float32, copy=True)


def _authors_map(path: Path, state: dict) -> LabclipMap:
    """A :class:`LabclipMap` from the LABCLIP authors' state dict (see :func:`load_labclip`), checked."""
    import torch

    keys = set(state)
    if keys != AUTHORS_KEYS:
        if any(isinstance(k, str) and k.startswith("model.") for k in keys):
            raise _map_problem(path, "holds a CLIP model besides its map (entries 'model.*': the LABCLIP authors' "
                                     "fine-tuning variant), not a map on frozen embeddings")
        missing, unexpected = sorted(AUTHORS_KEYS - keys), sorted(keys - AUTHORS_KEYS, key=str)
        raise _map_problem(path, "is not a state dict of the LABCLIP authors' CLIPAlignment: it has " + "; ".join(
            p for p in (f"no {', '.join(missing)}" if missing else "",
                        f"unexpected entries {', '.join(map(repr, unexpected[:5]))}" if unexpected else "") if p))
    weight = _check_weight(path, state["linear.weight"], "linear.weight")
    t = state["t"]
    if not isinstance(t, torch.Tensor) or t.numel() != 1 or t.ndim > 1 or not t.is_floating_point():
        raise _map_problem(path, f"t is {t!r}, not a one-number float tensor (the log-temperature)")
    scale = math.exp(float(t)) if math.isfinite(float(t)) and float(t) < 700 else math.inf
    if not 0 < scale < math.inf:
        raise _map_problem(path, f"t = {float(t)!r}: exp(t), the temperature, is not a finite positive number")
    meta = {"format": AUTHORS_FORMAT, "source": AUTHORS_REPOSITORY, "embed_dim": int(weight.shape[0]),
            "path": str(path)}
    return LabclipMap(weight, scale, meta)


def check_dimension(labclip: LabclipMap, adapter) -> None:
    """Raise BadInput unless the map's dimension equals the adapter's ``embed_dim``."""
    if labclip.dim != adapter.embed_dim:
        fitted = labclip.meta.get("model", "another model")
        raise BadInput(f"LABCLIP map is {labclip.dim}-dimensional (fitted for {fitted!r}); model "
                       f"{adapter.name!r} gives {adapter.embed_dim}-dimensional embeddings")


def labclip_loss(weight, log_scale, images, texts, negatives):
    """The LABCLIP loss of one batch (torch tensors; see the module docstring for the formula).

    Args:
        weight: ``(D, D)`` map. log_scale: scalar ``log s``.
        images: ``(B, D)`` unit-norm image embeddings; texts: ``(B, D)`` their captions' embeddings;
        negatives: ``(K, D)`` negative captions' embeddings (K may be 0).

    Returns:
        scalar tensor ``½ (CE_image→text + CE_text→image)``.
    """
    import torch
    import torch.nn.functional as F

    scale = log_scale.exp().clamp(max=MAX_LOGIT_SCALE)
    mapped = F.normalize(torch.cat([texts, negatives]) @ weight.T, dim=1)
    positives = mapped[: len(texts)]
    target = torch.arange(len(images))
    image_to_text = F.cross_entropy(scale * images @ mapped.T, target)
    text_to_image = F.cross_entropy(scale * positives @ images.T, target)
    return 0.5 * (image_to_text + text_to_image)


def fit_labclip(images: np.ndarray, texts: np.ndarray, negatives: np.ndarray, owners: np.ndarray, *,
                epochs: int = 20, batch_size: int = 128, lr: float = 1e-3,
                init_logit_scale: float = CLIP_INIT_LOGIT_SCALE, seed: int = 0,
                progress=None) -> tuple[LabclipMap, list[float]]:
    """Fit the LABCLIP map with Adam on frozen embeddings (CPU, float32).

    Args:
        images: ``(N, D)`` unit-norm image embeddings; texts: ``(N, D)`` their captions' embeddings.
        negatives: ``(M, D)`` embeddings of attribute-swapped captions; owners: ``(M,)`` ints, the row of
            ``images`` each negative belongs to. A batch's negatives are those of its pairs.
        epochs: passes over the N pairs (shuffled per epoch with ``seed``); batch_size: pairs per batch;
        lr: Adam learning rate for ``W`` and ``log s``; init_logit_scale: initial ``s``.
        progress: optional callable(epoch, mean_loss) after each epoch.

    Returns:
        ``(map, losses)``: the fitted :class:`LabclipMap` (``meta`` holds ``loss_history``) and the mean
        loss per epoch, preceded by the loss of the identity map on the whole set (``losses[0]``).

    Raises:
        BadInput: shapes disagree, fewer than 2 pairs, or non-positive hyper-parameters.
    """
    with torch_threads(1):
        return _fit_labclip(images, texts, negatives, owners, epochs, batch_size, lr, init_logit_scale, seed,
                            progress)


def _fit_labclip(images, texts, negatives, owners, epochs, batch_size, lr, init_logit_scale, seed, progress):
    import torch

    images = np.asarray(images, np.float32)
    texts = np.asarray(texts, np.float32)
    negatives = np.asarray(negatives, np.float32).reshape(-1, images.shape[1] if images.ndim == 2 else 0)
    owners = np.asarray(owners, np.int64)
    if images.ndim != 2 or texts.shape != images.shape or len(images) < 2:
        raise BadInput(f"LABCLIP needs at least 2 (image, caption) pairs of one dimension; got images "
                       f"{images.shape} and captions {texts.shape}")
    if len(owners) != len(negatives) or (len(owners) and (owners.min() < 0 or owners.max() >= len(images))):
        raise BadInput("each LABCLIP negative needs the row of the pair it belongs to")
    check_int("epochs", epochs, 1)
    check_int("batch_size", batch_size, 2, what="pairs")
    check_number("lr", lr)
    check_number("init_logit_scale", init_logit_scale)
    torch.manual_seed(seed)
    dim = images.shape[1]
    weight = torch.nn.Parameter(torch.eye(dim))
    log_scale = torch.nn.Parameter(torch.tensor(math.log(init_logit_scale), dtype=torch.float32))
    optimiser = torch.optim.Adam([weight, log_scale], lr=lr)
    x_all, t_all, n_all = (torch.from_numpy(a) for a in (images, texts, negatives))
    order_by_owner = np.argsort(owners, kind="stable")
    starts = np.searchsorted(owners[order_by_owner], np.arange(len(images) + 1))

    def batch_negatives(rows: np.ndarray) -> torch.Tensor:
        picks = [order_by_owner[starts[r]:starts[r + 1]] for r in rows]
        picks = np.concatenate(picks) if picks else np.zeros(0, np.int64)
        return n_all[torch.from_numpy(picks.astype(np.int64))]

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        losses = [float(np.mean([labclip_loss(weight, log_scale, x_all[r], t_all[r],
                                              batch_negatives(r.numpy())).item()
                                 for r in torch.arange(len(images)).split(batch_size) if len(r) > 1]))]
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(images))
        epoch_losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            if len(rows) < 2:
                continue
            index = torch.from_numpy(rows)
            optimiser.zero_grad()
            loss = labclip_loss(weight, log_scale, x_all[index], t_all[index], batch_negatives(rows))
            loss.backward()
            optimiser.step()
            epoch_losses.append(loss.item())
        losses.append(float(np.mean(epoch_losses)))
        if progress is not None:
            progress(epoch, losses[-1])
    scale = float(min(math.exp(log_scale.item()), MAX_LOGIT_SCALE))
    fitted = LabclipMap(weight.detach().numpy().astype(np.float32).copy(), scale,
                        {"loss_history": losses, "epochs": epochs, "batch_size": batch_size, "lr": lr,
                         "init_logit_scale": init_logit_scale, "seed": seed})
    return fitted, losses


def pair_scores(images: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
                owners: np.ndarray) -> np.ndarray:
    """For each negative: True when ``cos(image, caption) > cos(image, negative)`` (strict: a tie is wrong).

    Args:
        images, positives: ``(N, D)`` unit-norm embeddings of the pairs; negatives: ``(M, D)``; owners:
            ``(M,)`` row of the pair each negative belongs to.

    Returns:
        ``(M,)`` bool.
    """
    owners = np.asarray(owners, np.int64)
    x = np.asarray(images, np.float32)[owners]
    pos = np.sum(x * np.asarray(positives, np.float32)[owners], axis=1)
    neg = np.sum(x * np.asarray(negatives, np.float32), axis=1)
    return pos > neg
