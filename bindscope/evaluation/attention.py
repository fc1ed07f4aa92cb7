"""CLS-to-patch attention of ViT image encoders, by object size (the image-side analysis of ComCO).

Abbasi et al., "CLIP Under the Microscope" (CVPR 2025), explain the image encoder's preference for the largest
object with the attention of the CLS token (their Figure 3). This module measures it on any bindscope dataset
with instance masks (ComCO/SimCO renders, imported real data):

1. **Attention from q/k.** open_clip runs ``nn.MultiheadAttention(need_weights=False)`` (and its 4.x line moves to
   scaled-dot-product attention), so no attention weights are exposed
   (https://github.com/mlfoundations/open_clip/issues/732). A forward hook on every residual block's ``attn``
   module records the block's normalised input ``x`` (N, L, D); the attention probabilities are recomputed from
   the module's own input projections: ``q = x W_q^T + b_q``, ``k = x W_k^T + b_k``, split into ``h`` heads,
   ``softmax(q k^T / sqrt(D / h))``. Nothing in open_clip is changed, and the model's outputs are unaffected.
   Token 0 is the class token; tokens 1..P are the patches in row-major order.
2. **CLS attention** of a block = its CLS row over the P patch tokens, averaged over heads (a distribution over
   patches that sums to ``1 - a_CLS->CLS``). Optional **attention rollout** (Abnar & Zuidema, ACL 2020): per block
   ``0.5 A + 0.5 I`` with A the head-averaged attention, rows re-normalised, multiplied from the first block to the
   last; its CLS row over the patches.
3. **Masks on the patch grid.** The instance mask (H, W) is placed on the model's input the way the adapter places
   the image (padded to a centred square, then resized), and each patch gets the fraction of its pixels that each
   object covers (``coverage``, objects x patches, exact pixel counts; padding counts as background). For
   square images (every generated dataset) this is an exact block partition of the mask.
4. **Per object**: ``mass`` = sum over patches of attention x coverage (the share of the CLS attention that lands
   on the object's pixels); ``patch_area`` = sum of its coverage (its area in patches); ``patches`` = patches in
   which it is the majority label (more of the patch's pixels than any other object or the background);
   ``top_k_patches`` = how many of the ``top_k`` most attended patches are its majority patches;
   ``mass_per_patch`` = mass / patch_area.

Results are grouped by **size rank** (1 = the largest visible area, as stored in the object table) over all
scenes and per object count. Means carry 95% percentile-bootstrap intervals over scenes (the scene is the sampling
unit; seeded). Works for every open_clip ViT with a class token and for ViTs trained by ``madman train``.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput, DatasetError
from bindscope.evaluation.results import dataset_info, envelope, open_dataset
from bindscope.evaluation.stats import cluster_bootstrap
from bindscope.format.reader import Dataset

LAYER_CHOICES = ("last", "all")
OBJECT_FIELDS = ("mass", "mass_per_patch", "patch_area", "patches", "top_k_patches")


def vision_transformer(adapter: EncoderAdapter):
    """The open_clip ``VisionTransformer`` behind ``adapter`` (``adapter.model.visual``).

    Raises:
        BadInput: the model has no image tower, its image tower is not a ViT, or the ViT has no class token
            (e.g. average- or attention-pooled towers such as SigLIP's).
    """
    visual = getattr(getattr(adapter, "model", None), "visual", None)
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    if visual is None or blocks is None or not hasattr(visual, "grid_size"):
        raise BadInput(f"model {adapter.name!r} has no ViT image tower: CLS attention needs an open_clip "
                       "VisionTransformer (e.g. ViT-B-32, or a model trained with vision='vit')")
    import torch

    if not all(isinstance(b.attn, torch.nn.MultiheadAttention) for b in blocks):
        raise BadInput(f"model {adapter.name!r} uses custom attention blocks; CLS attention is computed for "
                       "torch.nn.MultiheadAttention blocks (the standard open_clip ViT)")
    if getattr(visual, "class_embedding", None) is None or getattr(visual, "pool_type", "tok") != "tok":
        raise BadInput(f"model {adapter.name!r} pools its image tokens without a class token "
                       f"(pool_type {getattr(visual, 'pool_type', None)!r}); CLS attention is undefined")
    return visual


def attention_probs(x, attn) -> "torch.Tensor":  # noqa: F821 (torch is imported lazily)
    """Attention probabilities of one ``nn.MultiheadAttention`` self-attention call, from its q/k projections.

    Args:
        x: the module's query input, ``(N, L, D)`` when ``attn.batch_first`` else ``(L, N, D)``; float tensor.
        attn: the ``torch.nn.MultiheadAttention`` module (packed ``in_proj_weight`` (3D, D), ``in_proj_bias``).

    Returns:
        ``(N, heads, L, L)`` float32 tensor; each row sums to 1.
    """
    import torch

    if not attn.batch_first:
        x = x.transpose(0, 1)
    n, length, dim = x.shape
    heads = attn.num_heads
    weight = attn.in_proj_weight.float()
    bias = attn.in_proj_bias.float() if attn.in_proj_bias is not None else torch.zeros(3 * dim, device=x.device)
    x = x.float()
    q = (x @ weight[:dim].T + bias[:dim]).view(n, length, heads, dim // heads).transpose(1, 2)
    k = (x @ weight[dim:2 * dim].T + bias[dim:2 * dim]).view(n, length, heads, dim // heads).transpose(1, 2)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dim // heads), dim=-1)


@contextmanager
def record_attention(visual):
    """Context manager: while active, every forward pass of ``visual`` appends one ``(N, heads, L, L)`` tensor per
    residual block to the yielded list (in block order), computed by :func:`attention_probs`."""
    records: list = []
    handles = []
    for block in visual.transformer.resblocks:
        attn = block.attn

        def hook(module, args, kwargs, _attn=attn):
            query = args[0] if args else kwargs["query"]
            records.append(attention_probs(query.detach(), _attn))

        handles.append(attn.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def rollout(per_block: list[np.ndarray]) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020) of head-averaged attention matrices.

    Args:
        per_block: one ``(N, L, L)`` array per block, rows summing to 1 (heads already averaged).

    Returns:
        ``(N, L, L)``: the product, first block to last, of ``0.5 A + 0.5 I`` with rows re-normalised.
    """
    out = None
    for a in per_block:
        a = 0.5 * a + 0.5 * np.eye(a.shape[-1], dtype=a.dtype)
        a = a / a.sum(axis=-1, keepdims=True)
        out = a if out is None else a @ out
    return out


def patch_coverage(mask: np.ndarray, num_objects: int, grid: tuple[int, int]) -> np.ndarray:
    """Fraction of each patch's pixels covered by the background and by each object.

    Args:
        mask: ``(H, W)`` uint8 instance mask (0 background, k = object k).
        num_objects: K, the number of objects (labels 1..K).
        grid: ``(rows, cols)`` of the ViT's patch grid.

    Returns:
        ``(K + 1, rows * cols)`` float64, row 0 = background; columns sum to 1. The mask is padded with background
        to a centred square (as the image is) and pixel ``(y, x)`` of the square of side S falls in patch row
        ``floor(y * rows / S)``, column ``floor(x * cols / S)``.
    """
    mask = np.asarray(mask)
    height, width = mask.shape
    side = max(height, width)
    canvas = np.zeros((side, side), np.int64)
    top, left = (side - height) // 2, (side - width) // 2
    canvas[top:top + height, left:left + width] = mask
    canvas[canvas > num_objects] = 0
    rows, cols = grid
    r = (np.arange(side) * rows) // side
    c = (np.arange(side) * cols) // side
    cell = (r[:, None] * cols + c[None, :])
    counts = np.bincount((canvas * rows * cols + cell).ravel(), minlength=(num_objects + 1) * rows * cols)
    counts = counts.reshape(num_objects + 1, rows * cols).astype(np.float64)
    return counts / counts.sum(axis=0, keepdims=True)


def object_attention(cls_attn: np.ndarray, coverage: np.ndarray, top_k: int) -> dict[str, np.ndarray]:
    """Per-object attention figures for one image (see the module docstring for the definitions).

    Args:
        cls_attn: ``(P,)`` CLS attention over the patches.
        coverage: ``(K + 1, P)`` from :func:`patch_coverage`.
        top_k: number of most-attended patches considered (clipped to P).

    Returns:
        ``{field: (K,) array}`` for ``mass, mass_per_patch, patch_area, patches, top_k_patches`` (object k at
        index k - 1); ``mass_per_patch`` is NaN for an object with no pixels on the grid.
    """
    cov = coverage[1:]
    mass = cov @ cls_attn
    area = cov.sum(axis=1)
    majority = coverage.argmax(axis=0)
    top = np.argsort(-cls_attn, kind="stable")[:min(top_k, len(cls_attn))]
    labels = np.arange(1, coverage.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_patch = np.where(area > 0, mass / area, np.nan)
    return {"mass": mass, "mass_per_patch": per_patch, "patch_area": area,
            "patches": (majority[None, :] == labels[:, None]).sum(axis=1).astype(np.float64),
            "top_k_patches": (majority[top][None, :] == labels[:, None]).sum(axis=1).astype(np.float64)}


def _summarise(rows: list[tuple[int, int, int, dict]], seed: int) -> dict:
    """Group object rows ``(scene, num_objects, size_rank, figures)`` by size rank (all scenes, and per count)."""
    def block(selected):
        out = []
        for rank in sorted({r[2] for r in selected}):
            objs = [r for r in selected if r[2] == rank]
            entry = {"size_rank": rank, "objects": len(objs)}
            scenes = np.array([r[0] for r in objs])
            for field in OBJECT_FIELDS:
                values = np.array([r[3][field] for r in objs], dtype=np.float64)
                ok = ~np.isnan(values)
                mean = float(values[ok].mean()) if ok.any() else None
                ci = cluster_bootstrap(values[ok], np.ones(ok.sum()), scenes[ok], seed=seed) if ok.any() else None
                entry[field] = {"mean": mean, "ci95": ci}
            out.append(entry)
        return out

    by_count = {}
    for n in sorted({r[1] for r in rows}):
        by_count[str(n)] = block([r for r in rows if r[1] == n])
    return {"all": block(rows), "by_num_objects": by_count}


def cls_attention_by_size(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, layers: str = "last",
                          use_rollout: bool = False, top_k: int = 10, split: str = "scenes",
                          limit: int | None = None, batch_size: int = 16, seed: int = 0, progress: bool = True,
                          check: bool = True) -> dict:
    """CLS-to-patch attention by object size rank over a dataset's scenes (the paper's Figure 3 analysis).

    Args:
        dataset: a dataset folder whose split holds objects (instance masks and size ranks) or an open
            :class:`Dataset`.
        adapter: an open_clip ViT (:class:`~bindscope.encoders.open_clip.OpenCLIPAdapter`) or a ViT trained by
            ``madman train``; must provide ``preprocess_images`` and ``model.visual``.
        layers: ``last`` (the final block only) or ``all`` (every block, keyed by 0-based block index).
        use_rollout: also report attention rollout (key ``rollout``).
        top_k: most-attended patches counted in ``top_k_patches`` (>= 1).
        split: the split to read (``scenes`` for ComCO).
        limit: use only the first ``limit`` samples of the split (None = all).
        batch_size: images per forward pass (>= 1). seed: seed of the bootstrap over scenes.
        progress: tqdm bar. check: verify the split's shard sha256 first.

    Returns:
        A result dict valid against ``eval_result`` (``kind = "comco-attention"``): ``metrics.grid`` (patch grid
        rows, cols), ``metrics.layers.<block>`` and optionally ``metrics.rollout``, each ``{"all": [per size rank],
        "by_num_objects": {"<n>": [...]}}`` where a rank entry is ``{"size_rank", "objects", "mass",
        "mass_per_patch", "patch_area", "patches", "top_k_patches"}``, each figure ``{"mean", "ci95"}``
        (attention masses are fractions in [0, 1]; areas are in patches).

    Raises:
        BadInput: a model without a ViT class-token tower, bad ``layers``/``top_k``/``limit``/``batch_size``.
        DatasetError: missing split, corrupt shard.
    """
    import torch

    if layers not in LAYER_CHOICES:
        raise BadInput(f"layers {layers!r} is not allowed; use one of {', '.join(LAYER_CHOICES)}", param="layers")
    for name, value in (("top_k", top_k), ("batch_size", batch_size)):
        if value < 1:
            raise BadInput(f"{name} must be at least 1, got {value}", param=name)
    if limit is not None and limit < 1:
        raise BadInput(f"limit must be at least 1, got {limit}", param="limit")
    visual = vision_transformer(adapter)
    if not hasattr(adapter, "preprocess_images"):
        raise BadInput(f"model {adapter.name!r} does not expose its image preprocessing")
    ds = open_dataset(dataset)
    samples = ds.split(split)
    if "masks" not in samples.holds:
        raise DatasetError(f"comco attention needs objects with masks; split {split!r} of {str(ds.path)!r} holds "
                           f"none ({', '.join(sorted(samples.holds)) or 'nothing else'})", param="split")
    if check:
        ds.check([split])
    total = len(samples) if limit is None else min(limit, len(samples))
    grid = tuple(int(g) for g in visual.grid_size)
    num_blocks = len(visual.transformer.resblocks)
    keep = [num_blocks - 1] if layers == "last" else list(range(num_blocks))
    rows: dict[str, list] = {str(b): [] for b in keep}
    if use_rollout:
        rows["rollout"] = []
    device = next(visual.parameters()).device
    bar = tqdm(total=total, desc="comco attention", unit="img", disable=not progress)
    batch: list = []

    def run(batch):
        images = np.stack([s.image for s in batch])
        with torch.inference_mode(), record_attention(visual) as records:
            adapter.model.encode_image(adapter.preprocess_images(images).to(device))
        per_block = [r.mean(dim=1).cpu().numpy() for r in records]  # (N, L, L), heads averaged
        maps = {str(b): per_block[b][:, 0, 1:] for b in keep}
        if use_rollout:
            maps["rollout"] = rollout(per_block)[:, 0, 1:]
        for j, sample in enumerate(batch):
            coverage = patch_coverage(sample.mask, len(sample.objects), grid)
            for key, cls in maps.items():
                figures = object_attention(cls[j].astype(np.float64), coverage, top_k)
                for obj in sample.objects:
                    rows[key].append((sample.index, len(sample.objects), int(obj.size_rank),
                                      {f: float(figures[f][obj.index - 1]) for f in OBJECT_FIELDS}))
        bar.update(len(batch))

    for i, sample in enumerate(samples):
        if i >= total:
            break
        batch.append(sample)
        if len(batch) == batch_size:
            run(batch)
            batch = []
    if batch:
        run(batch)
    bar.close()
    metrics = {"grid": list(grid), "blocks": num_blocks, "top_k": top_k,
               "layers": {key: _summarise(r, seed) for key, r in rows.items() if key != "rollout"}}
    if use_rollout:
        metrics["rollout"] = _summarise(rows["rollout"], seed)
    settings = {"task": "comco-attention", "split": split, "layers": layers, "rollout": use_rollout,
                "samples": total, "seed": seed,
                "attention": "CLS row of softmax(q k^T / sqrt(d_head)) from each block's q/k projections (forward "
                             "hook), averaged over heads, over patch tokens",
                "interval": "95% percentile bootstrap over scenes (2,000 resamples)"}
    counts = {"texts_encoded": 0, "images_encoded": total, "text_cache_hits": 0, "image_cache_hits": 0,
              "truncation": {"captions": 0, "captions_truncated": 0, "texts": 0, "texts_truncated": 0,
                             "context_length": getattr(adapter, "context_length", None)}}
    return envelope("comco-attention", adapter, dataset_info(ds, [split]), settings, metrics, counts)
