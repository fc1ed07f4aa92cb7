"""Open-vocabulary detection and box-prompted segmentation from ``transformers``, loaded as data.

- :class:`OpenVocabularyDetector`: an OWLv2 (``Owlv2ForObjectDetection``, e.g.
  ``google/owlv2-base-patch16-ensemble``) or OWL-ViT (``OwlViTForObjectDetection``, e.g.
  ``google/owlvit-base-patch32``) model with its processor (Minderer et al., ECCV 2022 and NeurIPS 2023). For an
  image and its text queries it gives, per query, the highest score over the model's boxes (the sigmoid of its class
  logit, 0..1) and that box in image pixels (``x0, y0, x1, y1``, clipped to the image). OWLv2's processor pads an
  image to a square at the bottom and right before resizing, so its normalised boxes are scaled by the longer side;
  OWL-ViT's resizes to a square, so its boxes are scaled by width and height.
- :class:`BoxSegmenter`: a Segment Anything model (``SamModel``, e.g. ``facebook/sam-vit-base``; Kirillov et al.,
  ICCV 2023) prompted by boxes: one mask per box (``multimask_output=False``), at the image's size.

Queries are ``"a photo of a <name>"`` (:func:`query`), the form of the OWL-ViT examples. Both load as data only:
a local folder is checked first (:func:`bindscope.io.model_folder.check_model_folder`: no Python file, no
``auto_map``), every load passes ``trust_remote_code=False`` and ``use_safetensors=True`` (no pickled weights) under
:func:`~bindscope.io.model_folder.no_prompts`; a Hub repository is downloaded on first use, and offline one that is
not in the Hugging Face cache is one :class:`~bindscope.errors.BadInput`.
"""

from __future__ import annotations

import numpy as np

from bindscope.encoders.model_folder import model_source
from bindscope.errors import check_precision
from bindscope.errors import PRECISION_DTYPES, BadInput, resolve_device
from bindscope.evaluation import check_threshold  # noqa: F401 (named here too)
from bindscope.generators.t2i.prompts import article
from bindscope.io.model_folder import no_prompts, quiet_transformers
from bindscope.io.weights import check_module_finite

DETECTOR_FAMILIES = ("owlv2", "owlvit")
SEGMENTER_FAMILIES = ("sam",)
WEIGHT_FILES = ("model.safetensors",)


def query(name: str) -> str:
    """The detector's text query for a category name: ``"a photo of a dog"``, ``"a photo of an apple"``."""
    return f"a photo of {article(name)} {name}"


def _load(value: str, param: str, families: tuple[str, ...], device: str, precision: str):
    """``(model, processor, identity, family, device)`` of a detector or segmenter (see the module docstring)."""
    import torch
    import transformers

    check_precision(precision)
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{param} {value!r} is not allowed; give a Hugging Face repository id or a model folder",
                       param=param)
    device = resolve_device(device)
    source, identity, local = model_source(value, value, WEIGHT_FILES, param=param)
    try:
        with no_prompts(), quiet_transformers():
            config = transformers.AutoConfig.from_pretrained(source, trust_remote_code=False)
            family = str(getattr(config, "model_type", ""))
            if family not in families:
                raise BadInput(f"{param} {value!r} is a {family or 'unknown'} model; use one of the families "
                               f"{', '.join(families)}", param=param)
            model_class = transformers.SamModel if family == "sam" else transformers.AutoModelForZeroShotObjectDetection
            net = model_class.from_pretrained(source, trust_remote_code=False, use_safetensors=True,
                                              dtype=getattr(torch, PRECISION_DTYPES[precision]))
            processor = transformers.AutoProcessor.from_pretrained(source, trust_remote_code=False)
    except BadInput:
        raise
    except (OSError, ValueError, EOFError, KeyError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInput(f"{param} {value!r} could not be loaded: {reason} (Hub models are downloaded on first use; "
                       "offline, give a local model folder)", param=param) from None
    check_module_finite(net, f"{param} {value!r}", param=param)
    if not local:
        revision = getattr(net.config, "_commit_hash", None)
        identity = f"{source}@{revision}" if revision else source
    return net.to(device).eval(), processor, identity, family, device


class OpenVocabularyDetector:
    """An OWLv2 / OWL-ViT detector (see the module docstring).

    Args:
        detector: a Hugging Face repository id or a local model folder.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``. precision: ``fp32`` | ``bf16`` | ``fp16``.
        batch_size: images per forward pass (>= 1).

    Attributes:
        name (the value given), identity (``repo@revision`` or ``<folder>|<weights>|files=<digest>``), family
        (``owlv2`` or ``owlvit``), device, precision.

    Raises:
        BadInput: a folder with code or without ``model.safetensors``, another model family, or a model that cannot
            be loaded (offline and not cached, unknown repository).
    """

    def __init__(self, detector: str, device: str = "auto", precision: str = "fp32", batch_size: int = 8):
        self.name, self.precision, self.batch_size = str(detector), precision, max(1, int(batch_size))
        self.model, self.processor, self.identity, self.family, self.device = _load(
            self.name, "detector", DETECTOR_FAMILIES, device, precision)

    def info(self) -> dict:
        """The detector's block of a result: name, identity, family, device, precision, query form."""
        return {"name": self.name, "identity": self.identity, "family": self.family, "device": self.device,
                "precision": self.precision, "query": query("<name>")}

    def detect(self, images: list[np.ndarray], queries: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per image, ``(scores, boxes)``: ``(Q,)`` float64 best score of each of its queries (0..1) and ``(Q, 4)``
        float64 its box in pixels ``(x0, y0, x1, y1)``.

        Args:
            images: ``(H, W, 3)`` uint8 RGB arrays (sizes may differ). queries: one list of texts per image.
        """
        import torch

        out: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(images), self.batch_size):
            batch, texts = images[start:start + self.batch_size], queries[start:start + self.batch_size]
            inputs = self.processor(text=[list(t) for t in texts], images=list(batch), return_tensors="pt",
                                    padding="max_length", truncation=True)
            dtype = next(self.model.parameters()).dtype
            inputs = {k: (v.to(self.device, dtype=dtype) if k == "pixel_values" else v.to(self.device))
                      for k, v in inputs.items()}
            with torch.inference_mode():
                result = self.model(**inputs)
            logits = torch.sigmoid(result.logits.float()).cpu().numpy()  # (B, boxes, max queries)
            boxes = result.pred_boxes.float().cpu().numpy()  # (B, boxes, 4) cx, cy, w, h in [0, 1]
            for b, (image, text) in enumerate(zip(batch, texts)):
                scores = logits[b, :, :len(text)]
                best = scores.argmax(axis=0)
                out.append((scores[best, np.arange(len(text))].astype(np.float64),
                            self._pixels(boxes[b, best], image.shape[0], image.shape[1])))
        return out

    def _pixels(self, cxcywh: np.ndarray, height: int, width: int) -> np.ndarray:
        cx, cy, w, h = cxcywh.astype(np.float64).T
        sx, sy = (max(height, width),) * 2 if self.family == "owlv2" else (width, height)
        xyxy = np.stack([(cx - w / 2) * sx, (cy - h / 2) * sy, (cx + w / 2) * sx, (cy + h / 2) * sy], axis=-1)
        return np.clip(xyxy, 0, [width, height, width, height]).reshape(-1, 4)


class BoxSegmenter:
    """A SAM model prompted by boxes (see the module docstring).

    Args:
        segmenter: a Hugging Face repository id or a local model folder. device, precision: as the detector's.

    Raises:
        BadInput: as :class:`OpenVocabularyDetector` (family ``sam``).
    """

    def __init__(self, segmenter: str, device: str = "auto", precision: str = "fp32"):
        self.name, self.precision = str(segmenter), precision
        self.model, self.processor, self.identity, self.family, self.device = _load(
            self.name, "segmenter", SEGMENTER_FAMILIES, device, precision)

    def info(self) -> dict:
        """The segmenter's block of a result: name, identity, family, device, precision."""
        return {"name": self.name, "identity": self.identity, "family": self.family, "device": self.device,
                "precision": self.precision}

    def areas(self, image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """``(N,)`` int64 pixel areas of the masks SAM predicts for the ``(N, 4)`` boxes ``(x0, y0, x1, y1)``
        (pixels of ``image``, an ``(H, W, 3)`` uint8 array); an empty ``boxes`` gives an empty array."""
        import torch

        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        if not len(boxes):
            return np.zeros(0, np.int64)
        inputs = self.processor(images=[image], input_boxes=[boxes.tolist()], return_tensors="pt")
        dtype = next(self.model.parameters()).dtype
        with torch.inference_mode():
            result = self.model(pixel_values=inputs["pixel_values"].to(self.device, dtype=dtype),
                                input_boxes=inputs["input_boxes"].to(self.device, dtype=dtype),
                                multimask_output=False)
        masks = self.processor.post_process_masks(result.pred_masks.float().cpu(), inputs["original_sizes"],
                                                  inputs["reshaped_input_sizes"])[0]  # (N, 1, H, W) bool
        return masks.reshape(len(boxes), -1).sum(dim=1).numpy().astype(np.int64)
