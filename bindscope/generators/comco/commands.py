"""``comco render`` and ``comco preview`` (bpy and matplotlib are imported inside the commands)."""

from __future__ import annotations

import os

import click

from bindscope.dataset.commands import build_options, check_output_location, report_build
from bindscope.errors import BadInput


MAX_JOBS = 256  # worker processes (each holds a Blender session)
MAX_THREADS = 1024  # Cycles threads per worker


def resolve_render_config(config_file: str | None, flags: dict) -> dict:
    """Defaults < ``--config`` YAML < flags, validated by the ``comco_config`` schema plus cross-key checks.

    ``flags`` holds the CLI values (``None`` = not given): ``set``, ``objects`` (text), ``size_mode``,
    ``resolution``, ``samples``, ``n``, ``references``, ``attributes`` (text), ``task``, ``depth``. The tables
    ``colours`` and ``materials`` of a ``--config`` file replace the default tables as a whole (they are not
    merged name by name).

    Raises:
        BadInput: a schema violation, ``objects.min > objects.max``, or ``objects.weights`` whose length is not
            the number of counts.
    """
    from bindscope.config import read_yaml, resolve_config
    from bindscope.generators.comco.attributes import parse_attributes
    from bindscope.generators.comco.planning import DEFAULT_CONFIG, parse_objects

    layer: dict = {}
    for key in ("set", "size_mode", "resolution", "samples", "n", "references", "task", "depth"):
        if flags.get(key) is not None:
            layer[key] = flags[key]
    if flags.get("objects") is not None:
        low, high = parse_objects(flags["objects"])
        layer["objects"] = {"min": low, "max": high}
    if flags.get("attributes") is not None:
        layer["attributes"] = parse_attributes(flags["attributes"])
    file_layer = read_yaml(config_file) if config_file else None
    defaults = {k: v for k, v in DEFAULT_CONFIG.items()
                if not (file_layer and k in ("colours", "materials") and isinstance(file_layer.get(k), dict))}
    config = resolve_config("comco_config", defaults, file_layer, layer)
    objects = config["objects"]
    if objects["min"] > objects["max"]:
        raise BadInput(f"config: objects: min {objects['min']} is greater than max {objects['max']}")
    weights = objects.get("weights")
    if weights is not None:
        k = objects["max"] - objects["min"] + 1
        if len(weights) != k or sum(weights) <= 0:
            raise BadInput(f"config: objects.weights {weights}: need {k} non-negative weights (one per count "
                           f"{objects['min']}..{objects['max']}) with a positive sum")
    return config


def _first_missing(out: str):
    """The outermost missing folder on the way to ``out`` (``out`` itself if only it is missing); None if it exists."""
    from pathlib import Path

    path = Path(out).absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _remove_if_nothing_made(out) -> None:
    """Delete the folder ``out`` (created by this run) if it holds no file but the run-state record: a run that
    failed before finishing a shard leaves nothing behind. A folder with any finished shard is kept (it resumes)."""
    import shutil
    from pathlib import Path

    from bindscope.dataset.build import RUN_STATE
    from bindscope.dataset.ownership import MARKER

    root = Path(out)
    if root.is_dir() and not any(p.is_file() and p.name not in (RUN_STATE, MARKER) for p in root.rglob("*")):
        shutil.rmtree(root, ignore_errors=True)


def _require_bpy() -> None:
    """BadInput unless the Blender Python module is installed (checked without importing it)."""
    import importlib.util

    if importlib.util.find_spec("bpy") is None:
        raise BadInput("comco render needs the Blender Python module: pip install 'bindscope[render]' "
                       "(bpy==5.0.1, Python 3.11)")


def register(group: click.Group) -> None:
    """Add ``render`` and ``preview`` to the ``comco`` group."""

    @group.command("render")
    @click.option("--out", "out", required=True, type=click.Path(path_type=str), help="Output dataset folder.")
    @click.option("-n", "n", type=int, default=None, help="Number of multi-object scenes [config n: 1000].")
    @click.option("--objects", default=None,
                  help="Objects per scene: a count (3) or a range (2-5), counts 1..5, spread evenly [2-5].")
    @click.option("--set", "set_spec", default=None,
                  help="Object set: comco72, simco18, or an asset folder from `comco assets import` [comco72].")
    @click.option("--size-mode", type=click.Choice(["one-large", "equal", "random"]), default=None,
                  help="one-large: one object at scale.large, the rest at scale.small; equal; random [one-large].")
    @click.option("--resolution", type=int, default=None, help="Image side in pixels (square) [224].")
    @click.option("--samples", type=int, default=None, help="Cycles samples per pixel of the RGB render [16].")
    @click.option("--references/--no-references", default=None,
                  help="Also render the single-object reference split (one image per category) [on].")
    @click.option("--attributes", default=None,
                  help="Per-object attributes sampled and written into captions: any of colour, material, size "
                       "(comma-separated), e.g. colour,material [none].")
    @click.option("--task", type=click.Choice(["scenes", "conjunctive-search"]), default=None,
                  help="scenes, or conjunctive-search: the target conjunction (config conjunctive_search.target) "
                       "present or absent among distractors sharing one attribute with it [scenes].")
    @click.option("--depth/--no-depth", default=None, help="Also store a float16 depth map per sample [off].")
    @click.option("--seed", type=int, default=0, show_default=True, help="Dataset seed.")
    @click.option("--jobs", type=int, default=1, show_default=True,
                  help=f"Worker processes (1..{MAX_JOBS}), each with one persistent Blender session.")
    @click.option("--threads", type=int, default=None,
                  help=f"Cycles threads per worker, 1..{MAX_THREADS} [CPU count // jobs, at least 1]. Not part of the "
                       "config.")
    @click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
                  help="Cycles device: GPU where Blender finds one (auto), or force cpu / gpu.")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=str), default=None,
                  help="YAML config (schema bindscope/schemas/comco_config.json); flags override it.")
    @click.option("--overwrite", is_flag=True, help="Replace an existing bindscope dataset or run in --out.")
    @click.option("--quiet", is_flag=True, help="No progress bar.")
    @build_options
    def render(out, n, objects, set_spec, size_mode, resolution, samples, references, attributes, task, depth,
               seed, jobs, threads, device, config_file, overwrite, quiet, **build):
        """Render ComCO / SimCO scenes with exact per-object instance masks into a dataset folder OUT.

        Headless Blender (bpy, Cycles). Splits: `scenes` (multi-object images, captions = names joined with
        " and " in a seeded random order) and `references` (one image per category, for IOR). Planning is
        validated before anything is written; an interrupted run resumes when repeated. Example:

            comco render --objects 2-5 -n 1000 --out data/comco
        """
        from bindscope.dataset.build import build_dataset, check_output, finish_if_done
        from bindscope.dataset.manifest import config_sha256
        from bindscope.generators.comco.generator import ComcoGenerator

        if seed < 0:
            raise BadInput(f"--seed must be >= 0, got {seed}")
        if not 1 <= jobs <= MAX_JOBS:
            raise BadInput(f"--jobs {jobs} is out of range; allowed: 1..{MAX_JOBS} worker processes")
        if threads is not None and not 1 <= threads <= MAX_THREADS:
            raise BadInput(f"--threads {threads} is out of range; allowed: 1..{MAX_THREADS} Cycles threads per "
                           "worker")
        check_output_location("--out", out)
        config = resolve_render_config(config_file, {
            "set": set_spec, "objects": objects, "size_mode": size_mode, "resolution": resolution,
            "samples": samples, "n": n, "references": references, "attributes": attributes, "task": task,
            "depth": depth})
        threads = threads or max(1, (os.cpu_count() or 1) // jobs)
        generator = ComcoGenerator(config, seed=seed, threads=threads, device=device)
        generator.check()
        run_id = config_sha256("comco", config, seed)
        if build.get("num_parts", 1) == 1 and check_output(out, run_id, overwrite, generator.extends) == "done" \
                and finish_if_done(out, run_id) is not None:
            click.echo(f"{out}: already complete (same config and seed); nothing to do")
            return
        _require_bpy()
        if device == "gpu":  # fail before writing when Blender finds no GPU (the session is reused with --jobs 1)
            generator._session()
        created = _first_missing(out)  # the outermost folder this run creates (None: --out exists)
        try:
            manifest = build_dataset(generator, out, jobs=jobs, overwrite=overwrite, progress=not quiet, **build)
        except BadInput:
            if created is not None:  # e.g. scene 1 fails the visibility check: leave no empty run folder behind
                _remove_if_nothing_made(created)
            raise
        if manifest.get("format") == "bindscope-part":  # --num-parts K: no manifest until `bindscope merge`
            report_build(manifest, out)
            return
        splits = ", ".join(f"{k}: {v['num_samples']}" for k, v in manifest["splits"].items())
        click.echo(f"{out}: {splits} (bindscope verify {out} checks it)")

    @group.command("preview")
    @click.argument("directory", type=click.Path(file_okay=False, path_type=str))
    @click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=str),
                  help="Output image (PNG).")
    @click.option("--split", default="scenes", show_default=True, help="Split to show.")
    @click.option("-n", "count", type=int, default=12, show_default=True, help="Number of samples (from the first).")
    @click.option("--cols", type=int, default=4, show_default=True, help="Grid columns.")
    def preview(directory, out, split, count, cols):
        """Save a grid of DIRECTORY's images with mask outlines, object names and mention order."""
        from bindscope.generators.comco.preview import preview_grid

        path = preview_grid(directory, out, split=split, count=count, cols=cols)
        click.echo(f"wrote {path}")
