"""The training options of ``madman train`` / ``madman sweep`` / :func:`bindscope.train`: their defaults, value
ranges and help texts, written once.

:class:`TrainSettings` is the one defaults table: :class:`bindscope.training.model.ModelConfig`,
:class:`bindscope.training.train.TrainConfig`, :func:`bindscope.training.train.build_train_config` and the
command-line options (:func:`bindscope.cli.train.training_options`, defaults and help) all read it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bindscope.errors import DEVICE_GRAMMAR

VISION_TOWERS = ("vit", "resnet", "cnn")  # madman train --vision
TOKENIZERS = ("bpe", "word")  # madman train --tokenizer
NEGATIVES = ("none", "stored", "shuffled")  # bindscope train --negatives
FREEZE = ("none", "image", "text")  # bindscope train --freeze


@dataclass(frozen=True)
class TrainSettings:
    """The default of every training option (units: features, blocks, pixels, tokens, steps)."""

    # fine-tuning: an open_clip model instead of the small CLIP (see bindscope.training.finetune)
    init: str | None = None
    pretrained: str | None = None
    freeze: str = "none"
    # model (see bindscope.training.model.ModelConfig)
    embed_dim: int = 64
    image_size: int | None = None  # None: the dataset's canvas, rounded down to what the vision tower allows
    vision: str = "vit"
    vision_width: int = 128
    vision_layers: int = 4
    patch_size: int = 8
    head_width: int = 32
    text_width: int = 128
    text_layers: int = 4
    tokenizer: str = "bpe"
    context_length: int = 32
    # optimisation
    batch_size: int = 128
    steps: int = 2000
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 100
    negatives: str = "none"
    negatives_per_sample: int = 1
    seed: int = 0
    # runtime and bookkeeping
    device: str = "auto"
    precision: str = "fp32"
    workers: int = 0
    threads: int = 0
    checkpoint_every: int = 500
    log_every: int = 10
    eval_every: int = 0
    keep_checkpoints: bool = False


SETTINGS = TrainSettings()
DEFAULTS: dict = asdict(SETTINGS)
"""``{option: default}``: the keyword options :func:`bindscope.train` accepts, in the table's order."""

MODEL_KEYS = ("embed_dim", "vision", "vision_width", "vision_layers", "patch_size", "head_width", "text_width",
              "text_layers", "tokenizer", "context_length")
"""The options that are fields of :class:`bindscope.training.model.ModelConfig` as they are (``image_size`` is one
too, resolved from the dataset when None)."""

MODEL_IMAGE_SIZE = 64
"""``ModelConfig.image_size`` when no dataset gives a canvas (a model built outside ``madman train``)."""
MLP_RATIO = 2.0
"""Transformer MLP hidden size / width in both towers (not an option)."""
EVAL_BATCH_SIZE = 256
"""Images or texts per forward pass when a run evaluates its model (not an option)."""

LR_RANGE = (0.0, 10.0)
"""Allowed peak learning rates: ``LR_RANGE[0] < lr <= LR_RANGE[1]``, finite."""
WEIGHT_DECAY_RANGE = (0.0, 10.0)
"""Allowed AdamW weight decays: ``WEIGHT_DECAY_RANGE[0] <= weight_decay <= WEIGHT_DECAY_RANGE[1]``, finite."""

FINETUNE_KEYS = ("init", "pretrained", "freeze")
"""The fine-tuning options: :class:`bindscope.training.train.TrainConfig` fields, offered by ``bindscope train``
and ``madman train`` (not by ``madman sweep``, which trains small CLIPs from scratch)."""

HELP: dict = {
    "init": "Fine-tune this open_clip model (a name open_clip.list_models() knows, e.g. ViT-B-32) instead of training "
            "a small CLIP from scratch; its own image size, normalisation and tokenizer are used, and the small "
            "CLIP's model options do not apply.",
    "pretrained": "Starting weights of --init: an open_clip pretrained tag (e.g. openai), a local state-dict or "
                  "open_clip_train checkpoint file, hf-hub:<org>/<repo>, or none (random weights, seeded by "
                  "--seed) [default: the model's default tag, openai where listed].",
    "freeze": "With or without --init: keep the image or the text tower's weights fixed (not optimised; its "
              "normalisation statistics fixed too), or none.",
    "embed_dim": "Joint embedding size D.",
    "image_size": "Model input side in pixels [default: the dataset's canvas, rounded down to a multiple of the patch "
                  "size (resnet: of 32, cnn: of 8)].",
    "vision": "Image tower: open_clip VisionTransformer, open_clip ModifiedResNet (CNN), or a light CNN (cnn) for "
              "CPU training.",
    "vision_width": "ViT width (resnet: base channels; cnn: channels at 1/8 resolution).",
    "vision_layers": "ViT blocks (resnet: blocks per stage; cnn: residual blocks at 1/8 resolution).",
    "patch_size": "ViT patch side in pixels.",
    "head_width": "Features per attention head in both transformers (heads = width / head width; both widths must "
                  "be multiples of it).",
    "text_width": "Text transformer width.",
    "text_layers": "Text transformer blocks.",
    "tokenizer": "bpe: open_clip's CLIP BPE (49,408 tokens); word: one token per word of a vocabulary built from the "
                 "training captions (saved as OUT/vocab.json and in the model).",
    "context_length": "Text tokens per caption (start/end included); longer captions are truncated and counted.",
    "batch_size": "Images per step.",
    "steps": "Optimiser steps.",
    "lr": "Peak learning rate (AdamW).",
    "weight_decay": "AdamW weight decay.",
    "warmup_steps": "Linear warm-up steps, then cosine decay to 0.",
    "negatives": "NegCLIP hard negatives, extra image->text candidates: none; stored: the dataset's binding "
                 "negatives (attribute values swapped between two objects: MADMAN, ComCO rendered with "
                 "--attributes); shuffled: each caption with its nouns shuffled among themselves and its attribute "
                 "words among themselves (NegCLIP's recipe; nouns and attribute words from the dataset's category "
                 "names and attribute values), seeded.",
    "negatives_per_sample": "Hard negatives added per sample with --negatives stored|shuffled.",
    "seed": "Seeds weights, batch order, hard-negative choice.",
    "device": DEVICE_GRAMMAR + ".",
    "precision": "Autocast precision (fp16 needs CUDA).",
    "workers": "DataLoader worker processes building batches (0 = in the training process).",
    "threads": "torch intra-op CPU threads (0 = torch's default); 1 is often fastest on a busy machine.",
    "checkpoint_every": "Steps between checkpoints (also written on Ctrl-C and at the end).",
    "log_every": "Steps between log lines.",
    "eval_every": "Steps between evaluations logged to log.jsonl (0 = final model only).",
    "keep_checkpoints": "Also keep each evaluated model (every --eval-every steps, and the final one) as "
                        "OUT/checkpoints/step-<step>.pt (for `madman eval --model 'OUT/checkpoints/*.pt'` and "
                        "`bindscope collect`).",
}
"""The command-line help of each option (``--flag`` names as ``madman train`` spells them)."""
