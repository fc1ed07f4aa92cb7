"""Import PUG:SPAR / PUG:SPARE (Unreal-rendered animal pairs) as a bindscope dataset (generator name ``pug``).

Inputs, either of:

- **Parquet** (``parquet=``): the Hub release ``facebook/PUG_SPAR`` (Bordes et al., "PUG: Photorealistic and
  Semantically Controllable Synthetic Data for Representation Learning", NeurIPS 2023; its card's features:
  ``image`` (a ``datasets`` Image: a struct of ``bytes`` and ``path``), ``world_name``, ``character_name``,
  ``character2_name``, ``character1_pos``, ``character2_pos``, ``character_texture``, ``character2_texture``, all
  strings; 35 files ``data/train-000NN-of-00035.parquet``). A file, or a folder whose ``*.parquet`` files (at
  any depth, in path order) are read as one table. Any Parquet file with those columns is read the same way
  (the position columns may be missing); so a PUG:SPARE table written in that layout.
- **CSV and images** (``labels=``): the tarball layouts, a CSV file with a header row and the columns above
  less ``image`` plus ``filename``: PUG:SPAR's ``labels.csv`` (image at ``images/<filename>``) or the LABCLIP
  authors' ``PUG_SPARE.csv`` (``variant="spare"``: image at ``images/<world_name>/<filename>``, as their loader
  reads it); ``images`` defaults to the CSV's folder.

Rows kept (the rule of the LABCLIP authors' PUG:SPAR loader, applied to both variants): two animals
(neither name ``blank``), two different animals, both textured (neither texture ``Default``). The manifest's
``statistics.source`` counts the rows read and each reason a row was left out (the first that applies, in that
order).

What one sample holds (one per kept row, in the source's order):

- ``image``: the render (512x512 in the release) letterboxed into ``image_size`` x ``image_size`` pixels
  (:func:`bindscope.importers.coco.letterbox_image`);
- two objects: ``character_name`` with ``character_texture`` and ``character1_pos``, then ``character2_name``
  with ``character2_texture`` and ``character2_pos``: category = the animal's name (``category_id`` its index
  among the sorted names of the kept rows), attributes ``texture`` and ``position`` (``""`` without the position
  columns); no masks (:mod:`bindscope.importers.scenes`);
- ``caption``: the LABCLIP authors' ``"{texture} {name} and {texture2} {name2}"`` with the source's spelling
  (``"Blue Elephant and Red Camel"``; CLIP's tokenizer lower-cases), and recognition and binding (texture-swap)
  negatives; recognition replacements come from the textures of the kept rows;
- ``spec``: ``pug_row`` (the row's position in the source, all rows counted), ``world_name``, where the image came
  from (``parquet_file`` and ``parquet_row``, with the Image feature's ``image_path``; or ``image_file``),
  ``original_size``, ``scale``, ``offset``.

Checks, all before anything is written (one :class:`~bindscope.errors.BadInput` naming the file, the row and what
is allowed): files inside their folder (:func:`bindscope.io.inside.file_inside`), at most :data:`MAX_ROWS` rows,
a CSV of at most :data:`MAX_CSV_BYTES` bytes that is UTF-8 and well formed with every row as wide as its header,
Parquet files pyarrow can read whose columns have the types above, no missing value, names and textures without
control characters, and every kept row's image readable (header read; at most :data:`MAX_IMAGE_BYTES` bytes and
:data:`bindscope.io.image_input.MAX_IMAGE_PIXELS` pixels).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput, check_text, check_utf8_path, with_changes
from bindscope.importers.coco import letterbox, letterbox_image
from bindscope.importers.scenes import SceneImporter, check_split_name, finish_import
from bindscope.importers.settings import ImportSettings
from bindscope.io.canonical import sha256_file
from bindscope.io.image_input import image_size
from bindscope.io.inside import file_inside, regular_file

NAME = "pug"
VERSION = "1"  # the importer's version in the manifest; changes whenever the same input would give other bytes
# https://huggingface.co/datasets/facebook/PUG_SPAR (card: license cc-by-nc-4.0)
LICENCES = {"spar": "PUG:SPAR (Bordes et al. 2023, facebook/PUG_SPAR): Creative Commons Attribution-NonCommercial "
                    "4.0 (CC BY-NC 4.0), https://huggingface.co/datasets/facebook/PUG_SPAR",
            "spare": "PUG:SPARE (Koishigarina, Uselis, Oh; renders in the PUG environments, published with "
                     "https://github.com/kdariina/CLIP-not-BoW-unimodally): the licence its authors give"}
VARIANTS = tuple(LICENCES)
METADATA = ("world_name", "character_name", "character2_name", "character_texture", "character2_texture")
POSITIONS = ("character1_pos", "character2_pos")
ATTRIBUTES = ["texture", "position"]
CAPTION_ATTRIBUTES = ["texture"]
BLANK, DEFAULT_TEXTURE = "blank", "Default"
LEFT_OUT = ("rows_without_two_animals", "rows_with_one_animal_twice", "rows_with_an_untextured_animal")
MAX_ROWS = 10_000_000
MAX_CSV_BYTES = 256 * 1024 * 1024
MAX_IMAGE_BYTES = 64 * 1024 * 1024


def _left_out(row: dict) -> str | None:
    """Why a row is left out (one of :data:`LEFT_OUT`), or None when it is kept."""
    if BLANK in (row["character_name"], row["character2_name"]):
        return LEFT_OUT[0]
    if row["character_name"] == row["character2_name"]:
        return LEFT_OUT[1]
    if DEFAULT_TEXTURE in (row["character_texture"], row["character2_texture"]):
        return LEFT_OUT[2]
    return None


def _check_row(row: dict, where: str, param: str) -> None:
    for key, value in row.items():
        if not isinstance(value, str) or (key in METADATA and not value):
            raise BadInput(f"{where}: {key} must be a non-empty string, got {value!r}", param=param)
        check_text(f"{where}.{key}", value, name=True, param=param)


# ------------------------------------------------------------------------------------------------ Parquet


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise BadInput("reading Parquet needs pyarrow: pip install 'bindscope[release]'", param="parquet") from None
    return pyarrow, pyarrow.parquet


def parquet_files(parquet: str | os.PathLike) -> tuple[Path, list[str]]:
    """``(folder, names)``: the Parquet file given, or every ``*.parquet`` under the folder given (path order),
    as names relative to their folder.

    Raises:
        BadInput: missing, a folder without Parquet files, or a file outside the folder (a symlink out of it).
    """
    path = Path(parquet)
    if path.is_dir():
        names = sorted(str(p.relative_to(path)) for p in path.rglob("*.parquet"))
        if not names:
            raise BadInput(f"parquet {str(path)!r} holds no .parquet file", param="parquet")
        for name in names:
            file_inside(path, name, "Parquet file")
        return path, names
    regular_file(path, "Parquet file")
    return path.parent, [path.name]


def _parquet_table(folder: Path, names: list[str]) -> tuple[list[dict], list[dict]]:
    """The metadata rows of the Parquet files (no image bytes), each with its locator ``{"file", "group",
    "offset", "row"}``, and the files' ``{"file", "sha256"}``."""
    pa, pq = _pyarrow()
    rows, files = [], []
    for k, name in enumerate(names):
        path = folder / name
        where = f"parquet {str(path)!r}"
        try:
            handle = pq.ParquetFile(path)
            schema = handle.schema_arrow
            image = schema.field("image").type if "image" in schema.names else None
            if image is None or not pa.types.is_struct(image) or image.get_field_index("bytes") < 0 or not (
                    pa.types.is_binary(image.field("bytes").type)
                    or pa.types.is_large_binary(image.field("bytes").type)):
                raise BadInput(f"{where} has no image column of the Hub's Image layout (a struct with binary "
                               f"'bytes'); its columns are {', '.join(schema.names)}", param="parquet")
            wanted = list(METADATA) + [c for c in POSITIONS if c in schema.names]
            missing = [c for c in METADATA if c not in schema.names]
            wrong = [c for c in wanted if c in schema.names and not (
                pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))]
            if missing or wrong:
                raise BadInput(f"{where}: " + (f"missing columns {', '.join(missing)}" if missing else
                                               f"columns {', '.join(wrong)} are not strings") +
                               f"; PUG needs string columns {', '.join(METADATA)}", param="parquet")
            if len(rows) + handle.metadata.num_rows > MAX_ROWS:
                raise BadInput(f"{where}: more than {MAX_ROWS:,} rows in all; import at most that many at once",
                               param="parquet")
            table = handle.read(columns=wanted).to_pydict()
            groups = [handle.metadata.row_group(g).num_rows for g in range(handle.metadata.num_row_groups)]
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise BadInput(f"{where} is not a readable Parquet file ({' '.join(str(exc).split())[:200]})",
                           param="parquet") from None
        offset = 0
        for group, size in enumerate(groups):
            for local in range(size):
                row = {c: table[c][offset + local] for c in wanted}
                _check_row(row, f"{where} row {offset + local}", "parquet")
                rows.append({**row, "locator": {"file": k, "group": group, "offset": local, "row": offset + local}})
            offset += size
        files.append({"file": name, "sha256": sha256_file(path)})
    return rows, files


def _group_images(folder: Path, name: str, group: int) -> list[dict]:
    """The Image cells (``{"bytes", "path"}``) of one row group of one Parquet file."""
    pa, pq = _pyarrow()
    try:
        return pq.ParquetFile(folder / name).read_row_group(group, columns=["image"]).column("image").to_pylist()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise BadInput(f"parquet {str(folder / name)!r}: row group {group} cannot be read "
                       f"({' '.join(str(exc).split())[:200]})", param="parquet") from None


def _cell_bytes(cell, where: str) -> bytes:
    data = cell.get("bytes") if isinstance(cell, dict) else None
    if not isinstance(data, bytes) or not data:
        raise BadInput(f"{where}: the image cell holds no bytes (an Image stored as a path only cannot be read "
                       "from the Parquet file)", param="parquet")
    if len(data) > MAX_IMAGE_BYTES:
        raise BadInput(f"{where}: the image is {len(data):,} bytes; at most {MAX_IMAGE_BYTES:,} are allowed",
                       param="parquet")
    return data


# ------------------------------------------------------------------------------------------------ CSV


def _csv_rows(labels: Path) -> list[dict]:
    """The rows of a PUG labels CSV (see the module docstring), each with its locator ``{"row"}``."""
    regular_file(labels, "labels CSV")
    where = f"labels {str(labels)!r}"
    if labels.stat().st_size > MAX_CSV_BYTES:
        raise BadInput(f"{where} is {labels.stat().st_size:,} bytes; at most {MAX_CSV_BYTES:,} are allowed",
                       param="labels")
    try:
        text = labels.read_bytes().decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where} is not UTF-8 text (byte offset {exc.start}); save it as UTF-8", param="labels") \
            from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, header = [], None
    try:
        for fields in reader:
            if not fields:
                continue
            if header is None:
                header = [f.strip() for f in fields]
                missing = [c for c in ("filename",) + METADATA if c not in header]
                if missing or len(set(header)) != len(header):
                    raise BadInput(f"{where}: the header needs the columns filename, {', '.join(METADATA)}, each "
                                   f"once; it has {', '.join(header)}", param="labels")
                continue
            if len(fields) != len(header):
                raise BadInput(f"{where} line {reader.line_num}: {len(fields)} fields, the header has {len(header)}",
                               param="labels")
            if len(rows) >= MAX_ROWS:
                raise BadInput(f"{where}: more than {MAX_ROWS:,} rows; import at most that many at once",
                               param="labels")
            row = {c: v for c, v in zip(header, fields) if c in ("filename",) + METADATA + POSITIONS}
            _check_row(row, f"{where} line {reader.line_num}", "labels")
            rows.append({**row, "locator": {"row": len(rows)}})
    except csv.Error as exc:
        raise BadInput(f"{where} line {reader.line_num} is not well-formed CSV ({exc})", param="labels") from None
    if header is None:
        raise BadInput(f"{where} is empty", param="labels")
    return rows


# ------------------------------------------------------------------------------------------------ the plan


def read_pug(parquet: str | os.PathLike | None = None, labels: str | os.PathLike | None = None,
             images: str | os.PathLike | None = None, variant: str = "spar", limit: int | None = None) -> dict:
    """Read and check a PUG:SPAR / SPARE release; return the import plan (plain JSON-serialisable data).

    Args:
        parquet: a Parquet file or a folder of them (the Hub layout). labels / images: or a labels CSV and the
            folder its ``filename`` is relative to (default: the CSV's folder). Exactly one of ``parquet`` and
            ``labels``.
        variant: ``"spar"`` or ``"spare"`` (where a CSV's images are; the manifest's title and licence).
        limit: keep only the first ``limit`` kept rows.

    Returns:
        ``{"scenes": [...], "vocabulary": {"texture": [textures of the kept rows]}, "counts": {"rows", "rows_kept",
        <each reason of LEFT_OUT>, "rows_selected"}, "source": {...}}``.

    Raises:
        BadInput: the first problem (see the module docstring), naming the file and row.
    """
    if variant not in VARIANTS:
        raise BadInput(f"variant {variant!r} is not allowed; use {' or '.join(VARIANTS)}", param="variant")
    if (parquet is None) == (labels is None):
        raise BadInput("give either parquet (the Hub release's Parquet files) or labels (a labels CSV with its "
                       "images), not both and not neither", param="parquet")
    if limit is not None and limit < 1:
        raise BadInput(f"limit {limit} is not allowed; use an integer >= 1", param="limit")
    if parquet is not None:
        if images is not None:
            raise BadInput("images goes with labels; the Parquet files hold their images", param="images")
        folder, names = parquet_files(parquet)
        rows, files = _parquet_table(folder, names)
        source = {"parquet": str(folder), "files": files}
    else:
        labels = Path(labels)
        folder = Path(images) if images is not None else labels.parent
        if not folder.is_dir():
            raise BadInput(f"images {str(folder)!r} is not a folder", param="images")
        rows = _csv_rows(labels)
        source = {"labels": labels.name, "labels_sha256": sha256_file(labels), "images": str(folder)}
    counts = {"rows": len(rows), "rows_kept": 0, **{reason: 0 for reason in LEFT_OUT}}
    kept = []
    for index, row in enumerate(rows):
        row["index"] = index
        reason = _left_out(row)
        counts[reason or "rows_kept"] += 1
        if reason is None:
            kept.append(row)
    if not kept:
        raise BadInput(f"no row of {str(parquet or labels)!r} shows two different textured animals; nothing to "
                       "import", param="parquet" if parquet is not None else "labels")
    names = sorted({r[c] for r in kept for c in ("character_name", "character2_name")})
    vocabulary = {"texture": sorted({r[c] for r in kept for c in ("character_texture", "character2_texture")})}
    selected = kept[:limit] if limit is not None else kept
    scenes = [_scene(row, names) for row in selected]
    if parquet is not None:
        _check_parquet_images(folder, _parquet_names(source), scenes)
    else:
        for scene in scenes:
            where = f"labels {str(labels)!r} row {scene['pug_row']}"
            scene["image_file"] = str(Path(scene["world_name"], scene["filename"]) if variant == "spare"
                                      else Path(scene["filename"]))
            path = file_inside(folder, scene["image_file"], f"image (row {scene['pug_row']})")
            scene["width"], scene["height"] = image_size(path, f"images: {where}:", param="images")
    counts["rows_selected"] = len(scenes)
    return {"scenes": scenes, "vocabulary": vocabulary, "counts": counts, "source": source}


def _parquet_names(source: dict) -> list[str]:
    """The Parquet file names (relative to ``source["parquet"]``) of a plan's source."""
    return [f["file"] for f in source["files"]]


def _scene(row: dict, names: list[str]) -> dict:
    objects = [{"category": row[name], "category_id": names.index(row[name]),
                "attributes": {"texture": row[texture], "position": row.get(position, "")}}
               for name, texture, position in (("character_name", "character_texture", "character1_pos"),
                                               ("character2_name", "character2_texture", "character2_pos"))]
    scene = {"pug_row": row["index"], "world_name": row["world_name"], "objects": objects, "locator": row["locator"]}
    if "filename" in row:
        scene["filename"] = row["filename"]
    return scene


def _check_parquet_images(folder: Path, names: list[str], scenes: list[dict]) -> None:
    """Read every selected row's image cell (one row group at a time) and check its header; record its size
    and the Image feature's path."""
    by_group: dict[tuple[int, int], list[dict]] = {}
    for scene in scenes:
        by_group.setdefault((scene["locator"]["file"], scene["locator"]["group"]), []).append(scene)
    for (k, group), members in sorted(by_group.items()):
        cells = _group_images(folder, names[k], group)
        for scene in members:
            where = f"parquet {str(folder / names[k])!r} row {scene['locator']['row']}"
            cell = cells[scene["locator"]["offset"]]
            data = _cell_bytes(cell, where)
            scene["width"], scene["height"] = image_size(data, "image", param="parquet", name=where)
            scene["image_path"] = cell.get("path") if isinstance(cell.get("path"), str) else None


class PugImporter(SceneImporter):
    """A :class:`bindscope.build.builder.Generator` that realises a plan from :func:`read_pug`.

    Args:
        plan: the dict from :func:`read_pug`. variant: ``"spar"`` or ``"spare"``. The rest as
        :class:`~bindscope.importers.scenes.SceneImporter`.
    """

    name = NAME
    version = VERSION
    attribute_names = ATTRIBUTES
    caption_attributes = CAPTION_ATTRIBUTES

    def __init__(self, plan: dict, variant: str, split: str, image_size: int, config: dict, seed: int = 0,
                 shard_size: int = 256):
        super().__init__(plan, split, image_size, config, seed, shard_size)
        self.variant = variant

    def provenance(self) -> dict:
        """Title and sources for the manifest: the release and its licence."""
        return {"title": f"PUG:{self.variant.upper()} {self.split} (bindscope import)",
                "sources": [LICENCES[self.variant]]}

    def _images(self, scenes: list[dict]) -> list[np.ndarray]:
        size, source = self.image_size[0], self.plan["source"]
        if "labels" in source:
            return [letterbox_image(Path(source["images"]) / s["image_file"], size) for s in scenes]
        folder, names = Path(source["parquet"]), _parquet_names(source)
        cells: dict[tuple[int, int], list[dict]] = {}
        out = []
        for s in scenes:
            key = (s["locator"]["file"], s["locator"]["group"])
            if key not in cells:
                cells = {key: _group_images(folder, names[key[0]], key[1])}  # one row group held at a time
            where = f"parquet {str(folder / names[key[0]])!r} row {s['locator']['row']}"
            data = _cell_bytes(cells[key][s["locator"]["offset"]], where)
            out.append(letterbox_image(data, size, name=where))
        return out

    def _spec(self, scene: dict) -> dict:
        new_w, new_h, ox, oy = letterbox(scene["width"], scene["height"], self.image_size[0])
        where = ({"image_file": scene["image_file"]} if "image_file" in scene else
                 {"parquet_file": _parquet_names(self.plan["source"])[scene["locator"]["file"]],
                  "parquet_row": scene["locator"]["row"], "image_path": scene["image_path"]})
        return {"pug_row": scene["pug_row"], "world_name": scene["world_name"], **where,
                "original_size": [scene["height"], scene["width"]],
                "scale": [new_w / scene["width"], new_h / scene["height"]], "offset": [ox, oy]}

    def card(self, manifest: dict) -> str:
        source = manifest["statistics"]["source"]
        return (f"# PUG:{self.variant.upper()} {self.split} (bindscope import)\n\n"
                f"{self.card_counts(manifest)}, imported by `bindscope import pug` (bindscope.importers.pug).\n\n"
                f"- Rows: {source['rows']} read, {source['rows_kept']} kept (two different animals, both textured: "
                f"the LABCLIP authors' rule), {source['rows_selected']} imported.\n"
                "- Captions: the LABCLIP authors' '{texture} {name} and {texture2} {name2}'.\n"
                f"- Images letterboxed to {self.image_size[0]}x{self.image_size[0]} pixels; no masks (PUG "
                "publishes none).\n\n"
                f"Licence: {LICENCES[self.variant]}.\n")


def import_pug(out: str | os.PathLike, parquet: str | os.PathLike | None = None,
               labels: str | os.PathLike | None = None, images: str | os.PathLike | None = None,
               variant: str = "spar", split: str = "train", settings: ImportSettings | None = None,
               overwrite: bool = False, progress: bool = True, **changes) -> dict:
    """Import PUG:SPAR or PUG:SPARE into the bindscope dataset ``out``; return its manifest.

    See the module docstring for the inputs, the rows kept and what a sample holds. Resumable and atomic like
    every build (:func:`bindscope.build.builder.build_dataset`); the finished dataset is verified.

    Args:
        out: output folder (new, empty, or an unfinished run of the same import).
        parquet: a Parquet file or a folder of them (the Hub release). labels / images: or a labels CSV and its
            images folder (default: the CSV's folder). Exactly one of ``parquet`` and ``labels``.
        variant: ``"spar"`` (default) or ``"spare"``.
        split: the dataset's split name (letters, digits, ``_``; the Hub release has one, ``train``).
        settings: an :class:`~bindscope.importers.settings.ImportSettings`: ``image_size`` (side of the stored
            square images, 32..2048 pixels), ``limit`` (only the first ``limit`` kept rows), ``seed`` (of the
            recognition negatives' replacements), ``shard_size``, ``jobs``; default: its defaults.
        overwrite: replace a dataset in ``out``. progress: tqdm bar.
        **changes: fields of ``settings`` in place of its values (``image_size=96``, ``limit=100``).

    Raises:
        BadInput: bad arguments, a path that is not UTF-8, an unusable ``out``, or a source that fails
            :func:`read_pug`'s checks; nothing is written then.
        DiskFull: the disk filled up (as :func:`bindscope.importers.coco.import_coco`).
        RuntimeError: the written dataset fails verification (a bug).
    """
    from bindscope.io.ownership import check_output_location

    settings = with_changes(settings or ImportSettings(), changes, "an import setting")
    check_split_name(split)
    for param, path in (("parquet", parquet), ("labels", labels), ("images", images), ("out", out)):
        check_utf8_path(param, path)
    check_output_location("out", out)
    plan = read_pug(parquet, labels, images, variant, settings.limit)
    source = plan["source"]
    config = {"source": NAME, "variant": variant, "split": split, "image_size": settings.image_size,
              "limit": settings.limit, "shard_size": settings.shard_size, "attributes": CAPTION_ATTRIBUTES,
              "inputs": {"files": source["files"]} if "files" in source else
              {"labels": source["labels"], "labels_sha256": source["labels_sha256"]},
              "rows_kept": "two animals (no 'blank'), different, both textured (no 'Default')",
              "letterbox": "longer side scaled to image_size, centred, black padding",
              "caption": "LABCLIP: '{texture} {name} and {texture2} {name2}'"}
    importer = PugImporter(plan, variant, split, settings.image_size, config, settings.seed, settings.shard_size)
    return finish_import(importer, out, settings.jobs, overwrite, progress)
