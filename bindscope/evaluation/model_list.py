"""Several models in one evaluation run: ``--model`` / ``--pretrained`` lists, model files and checkpoint globs.

The paper tables compare many encoders (ComCO Table 1: OpenAI, LAION and XLM-RoBERTa CLIPs; Table 5: text
encoders; bias over training checkpoints). :func:`expand_models` turns the command-line values into the list of
``(model, pretrained)`` pairs to evaluate, one result file each:

- ``--model ViT-B-32,ViT-B-16`` (comma-separated) and ``--pretrained openai,laion2b_s34b_b79k``: a single value on
  either side applies to every value on the other; two lists of the same length are paired in order;
- ``--model models.txt`` (an existing ``.txt`` or ``.csv`` file): one ``model[,pretrained]`` pair per line;
  blank lines and lines starting with ``#`` are skipped; ``--pretrained`` then must not be given;
- ``--model 'runs/x/checkpoints/*.pt'`` (a glob; quote it in the shell): every matching file, in natural order
  of the digits in the file names (``step-100`` before ``step-1000``).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from bindscope.errors import BadInput

MODEL_LIST_SUFFIXES = (".txt", ".csv")
GLOB_CHARS = "*?["


def _natural_key(path: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def expand_models(model: str, pretrained: str | None = None) -> list[tuple[str, str | None]]:
    """The ``(model, pretrained)`` pairs that ``--model`` and ``--pretrained`` name (see the module docstring).

    Returns:
        At least one pair, in the order given (glob matches in natural order); duplicates removed.

    Raises:
        BadInput: an empty value, a glob matching nothing, a malformed list file (file and line named),
            ``--pretrained`` with a list file, or two lists of different lengths.
    """
    models: list[str]
    tags: list[str | None] = _split(pretrained) if pretrained is not None else [None]
    if pretrained is not None and not tags:
        raise BadInput("pretrained is empty; give a tag, 'none', a checkpoint file or a comma-separated list",
                       param="pretrained")
    path = Path(model)
    if path.suffix.lower() in MODEL_LIST_SUFFIXES and path.is_file():
        if pretrained is not None:
            raise BadInput(f"model {model!r} is a model list file; put the pretrained tags in the file "
                           "(model,pretrained per line) instead of passing pretrained", param="model")
        pairs = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) > 2 or not parts[0]:
                raise BadInput(f"{model!r} line {number}: {line!r} is not 'model' or 'model,pretrained'")
            pairs.append((parts[0], parts[1] if len(parts) == 2 and parts[1] else None))
        if not pairs:
            raise BadInput(f"model list {model!r} names no model")
        return list(dict.fromkeys(pairs))
    if any(c in model for c in GLOB_CHARS) and not path.exists():
        models = sorted(glob.glob(model), key=_natural_key)
        if not models:
            raise BadInput(f"model {model!r} matches no file", param="model")
    else:
        models = _split(model)
    if not models:
        raise BadInput("model is empty; give a model name, a checkpoint, a list file or a glob", param="model")
    if len(models) > 1 and len(tags) > 1 and len(models) != len(tags):
        raise BadInput(f"model lists {len(models)} models but pretrained={pretrained!r} lists {len(tags)} tags; "
                       "give one tag, or one tag per model (paired in order)", param="model")
    if len(tags) == 1:
        pairs = [(m, tags[0]) for m in models]
    elif len(models) == 1:
        pairs = [(models[0], t) for t in tags]
    else:
        pairs = list(zip(models, tags))
    return list(dict.fromkeys(pairs))
