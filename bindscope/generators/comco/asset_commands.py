"""``comco assets import|fetch|list``: real 3D models for the ComCO categories, and what each set holds.

bpy and objaverse are imported inside the commands, so ``comco assets --help`` stays fast.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from bindscope.errors import BadInput


def _echo_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _import(folder: str, out: str | None, mapping_file: str | None, licence: str | None) -> dict:
    from tqdm import tqdm

    from bindscope.generators.comco.assets import UNKNOWN_LICENCE, plan_import

    from bindscope.dataset.commands import check_output_location

    check_output_location("--out", out or folder)  # the output first: no model file is read for a bad --out
    items = plan_import(folder, mapping_file, licence)  # every other check happens here, before anything is written
    from bindscope.generators.comco.blender.importer import import_folder

    target = out or folder
    registry = import_folder(items, target,
                             progress=lambda it: tqdm(it, desc="importing", unit="model", file=sys.stderr))
    unknown = [e["name"] for e in registry["categories"] if e["licence"] == UNKNOWN_LICENCE]
    click.echo(f"{target}: {len(registry['categories'])} model(s) imported and normalised; "
               f"use it with `comco render --set {target}`")
    if unknown:
        click.echo(f"warning: no licence recorded for {', '.join(unknown)} (give --licence or a mapping entry)",
                   err=True)
    return registry


def register(group: click.Group) -> None:
    """Add the ``assets`` subgroup (import, fetch, list) to the ``comco`` group."""

    @group.group("assets")
    def assets():
        """Object sets: import real 3D models, fetch them from Objaverse, list what each category has."""

    @assets.command("import")
    @click.argument("folder", type=click.Path(path_type=str))
    @click.option("--out", type=click.Path(file_okay=False, path_type=str), default=None,
                  help="Asset folder to write (default: FOLDER itself).")
    @click.option("--mapping", "mapping_file", type=click.Path(dir_okay=False, path_type=str), default=None,
                  help="YAML/JSON file mapping file names to categories (default: FOLDER/mapping.yaml if present).")
    @click.option("--licence", "--license", "licence", default=None,
                  help="Licence recorded for files without one in the mapping, e.g. 'CC-BY-4.0 (author, url)'.")
    def import_cmd(folder, out, mapping_file, licence):
        """Import the glTF/GLB, OBJ, FBX and .blend models in FOLDER as an asset set.

        A file's category is its name (traffic_light.glb -> "traffic light") or its mapping entry
        (`file: category` or `file: {category, licence, source, up, front, size_class, nominal_size_m}`).
        Each model is joined into one object, turned upright (up -> +Z, front -> -Y), normalised (base centre
        at the origin, largest dimension 1.0) and saved as FOLDER/models/<name>.blend; registry.json records
        source, licence and sha256. A broken file stops the import with its name and changes nothing.
        """
        _import(folder, out, mapping_file, licence)

    @assets.command("fetch")
    @click.option("--source", type=click.Choice(["objaverse"]), default="objaverse", show_default=True,
                  help="Where to download models from.")
    @click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
                  help="Asset folder to write.")
    @click.option("--categories", default=None,
                  help="Comma-separated ComCO categories (default: all 72).")
    @click.option("--lvis-mapping", type=click.Path(dir_okay=False, path_type=str), default=None,
                  help="YAML file {comco72: {category: [LVIS names]}} (default: the shipped mapping).")
    @click.option("--processes", type=click.IntRange(1, 64), default=4, show_default=True,
                  help="Parallel downloads.")
    def fetch_cmd(source, out, categories, lvis_mapping, processes):
        """Download one CC-BY or CC0 Objaverse-LVIS model per ComCO category and import it (needs network).

        Candidates are the objects of the category's LVIS classes (bindscope/assets/objaverse_lvis.yaml);
        only licences 'by' (CC-BY-4.0) and 'cc0' (CC0-1.0) are kept; the most-liked one wins (ties by uid).
        The licence text with title, author and URL goes to the registry.
        """
        from bindscope.config import read_yaml
        from bindscope.dataset.commands import check_output_location
        from bindscope.generators.comco.assets import candidate_uids, lvis_mapping as default_mapping, select_objaverse
        from bindscope.generators.comco.registry import load_set

        check_output_location("--out", out)
        names = [c.name for c in load_set("comco72")]
        wanted = [c.strip() for c in categories.split(",")] if categories else names
        if lvis_mapping:
            try:
                mapping = read_yaml(lvis_mapping, "--lvis-mapping")["comco72"]
            except (KeyError, TypeError) as exc:
                raise BadInput(f"--lvis-mapping {lvis_mapping!r}: expected a YAML file with a 'comco72' mapping "
                               f"({type(exc).__name__}: {exc})") from None
        else:
            mapping = default_mapping()
        unknown = [c for c in wanted if c not in mapping]
        if unknown:
            raise BadInput(f"--categories: {', '.join(map(repr, unknown))} not in the LVIS mapping; allowed: "
                           f"{', '.join(mapping)}")
        try:
            import objaverse
        except ImportError:
            raise BadInput("`comco assets fetch --source objaverse` needs the objaverse package: "
                           "pip install objaverse (or pip install 'bindscope[render]')") from None
        try:
            lvis = objaverse.load_lvis_annotations()
            annotations = objaverse.load_annotations(candidate_uids(lvis, wanted, mapping))
        except OSError as exc:  # urllib errors are OSErrors
            raise BadInput(f"cannot reach the Objaverse annotations on huggingface.co ({exc}); "
                           "fetch needs a connected machine") from None
        chosen = select_objaverse(lvis, annotations, wanted, mapping)
        missing = [c for c in wanted if c not in chosen]
        if not chosen:
            raise BadInput(f"no CC-BY/CC0 Objaverse-LVIS model found for {', '.join(wanted)}")
        try:
            paths = objaverse.load_objects([v["uid"] for v in chosen.values()], download_processes=processes)
        except OSError as exc:
            raise BadInput(f"downloading Objaverse objects failed ({exc})") from None
        download = Path(out).resolve().parent / f".{Path(out).name}.download"
        download.mkdir(parents=True, exist_ok=True)
        try:
            entries = {}
            for category, info in chosen.items():
                local = paths.get(info["uid"])
                if local is None:
                    missing.append(category)
                    continue
                name = f"{category.replace(' ', '_')}.glb"
                shutil.copyfile(local, download / name)
                entries[name] = {"category": category, "licence": info["licence"], "source": info["source"]}
            (download / "mapping.json").write_text(json.dumps(entries, indent=2, sort_keys=True), encoding="utf-8")
            _import(str(download), out, None, None)
        finally:
            shutil.rmtree(download, ignore_errors=True)
        if missing:
            click.echo(f"no CC-BY/CC0 model for: {', '.join(sorted(missing))} (these keep no model in {out})",
                       err=True)

    @assets.command("list")
    @click.argument("set_spec", metavar="[SET]", default="comco72", required=False)
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    def list_cmd(set_spec, as_json):
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
