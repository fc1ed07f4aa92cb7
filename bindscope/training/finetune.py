"""Fine-tuning a pretrained open_clip model with ``bindscope train --init MODEL [--pretrained ...]``.

The CLIP-FT baseline of the LABCLIP paper (docs/papers.md section 3) and NegCLIP fine-tuning (Yuksekgonul et al.,
ICLR 2023; the MADMAN paper's baseline) start from a pretrained CLIP and go on training it contrastively, with
or without hard negatives. Here the trainer of :mod:`bindscope.training.train` runs unchanged on an open_clip
model instead of a small CLIP:

- :func:`open_clip_model_config` resolves ``init`` and ``pretrained`` (open_clip's names and tags,
  :func:`bindscope.encoders.open_clip.resolve_open_clip`; QuickGELU weights get the ``-quickgelu`` model) into a
  :class:`~bindscope.training.model.ModelConfig` holding the architecture's name, embedding size, input size,
  context length and the weights' own normalisation and interpolation (``open_clip.get_pretrained_cfg``), so
  the run folder's ``model.pt`` rebuilds offline (``open_clip.create_model(name, pretrained=None)``) and loads in
  ``madman eval`` / ``comco eval --model RUN``;
- :func:`initial_weights` loads the starting weights (the trainer calls it before it claims the run folder): a
  local file (a torch or safetensors state dict, or an ``open_clip_train`` checkpoint) with
  :func:`bindscope.encoders.open_clip_weights.read_open_clip_weights` (bounded, finite, of the architecture), a
  tag or an ``hf-hub:`` repo through :class:`~bindscope.encoders.open_clip.OpenCLIPAdapter` (downloaded by
  open_clip on first use, refused if any weight is not finite), or None for ``pretrained="none"`` (the trainer's
  seeded random weights);
- :func:`freeze` keeps a tower's parameters fixed (``requires_grad`` off, so the optimiser never sees them) and
  :func:`frozen_modules` names the modules the trainer keeps in eval mode (their normalisation statistics fixed).
"""

from __future__ import annotations

import os

from bindscope.errors import BadInput
from bindscope.io.canonical import sha256_file
from bindscope.training.options import FREEZE

IMAGE_TOWER = "visual"
NOT_TEXT = ("visual.", "logit_scale", "logit_bias")  # parameters outside the text tower (names or prefixes)


def resolve_init(init: str, pretrained: str | None) -> tuple[str, str, str | None]:
    """``(open_clip model name, weights, sha256 of a weights file or None)`` for ``--init`` and ``--pretrained``,
    nothing loaded. ``weights`` is an open_clip tag, ``"none"``, an absolute file path or an ``hf-hub:`` name.

    Raises:
        BadInput: an unknown model name (close names suggested) or tag (the model's tags listed), a missing file;
            ``init`` given as an ``hf-hub:`` model (give the architecture's name and ``pretrained=hf-hub:...``).
    """
    from bindscope.encoders.open_clip import resolve_open_clip

    if not isinstance(init, str) or not init:
        raise BadInput(f"init {init!r} is not an open_clip model name", param="init")
    if init.startswith("hf-hub:"):
        raise BadInput(f"init {init!r}: give the open_clip architecture's name (e.g. ViT-B-32) and the hub repo as "
                       "pretrained='hf-hub:<org>/<repo>'", param="init")
    hub = pretrained is not None and pretrained.startswith("hf-hub:")
    try:
        name, tag = resolve_open_clip(init, "none" if hub else pretrained)
    except BadInput as exc:
        if exc.param == "pretrained":
            raise
        raise BadInput(f"init {init!r} is not an open_clip model name ({exc})", param="init") from None
    if hub:
        tag = pretrained
    return name, tag, sha256_file(tag) if os.path.isfile(tag) else None


def open_clip_model_config(init: str, pretrained: str | None):
    """The :class:`~bindscope.training.model.ModelConfig` of fine-tuning ``init`` from ``pretrained`` (see the
    module docstring) and the resolved ``(weights, sha256 or None)``.

    Raises:
        BadInput: as :func:`resolve_init`.
    """
    import open_clip

    from bindscope.training.model import ModelConfig

    name, tag, digest = resolve_init(init, pretrained)
    cfg = open_clip.get_model_config(name)
    vision, text = cfg.get("vision_cfg", {}), cfg.get("text_cfg", {})
    size = vision.get("image_size", 224)
    weights = open_clip.get_pretrained_cfg(name, tag) if tag in open_clip.list_pretrained_tags_by_model(name) else {}
    interpolation = "bilinear" if weights.get("interpolation", "bicubic") == "bilinear" else "bicubic"
    config = ModelConfig(open_clip=name, embed_dim=int(cfg["embed_dim"]),
                         image_size=int(size if isinstance(size, int) else size[0]),
                         context_length=int(text.get("context_length", 77)), image_mean=tuple(weights.get("mean", ())),
                         image_std=tuple(weights.get("std", ())), interpolation=interpolation)
    return config, tag, digest


def initial_weights(config, weights: str) -> dict | None:
    """The starting state dict of ``config.open_clip`` from ``weights`` (a tag, a file, an ``hf-hub:`` name), on
    the CPU (fp32, or a file's own float dtypes, which ``load_state_dict`` converts); None for ``"none"``.

    Raises:
        BadInput: weights that cannot be loaded (offline without them, a file that is not a state dict of that
            architecture, weights that are not finite); the message names them.
    """
    if weights == "none":
        return None
    if os.path.isfile(weights):
        from bindscope.encoders.open_clip_weights import read_open_clip_weights

        return read_open_clip_weights(config.open_clip, weights)
    from bindscope.encoders.open_clip import OpenCLIPAdapter

    adapter = OpenCLIPAdapter(config.open_clip, weights, device="cpu")
    return adapter.model.state_dict()


def freeze(model, which: str) -> None:
    """Keep ``which`` tower's parameters fixed: ``"image"`` (``model.visual``), ``"text"`` (everything but the
    image tower and the logit scale / bias) or ``"none"``.

    Raises:
        BadInput: another value.
    """
    if which not in FREEZE:
        raise BadInput(f"freeze {which!r} is not allowed; use one of {', '.join(FREEZE)}", param="freeze")
    for name, parameter in model.named_parameters():
        image = name.startswith(IMAGE_TOWER + ".")
        text = not any(name == p or name.startswith(p) for p in NOT_TEXT)
        if (which == "image" and image) or (which == "text" and text):
            parameter.requires_grad_(False)


def frozen_modules(model, which: str) -> list:
    """The modules of the frozen tower, which the trainer keeps in eval mode while training the rest."""
    if which == "image":
        return [model.visual]
    if which == "text":
        return [module for name, module in model.named_children() if name != IMAGE_TOWER]
    return []
