"""``comco assets import|fetch|list``: real 3D models for the ComCO categories, and what each set holds.

The commands parse, print and exit; the work is :func:`bindscope.comco.import_assets` and
:func:`bindscope.comco.fetch_assets` (:mod:`bindscope.generators.comco.asset_api`, which imports bpy and
objaverse only when called, so ``comco assets --help`` stays fast).
"""

from __future__ import annotations

import json

import click

from bindscope.cli.types import count


def _echo_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _report(registry: dict, target: str) -> None:
    from bindscope.generators.comco.assets import UNKNOWN_LICENCE

    unknown = [e["name"] for e in registry["categories"] if e["licence"] == UNKNOWN_LICENCE]
    click.echo(f"{target}: {len(registry['categories'])} model(s) imported and normalised; "
               f"use it with `comco render --set {target}`")
    if unknown:
        click.echo(f"warning: no licence recorded for {', '.join(unknown)} (give --licence or a mapping entry)",
                   err=True)


@click.group("assets")
def comco_assets():
    """Object sets: import real 3D models, fetch them from Objaverse, list what each category has."""

@comco_assets.command("import")
@click.argument("folder", type=click.Path(path_type=str))
@click.option("--out", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Asset folder to write (default: FOLDER itself).")
@click.option("--mapping", "mapping_file", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="YAML/JSON file mapping file names to categories (default: FOLDER/mapping.yaml if present).")
@click.option("--licence", default=None,
              help="Licence recorded for files without one in the mapping, e.g. 'CC-BY-4.0 (author, url)'.")
def comco_assets_import(folder, out, mapping_file, licence):
    """Import the glTF/GLB, OBJ, FBX and .blend models in FOLDER as an asset set.

    A file's category is its name (traffic_light.glb -> "traffic light") or its mapping entry
    (`file: category` or `file: {category, licence, source, up, front, size_class, nominal_size_m}`).
    Each model is joined into one object, turned upright (up -> +Z, front -> -Y), normalised (base centre
    at the origin, largest dimension 1.0) and saved as FOLDER/models/<name>.blend; registry.json records
    source, licence and sha256. A broken file stops the import with its name and changes nothing.
    """
    from bindscope.generators.comco.asset_api import import_assets

    _report(import_assets(folder, out, mapping_file, licence), out or folder)

@comco_assets.command("fetch")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Asset folder to write.")
@click.option("--categories", default=None,
              help="Comma-separated ComCO categories (default: all 72).")
@click.option("--lvis-mapping", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="YAML file {comco72: {category: [LVIS names]}} (default: the shipped mapping).")
@click.option("--jobs", type=count(1, 64), default=4, show_default=True,
              help="Download processes.")
def comco_assets_fetch(out, categories, lvis_mapping, jobs):
    """Download one CC-BY or CC0 Objaverse-LVIS model per ComCO category and import it (needs network).

    Candidates are the objects of the category's LVIS classes (bindscope/assets/objaverse_lvis.yaml);
    only licences 'by' (CC-BY-4.0) and 'cc0' (CC0-1.0) are kept; the most-liked one wins (ties by uid).
    The licence text with title, author and URL goes to the registry.
    """
    from bindscope.generators.comco.asset_api import fetch_assets

    wanted = [c.strip() for c in categories.split(",")] if categories else None
    registry, missing = fetch_assets(out, wanted, lvis_mapping, jobs)
    _report(registry, out)
    if missing:
        click.echo(f"no CC-BY/CC0 model for: {', '.join(missing)} (these keep no model in {out})", err=True)

@comco_assets.command("list")
@click.argument("set_spec", metavar="[SET]", default="comco72", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def comco_assets_list(set_spec, as_json):
    """Show the categories of SET (comco72, simco18 or an asset folder): id, size class, nominal size,
    model source and licence. For an asset folder, also which comco72 categories it lacks."""
    from bindscope.generators.comco.registry import BUILTIN_SETS, load_set, read_folder_registry

    categories = load_set(set_spec)
    files = {}
    if set_spec not in BUILTIN_SETS:
        files = {e["name"]: e.get("file", "") for e in read_folder_registry(set_spec)["categories"]}
    if as_json:
        click.echo(json.dumps([dict(c.to_dict(), **({"file": files[c.name]} if files else {}))
                               for c in categories], indent=2))
        return
    rows = [[c.id, c.name, c.size_class, f"{c.nominal_size_m:g}", c.source, c.licence] for c in categories]
    _echo_table(rows, ["id", "name", "size class", "size (m)", "model", "licence"])
    click.echo(f"{len(categories)} categories in {set_spec}")
    if set_spec not in BUILTIN_SETS:
        lacking = sorted({c.name for c in load_set("comco72")} - {c.name for c in categories})
        if lacking:
            click.echo(f"comco72 categories without a model here ({len(lacking)}): {', '.join(lacking)}")
