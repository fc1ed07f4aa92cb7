"""``bindscope.comco.import_assets`` and ``bindscope.comco.fetch_assets``: the library calls behind
``comco assets import`` and ``comco assets fetch`` (docs/comco.md). bpy (through
:mod:`bindscope.generators.comco.blender.importer`) and objaverse are imported inside the calls.

Example (a notebook)::

    import bindscope
    registry = bindscope.comco.import_assets("my_models", out="assets/mine")
    bindscope.comco.render("data/mine", set="assets/mine", n=100)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from bindscope.errors import BadInput
from bindscope.io.ownership import check_output_location


def import_assets(folder: str | os.PathLike, out: str | os.PathLike | None = None,
                  mapping_file: str | os.PathLike | None = None, licence: str | None = None,
                  progress: bool = True) -> dict:
    """Import the glTF/GLB, OBJ, FBX and .blend models in ``folder`` as an asset set usable as ``set=out``.

    Each model is joined into one object, turned upright (up -> +Z, front -> -Y), normalised (base centre at
    the origin, largest dimension 1.0, in metres before the category's nominal size is applied) and saved as
    ``out/models/<name>.blend``; ``out/registry.json`` records source, licence and sha256. A file's category is
    its name (``traffic_light.glb`` -> "traffic light") or its entry in the mapping file
    (:func:`bindscope.generators.comco.assets.plan_import`).

    Args:
        folder: the model files. out: the asset folder to write (default: ``folder`` itself).
        mapping_file: YAML/JSON mapping of file names to categories (default: ``folder/mapping.yaml`` or
            ``.json`` if present). licence: recorded for files without one in the mapping.
        progress: tqdm bar on stderr.

    Returns:
        The registry written (``{"format", "categories": [{"name", "licence", "source", ...}, ...]}``).

    Raises:
        BadInput: an unusable ``out``, a missing folder or mapping file, a model file the importer cannot
            read (named); every check before anything is written.
    """
    from tqdm import tqdm

    from bindscope.generators.comco.assets import plan_import

    check_output_location("out", out if out is not None else folder)  # before any model file is read
    items = plan_import(folder, mapping_file, licence)
    from bindscope.generators.comco.blender.importer import import_folder

    return import_folder(items, out if out is not None else folder,
                         progress=lambda it: tqdm(it, desc="importing", unit="model", file=sys.stderr,
                                                  disable=not progress))


def fetch_assets(out: str | os.PathLike, categories: list[str] | None = None,
                 lvis_mapping: str | os.PathLike | None = None, processes: int = 4,
                 progress: bool = True) -> tuple[dict, list[str]]:
    """Download one CC-BY or CC0 Objaverse-LVIS model per ComCO category and import it into ``out``
    (:func:`import_assets`); needs network.

    Candidates are the objects of the category's LVIS classes (``bindscope/assets/objaverse_lvis.yaml``); only
    licences ``by`` (CC-BY-4.0) and ``cc0`` (CC0-1.0) are kept; the most-liked one wins (ties by uid)
    (:func:`bindscope.generators.comco.assets.select_objaverse`). The licence text with title, author and URL
    goes to the registry.

    Args:
        out: the asset folder to write. categories: ComCO categories (default: all 72 of ``comco72``).
        lvis_mapping: YAML file ``{comco72: {category: [LVIS names]}}`` (default: the shipped mapping).
        processes: parallel downloads. progress: tqdm bar of the import on stderr.

    Returns:
        ``(registry, categories without a model)``.

    Raises:
        BadInput: an unusable ``out``, a bad mapping file, a category not in the mapping, objaverse not
            installed, no network, no licensed model for any category.
    """
    from bindscope.config import read_yaml
    from bindscope.generators.comco.assets import candidate_uids, select_objaverse
    from bindscope.generators.comco.assets import lvis_mapping as default_mapping
    from bindscope.generators.comco.registry import load_set

    check_output_location("out", out)
    wanted = list(categories) if categories else [c.name for c in load_set("comco72")]
    if lvis_mapping:
        try:
            mapping = read_yaml(lvis_mapping, "lvis_mapping")["comco72"]
        except (KeyError, TypeError) as exc:
            raise BadInput(f"lvis_mapping {str(lvis_mapping)!r}: expected a YAML file with a 'comco72' mapping "
                           f"({type(exc).__name__}: {exc})", param="lvis_mapping") from None
    else:
        mapping = default_mapping()
    unknown = [c for c in wanted if c not in mapping]
    if unknown:
        raise BadInput(f"categories: {', '.join(map(repr, unknown))} not in the LVIS mapping; allowed: "
                       f"{', '.join(mapping)}", param="categories")
    try:
        import objaverse
    except ImportError:
        raise BadInput("fetching from Objaverse needs the objaverse package: pip install objaverse (or pip "
                       "install 'bindscope[render]')") from None
    try:
        lvis = objaverse.load_lvis_annotations()
        annotations = objaverse.load_annotations(candidate_uids(lvis, wanted, mapping))
    except OSError as exc:  # urllib errors are OSErrors
        raise BadInput(f"cannot reach the Objaverse annotations on huggingface.co ({exc}); "
                       "fetching needs a connected machine") from None
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
        registry = import_assets(download, out, progress=progress)
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return registry, sorted(missing)
