"""Dataset-level commands of ``bindscope``: ``verify``, ``release`` and ``merge``. (The click options every
generator command shares for scale-out, ``--backend``, ``--scheduler``, ``--num-parts`` and ``--part``, are
:func:`bindscope.cli.options.build_options`.)

Heavy libraries (datasets, huggingface_hub, dask) are imported inside the command functions.
"""

from __future__ import annotations

import click

from bindscope.cli.options import exit_with_problems
from bindscope.cli.types import JOBS
from bindscope.io.ownership import check_output_location


@click.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--no-masks", is_flag=True,
              help="Skip the per-sample mask/table checks (checksums and counts only).")
def bindscope_verify(directory: str, no_masks: bool):
    """Check a dataset DIRECTORY: manifest schema, shard checksums and counts, masks against the object table.

    Exit status 0 when sound, 1 with a list of problems otherwise, 2 when DIRECTORY does not exist.
    """
    import os

    from bindscope.errors import BadInput
    from bindscope.publish.verify import verify_dataset

    if not os.path.isdir(directory):  # a wrong path is bad input (2), not a dataset with problems (1)
        raise BadInput(f"dataset folder {directory!r} does not exist; give the folder of a bindscope dataset")
    problems = verify_dataset(directory, check_masks=not no_masks)
    exit_with_problems(f"{directory}: {len(problems)} problem(s)", problems)
    click.echo(f"{directory}: OK")

@click.command("release")
@click.argument("data", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=str), metavar="RELEASE_DIR",
              help="Release folder to write (Parquet shards + dataset card). With --push and no DATA: "
                   "the release folder to upload.")
@click.option("--check", "release_dir", type=click.Path(file_okay=False, path_type=str), metavar="RELEASE_DIR",
              help="Load RELEASE_DIR with datasets.load_dataset and compare it with its source dataset "
                   "(DATA, or the source recorded in the release). Exit 0 if equal, 1 otherwise.")
@click.option("--push", "repo_id", metavar="REPO_ID", help="Upload the release to the Hub dataset repo REPO_ID "
              "(created if needed). Uses HF_TOKEN / `hf auth login` and HF_ENDPOINT.")
@click.option("--private", is_flag=True, help="With --push: create the repository private.")
@click.option("--commit-message", default="Upload bindscope release", show_default=True,
              help="With --push: the commit message.")
@click.option("--licence", default="other", show_default=True, metavar="ID",
              help="Hub licence id for the card header, e.g. cc-by-4.0, mit (the sources' licences are "
                   "listed in the card body).")
@click.option("--name", "pretty_name", default=None, help="Title of the dataset card.")
@click.option("--max-shard-size", default="500MB", show_default=True, help="Largest Parquet file.")
@click.option("--jobs", type=JOBS, default=1, show_default=True,
              help="Processes encoding PNGs (the output does not depend on it).")
@click.option("--overwrite", is_flag=True, help="Replace an earlier release in --out.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def bindscope_release(data, out, release_dir, repo_id, private, commit_message, licence, pretty_name, max_shard_size,
                      jobs, overwrite, quiet):
    """Publish dataset DATA in the Hugging Face Hub's format: Parquet + dataset card.

    \b
      bindscope release DATA --out RELEASE_DIR            write the release
      bindscope release DATA --out RELEASE_DIR --push USER/NAME   ... and upload it
      bindscope release --out RELEASE_DIR --push USER/NAME        upload an earlier release
      bindscope release --check RELEASE_DIR               load it back, compare with the source

    A broken or unfinished DATA is refused (exit status 2) and nothing is written. See docs/release.md.
    """
    from bindscope.errors import BadInput

    if release_dir is not None:
        if out or repo_id:
            raise BadInput("--check cannot be combined with --out or --push")
        from bindscope.publish.release import check_release

        problems = check_release(release_dir, data)
        exit_with_problems(f"{release_dir}: {len(problems)} difference(s) from the source", problems)
        click.echo(f"{release_dir}: OK, every image, mask, caption, object row and negative equals the source")
        return
    if out is None:
        raise BadInput("give --out RELEASE_DIR (the release to write, or with --push the one to upload)")
    if data is not None:
        check_output_location("--out", out)
    if data is None and repo_id is None:
        raise BadInput("give the dataset to release: bindscope release DATA --out RELEASE_DIR")
    from bindscope.publish.hub import HubError, connect, push_release

    if repo_id is not None:  # check the repo id and reach the Hub before the (long) conversion
        try:
            connect(repo_id)
        except HubError as exc:
            raise click.ClickException(str(exc)) from None
    if data is not None:
        from bindscope.publish.release import make_release

        summary = make_release(data, out, licence=licence, pretty_name=pretty_name,
                               max_shard_size=max_shard_size, jobs=jobs, overwrite=overwrite, repo_id=repo_id,
                               progress=not quiet)
        rows = ", ".join(f"{split} {n}" for split, n in summary["rows"].items())
        click.echo(f"{out}: {len(summary['files']) - 1} Parquet file(s), configs "
                   f"{', '.join(summary['configs'])}; rows: {rows}")
    if repo_id is not None:
        try:
            url = push_release(out, repo_id, private=private, commit_message=commit_message, progress=not quiet)
        except HubError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"pushed {out} to {repo_id}: {url}")

@click.command("merge")
@click.argument("parts", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=str))
@click.option("--out", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Folder of the merged dataset (new or empty, or one of PARTS). Default with one PARTS "
                   "folder: merge in place.")
def bindscope_merge(parts, out):
    """Join the parts of a dataset made with --num-parts K --part I into one dataset.

    PARTS are the part folders (one shared folder, or one per part). Parts from another config, seed,
    generator version or part count are refused (exit status 2) and nothing is written. The result is
    byte-identical to a single run. See docs/scale-out.md.
    """
    from bindscope.build.merge import merge_parts

    if out is not None:
        check_output_location("--out", out)
    target = out or parts[0]
    manifest = merge_parts(list(parts), out)
    total = sum(s["num_samples"] for s in manifest["splits"].values())
    shards = sum(len(s["shards"]) for s in manifest["splits"].values())
    click.echo(f"{target}: merged {shards} shards, {total} samples")
