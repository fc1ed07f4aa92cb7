"""``bindscope.comco.render``: the library call behind ``comco render``.

Example (a notebook)::

    import bindscope
    result = bindscope.comco.render("data/simco", set="simco18", objects="2-3", n=100, resolution=128)
    result.manifest["statistics"]["scenes"]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.build.backends import BuildSettings
from bindscope.errors import BadInput, check_device, check_int
from bindscope.limits import MAX_JOBS, MAX_SEED
from bindscope.io.ownership import check_output_location

if TYPE_CHECKING:
    from bindscope.build.builder import BuildResult


MAX_THREADS = 1024  # Cycles threads per worker


def _require_bpy() -> None:
    """BadInput unless the Blender Python module is installed (checked without importing it)."""
    if importlib.util.find_spec("bpy") is None:
        raise BadInput("rendering needs the Blender Python module: pip install 'bindscope[render]' "
                       "(bpy==5.0.1, Python 3.11)")


def render(out: str | os.PathLike, config: str | os.PathLike | dict | None = None, *, seed: int = 0, jobs: int = 1,
           threads: int | None = None, device: str = "auto", overwrite: bool = False, progress: bool = True,
           build: BuildSettings | None = None, **overrides) -> BuildResult:
    """Render a ComCO / SimCO dataset (Abbasi et al., CVPR 2025; docs/comco.md) with headless Blender into ``out``.

    Config precedence: :data:`~bindscope.generators.comco.config.DEFAULT_CONFIG` < ``config`` < ``overrides``,
    validated by ``bindscope/schemas/comco_config.json``; the layout is checked by planning before writing.

    Args:
        out: dataset folder (created; refused when it holds another dataset unless ``overwrite``).
        config: a YAML config file path, or the same mapping as a dict.
        seed: >= 0; same config + seed => byte-identical dataset for any ``jobs``, ``backend`` or parts.
        jobs: worker processes, 1..256, each with one persistent Blender session.
        threads: Cycles threads per worker, 1..1024 (default: CPU count // jobs, at least 1); not in the config.
        device: ``"auto"`` (GPU where Blender finds one), ``"cpu"``, ``"cuda"`` (every GPU Blender finds: OptiX,
            else CUDA, ...) or ``"cuda:N"`` (the N-th of them). Bit-identical output for any ``jobs`` and
            ``threads`` holds on the CPU device; GPU renders are not bit-identical to CPU ones.
        overwrite: replace an existing bindscope dataset or run in ``out``.
        progress: tqdm progress bar on stderr.
        build: the scale-out, a :class:`~bindscope.build.backends.BuildSettings` (backend, scheduler, num_parts,
            part; default: this machine, one part).
        **overrides: config keys, e.g. ``set="simco18"``, ``objects="2-5"`` (or ``{"min": 2, "max": 5}``),
            ``size_mode="equal"``, ``resolution=128`` (pixels), ``samples=16``, ``n=1000``,
            ``references=False``, ``attributes="colour,material"`` (or a list), ``task="conjunctive-search"``,
            ``depth=True``, ``saliency="size"`` with ``saliency_bias=0.75`` (mention order, docs/comco.md);
            None values are ignored.

    Returns:
        A :class:`~bindscope.build.builder.BuildResult`.

    Raises:
        BadInput: a bad value (named, with what is allowed), an impossible layout, an unusable ``out``, bpy not
            installed, no GPU with ``device="cuda"`` (all before writing).
        GenerationError: after writing began, a scene (or reference image) without an acceptable render in
            ``visibility.max_tries`` attempts; the message names the split, the index and the last rejection.
            Finished shards are kept (the same call resumes); a folder this run created is removed if it holds
            no finished shard.
    """
    from bindscope.build.builder import BuildResult, build_dataset, finish_if_done, output_state
    from bindscope.generators.comco.config import resolve_render_config
    from bindscope.generators.comco.generator import ComcoGenerator
    from bindscope.io.canonical import config_sha256

    build = BuildSettings.taken(build, overrides)
    check_int("seed", seed, 0, MAX_SEED)
    check_int("jobs", jobs, 1, MAX_JOBS, what="worker processes")
    check_device(device)
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise BadInput(f"threads {threads} is out of range; allowed: 1..{MAX_THREADS} Cycles threads per "
                       "worker", param="threads")
    check_output_location("out", out)
    resolved = resolve_render_config(config, overrides)
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    generator = ComcoGenerator(resolved, seed=seed, threads=threads, device=device)
    generator.check()
    run_id = config_sha256("comco", resolved, seed)
    if build.num_parts == 1 and output_state(out, run_id, overwrite, generator.extends) == "done":
        manifest = finish_if_done(out, run_id)
        if manifest is not None:
            return BuildResult(Path(out), manifest, already_complete=True)
    _require_bpy()
    if device.startswith("cuda"):  # fail before writing when Blender finds no GPU (the session is reused with --jobs 1)
        generator._session()
    # a run that fails before its first shard (e.g. scene 0 finds no acceptable render) leaves no folder behind
    made = build_dataset(generator, out, jobs=jobs, overwrite=overwrite, progress=progress,
                         **dataclasses.asdict(build))
    if build.num_parts > 1:
        return BuildResult(Path(out), None, part_record=made)
    return BuildResult(Path(out), made)
