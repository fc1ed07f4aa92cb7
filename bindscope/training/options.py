"""The training options of ``madman train`` / ``madman sweep`` / :func:`bindscope.train` and their defaults."""

DEFAULTS: dict = {
    "embed_dim": 64, "image_size": None, "vision": "vit", "vision_width": 128, "vision_layers": 4, "patch_size": 8,
    "head_width": 32, "text_width": 128, "text_layers": 4, "tokenizer": "bpe", "context_length": 32,
    "batch_size": 128, "steps": 2000, "lr": 1e-3, "weight_decay": 0.1, "warmup_steps": 100, "hard_negatives": False,
    "hard_negatives_per_sample": 1, "seed": 0,
    "device": "auto", "precision": "fp32", "workers": 0, "threads": 0, "checkpoint_every": 500, "log_every": 10,
    "eval_every": 0, "keep_checkpoints": False,
}
