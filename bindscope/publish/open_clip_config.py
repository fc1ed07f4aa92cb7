"""``bindscope export open-clip-config``: the open_clip model config of a ``madman train`` small CLIP.

``madman train`` builds its model as an ``open_clip.CLIP`` (see docs/training.md). The open_clip model config
written here (``{"embed_dim", "vision_cfg", "text_cfg"}``, the JSON of open_clip's ``model_configs/`` folder)
makes ``open_clip.create_model`` and ``open_clip_train`` build the same architecture, parameter for
parameter (the same names and shapes in the state dict)::

    ModelConfig (run.json "model")        open_clip model config
    embed_dim                             embed_dim
    image_size                            vision_cfg.image_size
    vision "vit": vision_layers           vision_cfg.layers       (a VisionTransformer)
                  vision_width            vision_cfg.width
                  patch_size              vision_cfg.patch_size
    vision "resnet": vision_layers        vision_cfg.layers = [n, n, n, n]   (a ModifiedResNet)
                  vision_width            vision_cfg.width
    head_width                            vision_cfg.head_width; text_cfg.heads = text_width / head_width
    mlp_ratio                             vision_cfg.mlp_ratio, text_cfg.mlp_ratio
    context_length                        text_cfg.context_length
    text_width, text_layers               text_cfg.width, text_cfg.layers
    tokenizer "bpe"                       text_cfg.vocab_size = 49408 (open_clip's CLIP BPE tokenizer)
    (GELU)                                quick_gelu = false

Two cases open_clip cannot reproduce:

- ``vision="cnn"`` (bindscope's light CNN tower) has no open_clip counterpart: refused with BadInput.
- ``tokenizer="word"``: open_clip has no word tokenizer, so the exported config uses open_clip's default
  CLIP BPE tokenizer (``vocab_size`` 49408, the run's ``context_length``); the text tower is then the run's
  except for the size of its token embedding table. :func:`open_clip_model_config` returns a note saying so.

Image preprocessing is not part of an open_clip model config: open_clip applies its defaults (bicubic
resize, OpenAI mean and std; in training a ``RandomResizedCrop`` with scale 0.9 to 1) where ``madman train``
resizes bilinearly without augmentation.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from bindscope.errors import BadInput, check_int, check_number
from bindscope.io.atomic import write_text_atomic
from bindscope.io.canonical import canonical_json

RUN_FILE = "run.json"  # the run record of a madman train run folder
BPE_VOCAB_SIZE = 49408
MODEL_KEYS = ("embed_dim", "image_size", "vision", "vision_width", "vision_layers", "patch_size", "text_width",
              "text_layers", "head_width", "mlp_ratio", "context_length", "tokenizer")
WORD_TOKENIZER_NOTE = ("the run's text tower uses bindscope's word tokenizer, which open_clip cannot reproduce; "
                       "the exported config uses open_clip's default CLIP BPE tokenizer (vocab_size 49408) at the "
                       "run's context length {context_length}, so the token embedding table differs from the run's")


def open_clip_model_config(model: dict) -> tuple[dict, list[str]]:
    """The open_clip model config of a small CLIP, and notes on what open_clip cannot reproduce.

    Args:
        model: the architecture as ``madman train`` records it (``ModelConfig.to_dict()``: the ``model``
            entry of a run's ``run.json`` config); the keys :data:`MODEL_KEYS` are used, ``vocabulary`` is
            ignored.

    Returns:
        ``(config, notes)``: ``config`` is ``{"embed_dim", "quick_gelu", "vision_cfg", "text_cfg"}`` (see the
        module docstring for the mapping); ``notes`` holds one sentence per approximation (a word tokenizer).

    Raises:
        BadInput: a key is missing or not a positive integer, the vision tower is ``cnn`` (no open_clip
            counterpart) or unknown, or a width is not a multiple of the head width.
    """
    if not isinstance(model, dict):
        raise BadInput(f"model {model!r} is not a model config; give the 'model' entry of a run.json")
    missing = [key for key in MODEL_KEYS if key not in model]
    if missing:
        raise BadInput(f"model config lacks {', '.join(missing)}; give the 'model' entry of a madman train "
                       "run.json")
    for key in ("embed_dim", "image_size", "vision_width", "vision_layers", "patch_size", "text_width",
                "text_layers", "head_width", "context_length"):
        check_int(key, model[key], 1)
    vision, tokenizer = model["vision"], model["tokenizer"]
    if vision == "cnn":
        raise BadInput("vision 'cnn' (bindscope's light CNN image tower) has no open_clip counterpart; only "
                       "vit and resnet runs can be exported", param="vision")
    if vision not in ("vit", "resnet"):
        raise BadInput(f"vision {vision!r} is not known; allowed: vit, resnet", param="vision")
    if tokenizer not in ("bpe", "word"):
        raise BadInput(f"tokenizer {tokenizer!r} is not known; allowed: bpe, word", param="tokenizer")
    for key in ("vision_width", "text_width"):
        if model[key] % model["head_width"]:
            raise BadInput(f"{key} {model[key]} is not divisible by the head width {model['head_width']}",
                           param=key)
    mlp_ratio = check_number("mlp_ratio", model["mlp_ratio"], 0)
    if vision == "vit":
        vision_cfg = {"image_size": model["image_size"], "layers": model["vision_layers"],
                      "width": model["vision_width"], "head_width": model["head_width"], "mlp_ratio": mlp_ratio,
                      "patch_size": model["patch_size"]}
    else:  # open_clip builds a ModifiedResNet when `layers` is a list of four stage depths
        vision_cfg = {"image_size": model["image_size"], "layers": [model["vision_layers"]] * 4,
                      "width": model["vision_width"], "head_width": model["head_width"]}
    text_cfg = {"context_length": model["context_length"], "vocab_size": BPE_VOCAB_SIZE,
                "width": model["text_width"], "heads": model["text_width"] // model["head_width"],
                "layers": model["text_layers"], "mlp_ratio": mlp_ratio}
    notes = [WORD_TOKENIZER_NOTE.format(context_length=model["context_length"])] if tokenizer == "word" else []
    return {"embed_dim": model["embed_dim"], "quick_gelu": False, "vision_cfg": vision_cfg,
            "text_cfg": text_cfg}, notes


def shipped_by_open_clip(name: str) -> bool:
    """Whether ``name`` is the name of a model config open_clip ships (``open_clip/model_configs/<name>.json``),
    which a config registered under that name (``open_clip.add_model_config``) would replace. open_clip is
    looked up, not imported."""
    spec = importlib.util.find_spec("open_clip")
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(folder) / "model_configs" / f"{name}.json").is_file() for folder in folders)


def run_model(run: str | os.PathLike) -> dict:
    """The architecture (``ModelConfig.to_dict()``) of the ``madman train`` run folder ``run``, read from its
    ``run.json``.

    Raises:
        BadInput: ``run`` is not a folder holding a readable ``run.json`` with a model config.
    """
    folder = Path(run)
    if not folder.is_dir():
        raise BadInput(f"run {str(run)!r} is not a folder; give a madman train run folder (it holds {RUN_FILE})",
                       param="run")
    path = folder / RUN_FILE
    if path.is_symlink() or not path.is_file():
        raise BadInput(f"run {str(run)!r} holds no {RUN_FILE}: not a madman train run folder", param="run")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"run {str(run)!r}: {RUN_FILE} does not parse ({exc})", param="run") from None
    config = record.get("config") if isinstance(record, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        raise BadInput(f"run {str(run)!r}: {RUN_FILE} has no config.model entry (a JSON object with a 'config' "
                       "object holding the 'model' object of a madman train run)", param="run")
    return model


def export_open_clip_config(run: str | os.PathLike | None, out: str | os.PathLike, model: dict | None = None,
                            overwrite: bool = False) -> dict:
    """Write the open_clip model config of a ``madman train`` run (or of ``model``) to the JSON file ``out``.

    ``open_clip.add_model_config(out)`` then registers it under the file's stem (``cfg.json`` -> ``"cfg"``), the
    name ``open_clip.create_model`` and ``open_clip_train --model`` take (see docs/export.md); a stem that is a
    model open_clip ships (``ViT-B-32``) is refused, as the config would replace open_clip's own.

    Args:
        run: a ``madman train`` run folder (its ``run.json`` names the architecture); None with ``model``.
        out: the JSON file to write (atomically), ending in ``.json``.
        model: the architecture as a dict (``ModelConfig.to_dict()``) instead of ``run``.
        overwrite: replace an existing ``out``.

    Returns:
        ``{"path": out, "name": the open_clip model name, "config": the config written, "notes": [...]}``.

    Raises:
        BadInput: neither or both of ``run`` and ``model``; see :func:`run_model` and
            :func:`open_clip_model_config`; ``out`` exists (without ``overwrite``), is a folder or a link, does
            not end in ``.json``, its stem names a model open_clip ships (:func:`shipped_by_open_clip`), is a file
            that is not an open_clip model config (with ``overwrite``: only such a file is replaced), or another
            export writes it (naming it). Nothing is written then.

    The file is claimed through :func:`bindscope.io.claim.claim_file` (a lock beside it) and written atomically.
    """
    from bindscope.io.claim import claim_file
    from bindscope.io.ownership import check_output_location

    if (run is None) == (model is None):
        raise BadInput("give a run folder or a model config (run=... or model=...), not both or neither",
                       param="run")
    path = Path(out)
    if path.suffix != ".json" or path.stem in ("", "."):
        raise BadInput(f"out {str(out)!r} must be a file name ending in .json (its stem becomes the open_clip "
                       "model name)", param="out")
    if shipped_by_open_clip(path.stem):
        raise BadInput(f"out {str(out)!r}: its stem {path.stem!r} is a model open_clip ships, which the exported "
                       f"config would replace once added; choose another name, e.g. "
                       f"{str(path.with_name('bs-' + path.name))!r}", param="out")
    check_output_location("out", path)
    with claim_file(path, is_model_config, "open_clip model config", overwrite) as target:
        config, notes = open_clip_model_config(run_model(run) if run is not None else model)
        write_text_atomic(target, canonical_json(config))
    return {"path": path, "name": path.stem, "config": config, "notes": notes}


def is_model_config(path: str | os.PathLike) -> bool:
    """True when the file ``path`` is an open_clip model config of the shape :func:`open_clip_model_config` writes
    (a JSON object of exactly ``embed_dim``, ``quick_gelu``, ``vision_cfg`` and ``text_cfg``, at most 64 KiB): the
    only file ``overwrite`` replaces."""
    try:
        with open(path, "rb") as handle:
            config = json.loads(handle.read(1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and set(config) == {"embed_dim", "quick_gelu", "vision_cfg", "text_cfg"}
