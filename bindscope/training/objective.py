"""The objective and schedule of ``bindscope train``, and what stops a run whose numbers stop being finite.

Objective: open_clip's symmetric contrastive loss (``open_clip.loss.ClipLoss``: mean of image->text and
text->image cross-entropy over the batch, logits = ``exp(logit_scale) * cos``). With hard negatives (NegCLIP,
Yuksekgonul et al., ICLR 2023) the M attribute-swapped captions are appended to the B captions as extra
image->text candidates (:mod:`bindscope.training.data`: the dataset's stored binding negatives or shuffled
captions): ``loss = (CE(L_it[B, B+M], arange(B)) + CE(L_ti[B, B], arange(B))) / 2`` (the text->image term ranks
images for the B true captions only). Schedule: the learning rate warmed up linearly over ``warmup_steps`` and
then cosine-decayed to 0 at ``steps`` (:func:`lr_factor`).
"""

from __future__ import annotations

import math
from typing import Callable

from bindscope.errors import GenerationError


def clip_loss(image_features, text_features, logit_scale, num_captions: int):
    """open_clip's CLIP loss, with NegCLIP hard negatives when ``text_features`` has more rows than images.

    Args:
        image_features: ``(B, D)`` L2-normalised image embeddings.
        text_features: ``(B + M, D)`` L2-normalised: the B matching captions (row i matches image i), then
            M hard-negative captions.
        logit_scale: the scalar ``exp(logit_scale)`` multiplier (a tensor).
        num_captions: B.

    Returns:
        scalar tensor: ``(CE(image->all B+M texts) + CE(caption->B images)) / 2`` (plain ``ClipLoss`` when M=0).
    """
    import torch
    import torch.nn.functional as F
    from open_clip.loss import ClipLoss

    loss_fn = ClipLoss()
    if text_features.shape[0] == num_captions:
        return loss_fn(image_features, text_features, logit_scale)
    logits_per_image, logits_per_text = loss_fn.get_logits(image_features, text_features, logit_scale)
    labels = torch.arange(num_captions, device=image_features.device)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text[:num_captions], labels)) / 2


def lr_factor(warmup: int, total: int) -> Callable[[int], float]:
    """The learning-rate multiplier of step ``step`` (0-based, as ``torch.optim.lr_scheduler.LambdaLR`` calls it):
    linear warm-up ``(step + 1) / warmup`` over ``warmup`` steps, then cosine decay from 1 to 0 at ``total``."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return factor


class TrainingDiverged(GenerationError):
    """The loss or a weight became NaN or infinite: training stops (the CLI's exit status 1) and nothing of
    that step is saved, neither a model file nor a checkpoint (the run folder keeps its last finite
    checkpoint, if any).

    Attributes: ``step`` (the optimiser step, 1-based), ``what`` (``"the loss"`` or ``"weight 'NAME'"``) and
    ``value`` (the first non-finite value).
    """

    def __init__(self, step: int, what: str, value: float, saved_step: int = 0, lr: float | None = None):
        kept = f"the checkpoint of step {saved_step} is kept" if saved_step else "no checkpoint was written"
        hint = f"; a lower lr than {lr:g} may help" if lr is not None else ""
        super().__init__(f"training stopped at step {step}: {what} is {value!r}, not a finite number; no model "
                         f"was saved ({kept}){hint}")
        self.step, self.what, self.value = step, what, value


def non_finite_tensor(tensors: dict) -> tuple[str, float] | None:
    """``(name, value)`` of the first floating-point tensor of ``tensors`` (a state dict) holding a NaN or an
    infinity, and that value; None when every value is finite."""
    import torch

    names = [name for name, t in tensors.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not names:
        return None
    finite = torch.stack([torch.isfinite(tensors[name]).all() for name in names])
    if bool(finite.all()):
        return None
    name = names[int((~finite).nonzero()[0, 0])]
    tensor = tensors[name].detach()
    return name, float(tensor[~torch.isfinite(tensor)].reshape(-1)[0])
