"""Text-to-image pipelines from ``diffusers``, loaded as data: which one, checked before loading, and run seeded.

``--pipeline`` is a Hugging Face repository id (``stabilityai/sd-turbo``; downloaded on first use, then read from
the Hugging Face cache) or a local folder written by ``save_pretrained`` (``model_index.json`` and one subfolder
per component). Before ``diffusers`` reads a byte of it, :func:`resolve_pipeline`:

- reads ``model_index.json`` (for a repository: that file alone is fetched first) and refuses custom code: the
  pipeline class (``_class_name``) must be a class of ``diffusers`` (a list naming a file of the repository is
  custom code), a text-to-image one (its call takes a ``prompt`` and no input image), and every component must
  come from ``diffusers`` or ``transformers`` (or be left out: ``[null, null]``); ``custom_pipeline`` keys are
  refused;
- then takes the whole folder (a repository is downloaded with ``use_safetensors=True``: no pickled weights) and
  runs :func:`bindscope.io.model_folder.check_model_folder` on it: no Python file anywhere, no ``auto_map``,
  every safetensors header checked against its file.

The pipeline is then loaded with ``DiffusionPipeline.from_pretrained(folder, use_safetensors=True,
trust_remote_code=False)`` under :func:`~bindscope.io.model_folder.no_prompts`, once per process
(:func:`load_pipeline`). :func:`generate_images` runs one prompt: ``images`` images, each from its own CPU
``torch.Generator`` seed (so the initial noise is the same on any device), ``num_inference_steps``,
``guidance_scale``, square images of ``resolution`` pixels, returned as uint8 RGB.

What identifies a pipeline in a dataset's config (:attr:`PipelineSource.identity`): the repository id and the
revision (commit) loaded, or a folder's name and one sha256 over all its files
(:func:`bindscope.io.model_folder.files_digest`), with the pipeline class.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.errors import PRECISION_DTYPES, BadInput
from bindscope.io.model_folder import check_model_folder, files_digest, no_prompts, read_config_json, refuse_code
from bindscope.io.weights import check_module_finite

MODEL_INDEX = "model_index.json"
LIBRARIES = ("diffusers", "transformers")
IMAGE_INPUTS = ("image", "control_image", "mask_image")
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class PipelineSource:
    """A checked pipeline: ``folder`` (the local folder to load: the given one, or the Hugging Face cache's
    snapshot) and ``identity`` (JSON-serialisable, recorded in the dataset's config: ``source``, ``class`` and
    ``revision`` or ``files_sha256``)."""

    folder: str
    identity: dict


def _refuse(pipeline: str, why: str) -> BadInput:
    return refuse_code(pipeline, why, "pipeline")


def check_model_index(path: Path, pipeline: str) -> str:
    """The pipeline class named by the ``model_index.json`` at ``path``, after refusing custom code (see the
    module docstring).

    Raises:
        BadInput: a file that is not a JSON object, a custom or unknown pipeline class, one that is not
            text-to-image, a component from another library, a ``custom_pipeline`` key.
    """
    index = read_config_json(path, pipeline, "pipeline")
    if not isinstance(index, dict):
        raise BadInput(f"pipeline {pipeline!r}: {path} is not a JSON object", param="pipeline")
    name = index.get("_class_name")
    if not isinstance(name, str):
        raise _refuse(pipeline, f"{path} names the pipeline class {name!r}, which is not a class of diffusers")
    for key, value in index.items():
        if "custom_pipeline" in key:
            raise _refuse(pipeline, f"{path} holds {key!r}")
        if key.startswith("_") or not isinstance(value, list):
            continue
        if len(value) != 2 or value[0] not in (*LIBRARIES, None) or not isinstance(value[1], (str, type(None))):
            raise _refuse(pipeline, f"{path}: component {key!r} is {json.dumps(value)[:120]}; components come "
                                    f"from {' or '.join(LIBRARIES)}")
    import diffusers

    cls = getattr(diffusers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, diffusers.DiffusionPipeline)):
        raise _refuse(pipeline, f"{path} names the pipeline class {name!r}, which is not a pipeline of diffusers "
                                f"{diffusers.__version__}")
    parameters = inspect.signature(cls.__call__).parameters
    if "prompt" not in parameters or any(p in parameters for p in IMAGE_INPUTS):
        raise BadInput(f"pipeline {pipeline!r}: {name} is not a text-to-image pipeline (its call needs an input "
                       "image or takes no prompt); give a text-to-image pipeline such as stabilityai/sd-turbo",
                       param="pipeline")
    return name


def _unreachable(pipeline: str, exc: Exception) -> BadInput:
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return BadInput(f"pipeline {pipeline!r} is not a folder holding {MODEL_INDEX} and could not be fetched as a "
                    f"Hugging Face repository ({type(exc).__name__}: {reason}); repositories are downloaded on first "
                    "use: offline, give a local pipeline folder or one already in the Hugging Face cache",
                    param="pipeline")


def resolve_pipeline(pipeline: str, hash_files: bool = True) -> PipelineSource:
    """Check the pipeline ``pipeline`` (a repository id or a folder) without loading it; download a repository's
    files (safetensors weights only) into the Hugging Face cache when they are not there yet.

    Args:
        pipeline: the ``--pipeline`` value. hash_files: hash a local folder's files for its identity (a
            repository is identified by its revision).

    Raises:
        BadInput: a file, a folder without ``model_index.json``, a name that is neither a folder nor a repository
            id, a repository that cannot be fetched (offline and not cached, unknown), custom code (see
            :func:`check_model_index`, :func:`~bindscope.io.model_folder.check_model_folder`).
    """
    if not isinstance(pipeline, (str, os.PathLike)) or not str(pipeline).strip():
        raise BadInput(f"pipeline {pipeline!r} is not allowed; give a Hugging Face repository id or a pipeline "
                       "folder", param="pipeline")
    pipeline = str(pipeline)
    local = Path(pipeline)
    if local.is_dir():
        if not (local / MODEL_INDEX).is_file():
            raise BadInput(f"pipeline {pipeline!r}: the folder holds no {MODEL_INDEX}; give a diffusers pipeline "
                           "folder (save_pretrained) or a Hugging Face repository id", param="pipeline")
        files = check_model_folder(local, pipeline, hash_files=hash_files, param="pipeline")
        name = check_model_index(local / MODEL_INDEX, pipeline)
        identity = {"source": local.resolve().name, "class": name, "files_sha256": files_digest(files)}
        return PipelineSource(str(local.resolve()), identity)
    if local.exists():
        raise BadInput(f"pipeline {pipeline!r} is a file; give a pipeline folder or a Hugging Face repository id",
                       param="pipeline")
    if not REPO_ID.fullmatch(pipeline):
        raise BadInput(f"pipeline {pipeline!r} is neither a folder nor a Hugging Face repository id "
                       "(owner/name)", param="pipeline")
    from huggingface_hub import hf_hub_download

    try:
        index = hf_hub_download(pipeline, MODEL_INDEX)
    except Exception as exc:  # offline, unknown repository, no such file, network: one line naming it
        raise _unreachable(pipeline, exc) from None
    name = check_model_index(Path(index), pipeline)
    from diffusers import DiffusionPipeline

    try:
        with no_prompts():
            folder = Path(DiffusionPipeline.download(pipeline, use_safetensors=True, trust_remote_code=False))
    except Exception as exc:
        raise _unreachable(pipeline, exc) from None
    check_model_folder(folder, pipeline, hash_files=False, param="pipeline")
    return PipelineSource(str(folder), {"source": pipeline, "class": name, "revision": folder.name})


_LOADED: dict[tuple[str, str, str], object] = {}


def load_pipeline(folder: str, precision: str, device: str):
    """The pipeline of a checked ``folder`` (:func:`resolve_pipeline`) in ``precision`` on ``device``, loaded once
    per process (progress bars off).

    Raises:
        BadInput: diffusers cannot load it (a component missing or of another shape), or a component's weights hold
            NaN or infinite values.
    """
    key = (folder, precision, device)
    if key not in _LOADED:
        import torch
        from diffusers import DiffusionPipeline
        from diffusers.utils import logging as diffusers_logging

        from bindscope.io.model_folder import quiet_transformers

        bars = diffusers_logging.is_progress_bar_enabled()
        diffusers_logging.disable_progress_bar()
        level = diffusers_logging.get_verbosity()
        diffusers_logging.set_verbosity_error()
        try:
            with no_prompts(), quiet_transformers():
                pipe = DiffusionPipeline.from_pretrained(folder, use_safetensors=True, trust_remote_code=False,
                                                         low_cpu_mem_usage=False,
                                                         dtype=getattr(torch, PRECISION_DTYPES[precision]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise BadInput(f"pipeline folder {folder!r} could not be loaded by diffusers: {reason}",
                           param="pipeline") from None
        finally:
            diffusers_logging.set_verbosity(level)
            if bars:
                diffusers_logging.enable_progress_bar()
        for name, component in pipe.components.items():
            if hasattr(component, "state_dict"):
                check_module_finite(component, f"pipeline folder {folder!r}: component {name!r}", param="pipeline")
        pipe.set_progress_bar_config(disable=True)
        _LOADED[key] = pipe.to(device)
    return _LOADED[key]


def vae_scale(folder: str) -> int:
    """The pixels per latent cell of a pipeline folder's VAE (``2 ** (len(block_out_channels) - 1)``; 8 for Stable
    Diffusion), read from ``vae/config.json``; 8 when the folder has none. Image sides must be multiples of it."""
    path = Path(folder) / "vae" / "config.json"
    if not path.is_file():
        return 8
    config = read_config_json(path, folder, "pipeline")
    blocks = config.get("block_out_channels") if isinstance(config, dict) else None
    return 2 ** (len(blocks) - 1) if isinstance(blocks, list) and blocks else 8


def generate_images(pipe, prompt: str, seeds: list[int], steps: int, guidance: float,
                    resolution: int) -> tuple[np.ndarray, list[bool | None]]:
    """Run ``pipe`` on ``prompt`` once for ``len(seeds)`` images, image ``j`` from a CPU ``torch.Generator``
    seeded with ``seeds[j]``.

    Returns:
        ``(images, nsfw)``: ``(len(seeds), resolution, resolution, 3)`` uint8 RGB (the pipeline's [0, 1] floats
        times 255, rounded), and per image the pipeline's safety-checker flag (None: no safety checker).
    """
    import torch

    generators = [torch.Generator("cpu").manual_seed(int(s)) for s in seeds]
    with torch.inference_mode():
        out = pipe(prompt, num_inference_steps=steps, guidance_scale=guidance, height=resolution, width=resolution,
                   num_images_per_prompt=len(seeds), generator=generators, output_type="np")
    images = np.clip(np.rint(np.asarray(out.images, dtype=np.float64) * 255), 0, 255).astype(np.uint8)
    flags = getattr(out, "nsfw_content_detected", None)
    nsfw = [None] * len(seeds) if flags is None else [bool(f) for f in flags]
    return images, nsfw
