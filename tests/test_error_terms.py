"""Library messages name the Python parameter (``licence 'x' ...``, ``pass overwrite=True``); the command line
shows the same message with the command's flag (``--licence 'x' ...``, ``pass --overwrite``), one ``Error:`` line,
exit status 2, nothing written. One or more cases per area: release and Hub, scale-out backends, merge, preview,
MNIST source, COCO import, ComCO render and assets, evaluation (models, devices, references), training, sweep,
alignment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_support import invoke_in, snapshot
from click.testing import CliRunner
from coco_fixture import write_coco

import bindscope
from bindscope.build import backends, merge
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.cli.main import comco, madman
from bindscope.encoders import interface as encoder
from bindscope.encoders import open_clip as adapters
from bindscope.errors import BadInput
from bindscope.evaluation import model_list
from bindscope.generators.comco import assets
from bindscope.generators.madman import preview
from bindscope.importers import coco
from bindscope.publish import hub, release


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """A folder holding a tiny MADMAN dataset ``madman``, a COCO import ``coco``, the COCO source files under
    ``src``, a model folder ``models`` with one (unread) model file, and two existing output files ``old.json``
    and ``old.png``."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    root = tmp_path_factory.mktemp("terms")
    build_dataset(tiny_madman(), root / "madman", progress=False)
    coco.import_coco(*write_coco(root / "src"), root / "coco", image_size=40, progress=False)
    (root / "models").mkdir()
    (root / "models" / "cat.glb").write_bytes(b"glTF")
    (root / "old.json").write_text("{}")
    (root / "old.png").write_bytes(b"png")
    return root



def _cli_error(group, args, root: Path) -> str:
    """Run the command in ``root``; assert exit 2, one ``Error:`` line and nothing written; return the line."""
    before = snapshot(root)
    result = invoke_in(root, group, args)
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert snapshot(root) == before, "something was written"
    return lines[0][len("Error: "):]


def _sweep(**fields):
    from bindscope.training.sweep import Sweep, SweepConfig

    return Sweep(SweepConfig(**{"property": "saliency-bias", "values": "0,1", "out": "sweep", **fields}))


TRAIN = ["--steps", "1", "--embed-dim", "8", "--quiet"]
NONE = bindscope.EncoderSettings("ViT-B-32", pretrained="none")  # random weights

# (id, library call on the place folder P, library message (regex from the start), its param,
#  command group, command arguments, the command's message (regex from the start))
CASES = [
    ("release licence", lambda p: release.make_release(p / "madman", p / "rel", licence="CC BY"),
     r"licence 'CC BY' is not a Hub licence id", "licence",
     bindscope_cli, ["release", "madman", "--out", "rel", "--licence", "CC BY"],
     r"--licence 'CC BY' is not a Hub licence id"),
    ("hub repo id", lambda p: hub.connect("a b"),
     r"repo_id 'a b' is not a Hub repository id", "repo_id",
     bindscope_cli, ["release", "--out", "rel", "--push", "a b"], r"--push 'a b' is not a Hub repository id"),
    ("backend", lambda p: backends.check_backend("local", "tcp://x:1", 1),
     r"scheduler 'tcp://x:1' needs backend='dask' \(got backend='local'\)", "scheduler",
     madman, ["generate", "-n", "4", "--out", "out", "--scheduler", "tcp://x:1", "--quiet"],
     r"--scheduler 'tcp://x:1' needs --backend 'dask' \(got --backend 'local'\)"),
    ("merge out", lambda p: merge.merge_parts([p / "a", p / "b"]),
     r"out is needed to merge several part folders", "out",
     bindscope_cli, ["merge", "a", "b"], r"--out is needed to merge several part folders"),
    ("preview count", lambda p: preview.write_preview(p / "madman", p / "p.png", count=0),
     r"count 0 is not allowed; use an integer in 1\.\.1024", "count",
     madman, ["preview", "madman", "--out", "p.png", "-n", "0"], r"-n 0 is not allowed; use an integer in 1\.\.1024"),
    ("mnist root", lambda p: bindscope.madman.generate(p / "out", mnist_root=p / "none"),
     r"mnist_root '.*none': no such folder \(pass mnist_download=True to fetch", "mnist_root",
     madman, ["generate", "-n", "4", "--out", "out", "--mnist-root", "none", "--quiet"],
     r"--mnist-root '.*none': no such folder \(pass --mnist-download to fetch"),
    ("coco image size", lambda p: coco.import_coco(
        p / "src" / "images", p / "src" / "instances.json", p / "src" / "captions.json", p / "out", image_size=10),
     r"image_size 10 is not allowed; use 32..2048 pixels", "image_size",
     bindscope_cli, ["import", "coco", "--images", "src/images", "--instances", "src/instances.json",
                     "--captions", "src/captions.json", "--out", "out", "--image-size", "10"],
     r"--image-size 10 is not allowed; use an integer in 32\.\.2048"),
    ("comco objects", lambda p: bindscope.comco.render(p / "out", objects="9"),
     r"objects '9': counts must satisfy 1 <= min <= max <= 5", "objects",
     comco, ["render", "--objects", "9", "--out", "out"], r"--objects '9': counts must satisfy"),
    ("comco set", lambda p: bindscope.comco.render(p / "out", set="nope"),
     r"set 'nope': unknown set; allowed: comco72, simco18", "set",
     comco, ["render", "--set", "nope", "--out", "out"], r"--set 'nope': unknown set; allowed: comco72, simco18"),
    ("asset mapping", lambda p: assets.plan_import(p / "models", p / "nope.yaml"),
     r"mapping_file '.*nope.yaml': no such file", "mapping_file",
     comco, ["assets", "import", "models", "--mapping", "nope.yaml"], r"--mapping 'nope.yaml': no such file"),
    ("eval pretrained", lambda p: adapters.resolve_open_clip("ViT-B-32", "nonsense"),
     r"pretrained 'nonsense' is not a known tag for 'ViT-B-32'", "pretrained",
     madman, ["eval", "madman", "--model", "ViT-B-32", "--pretrained", "nonsense", "--out", "r.json"],
     r"--pretrained 'nonsense' is not a known tag for 'ViT-B-32'"),
    ("eval model list", lambda p: model_list.expand_models("ViT-B-32,RN50", "a,b,c"),
     r"model lists 2 models but pretrained='a,b,c' lists 3 tags", "model",
     madman, ["eval", "madman", "--model", "ViT-B-32,RN50", "--pretrained", "a,b,c", "--out", "r.json"],
     r"--model lists 2 models but --pretrained 'a,b,c' lists 3 tags"),
    ("eval device", lambda p: encoder.resolve_device("tpu"),
     r"device 'tpu' is not allowed", "device",
     madman, ["eval", "madman", "--model", "ViT-B-32", "--pretrained", "none", "--device", "tpu", "--out", "r.json"],
     r"--device 'tpu' is not allowed"),
    ("references", lambda p: bindscope.evaluate(p / "coco", NONE, tasks="ior",
                                                options={"ior": {"references": p / "nope"}}, out=False),
     r"references '.*nope' is not a folder", "references",
     comco, ["eval", "coco", "--model", "ViT-B-32", "--pretrained", "none", "--tasks", "ior", "--reference-images",
             "nope", "--out", "r.json"], r"--reference-images 'nope' is not a folder"),
    ("train warmup", lambda p: bindscope.train(p / "madman", p / "run", warmup_steps=-5, steps=1),
     r"warmup_steps -5 is not allowed; use an integer in 0\.\.10000000 steps", "warmup_steps",
     madman, ["train", "madman", "--out", "run", "--warmup", "-5", *TRAIN],
     r"--warmup -5 is not allowed; use an integer in 0\.\.10000000 steps"),
    ("train per sample", lambda p: bindscope.train(p / "madman", p / "run", negatives_per_sample=0),
     r"negatives_per_sample 0 is not allowed; use an integer in 1\.\.64 captions", "negatives_per_sample",
     madman, ["train", "madman", "--out", "run", "--negatives-per-sample", "0", *TRAIN],
     r"--negatives-per-sample 0 is not allowed; use an integer in 1\.\.64 captions"),
    ("train stored negatives", lambda p: bindscope.train(p / "coco", p / "run", negatives="stored", steps=1),
     r"negatives 'stored': split 'val2017' of '.*coco' \(coco\) stores no binding negatives", "negatives",
     bindscope_cli, ["train", "coco", "--out", "run", "--negatives", "stored", *TRAIN],
     r"--negatives 'stored': split 'val2017' of 'coco' \(coco\) stores no binding negatives"),
    ("train eval tasks", lambda p: bindscope.train(p / "madman", p / "run", eval_tasks="tor", steps=1),
     r"eval_splits: dataset '.*madman' has several splits \(ood, test, train\); choose one", "eval_splits",
     madman, ["train", "madman", "--out", "run", "--eval-tasks", "tor", *TRAIN],
     r"--eval-split: dataset 'madman' has several splits \(ood, test, train\); choose one"),
    ("sweep values", lambda p: _sweep(values="1,x"),
     r"values '1,x': expected comma-separated float values", "values",
     madman, ["sweep", "--property", "saliency-bias", "--values", "1,x", "--out", "sweep", "--quiet"],
     r"--values '1,x': expected comma-separated float values"),
    ("sweep batch", lambda p: _sweep(num_train=32, train_options={"batch_size": 64}),
     r"batch_size 64 is larger than num_train=32", "batch_size",
     madman, ["sweep", "--property", "saliency-bias", "--values", "0,1", "--num-train", "32", "--batch-size", "64",
              "--out", "sweep", "--quiet"], r"--batch-size 64 is larger than --num-train 32"),
    ("conjunctive probe", lambda p: bindscope.probe(p / "madman", NONE.replace(device="cpu"),
                                                    task="conjunctive-search", out=False),
     r"task conjunctive-search needs a target: '.*madman' was not rendered with task='conjunctive-search'", "task",
     bindscope_cli, ["probe", "madman", "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
                     "--task", "conjunctive-search", "--out", "p.json"],
     r"--task conjunctive-search needs a target: '.*madman' was not rendered with --task 'conjunctive-search', "
     r"which names its own; give one, e.g. --target 'category=sphere,colour=red'"),
]


@pytest.mark.parametrize("call, library, param, group, args, command", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_library_names_the_parameter_and_the_command_the_flag(place, call, library, param, group, args, command):
    before = snapshot(place)
    with pytest.raises(BadInput) as caught:
        call(place)
    assert re.match(library, str(caught.value)), str(caught.value)
    assert caught.value.param == param and "--" not in str(caught.value)
    assert snapshot(place) == before, "the library call wrote something"
    line = _cli_error(group, args, place)
    assert re.match(command, line), line
    assert not line.startswith(f"{param} ") and "=True" not in line and "='" not in line


def _madman_eval(p, **options):
    return bindscope.evaluate(p / "madman", NONE.replace(device="cpu"), out=False, **options)


def _probe(p, **options):
    return bindscope.probe(p / "madman", NONE.replace(device="cpu"), out=False, **options)


def _fit(p, **options):
    return bindscope.labclip.fit(p / "madman", NONE.replace(device="cpu"), p / "map.pt", **options)


def _train(p, **options):
    return bindscope.train(p / "madman", p / "run", progress=False, **{"steps": 1, "embed_dim": 8, **options})


AUDIT_ALLOWED = ("train_split, test_split, epochs, batch_size, lr, width, seed, max_train_objects, "
                 "max_test_objects, threads, shift")
SPLIT_TASKS = "binding, first-mention, large-object"

# (id, library call on the place folder P, its exact message (regex, whole), its param): every call is refused
# with BadInput before any model is loaded, any work is done or anything is written.
LIBRARY_CASES = [
    ("madman eval unknown task", lambda p: _madman_eval(p, tasks="nonsense"),
     rf"tasks 'nonsense': unknown task 'nonsense'; allowed here: {SPLIT_TASKS}", "tasks"),
    ("madman eval tasks", lambda p: _madman_eval(p, kind="madman-eval", tasks="tor"),
     rf"tasks 'tor': unknown task 'tor'; allowed here: {SPLIT_TASKS}", "tasks"),
    ("madman eval matching", lambda p: _madman_eval(p, options={"matching": {"matching_negatives": 7}}),
     rf"options given for unknown task 'matching'; tasks here: {SPLIT_TASKS}", "options"),
    ("scene option of a task not run", lambda p: _madman_eval(p, tasks="tor", splits="test",
                                                              options={"matching": {"matching_negatives": 7}}),
     r"matching_negatives applies to task\(s\) matching; add one to tasks", "matching_negatives"),
    ("scene splits", lambda p: _madman_eval(p, kind="comco-eval", splits=["test", "ood"]),
     r"splits 'test, ood': comco eval reads one split of scenes; give one", "splits"),
    ("category map without references", lambda p: _madman_eval(p, tasks="ior", splits="test",
                                                               options={"ior": {"category_map": "x.json"}}),
     r"category_map needs references", "category_map"),
    ("task needs", lambda p: _madman_eval(p, tasks="ior", splits="test"),
     r"task ior needs references \(single-object reference images.*; or give references=DIR\); split 'test' of "
     r"'.*madman' holds: attributes, captions, masks, mentions, negatives, objects, plans", "references"),
    ("eval splits string", lambda p: _madman_eval(p, splits="tset"),
     r"splits 'tset': dataset '.*madman' has no such split; it has: ood, test, train", "splits"),
    ("eval existing out", lambda p: bindscope.evaluate(p / "madman", NONE, out=p / "old.json"),
     r"out '.*old.json' already exists; pass overwrite=True to replace it, or choose another file", "out"),
    ("eval unknown model", lambda p: bindscope.evaluate(p / "madman", "ViT-B-23", out=p / "new.json"),
     r"model 'ViT-B-23' is not known: .*did you mean .*ViT-B-32.*", "model"),
    ("eval missing data", lambda p: _madman_eval(p / "nowhere"), r"dataset folder '.*nowhere/madman' does not exist",
     "data"),
    ("dataset is a file", lambda p: bindscope.Dataset(p / "old.json"),
     r"'.*old.json' is a file, not a dataset folder", "data"),
    ("train vision", lambda p: _train(p, vision="transformer"),
     r"vision 'transformer' is not known; allowed: vit, resnet, cnn", "vision"),
    ("train patch size", lambda p: _train(p, patch_size=0),
     r"patch_size 0 is not allowed; use an integer in 1\.\.4096 pixels", "patch_size"),
    ("train tokenizer", lambda p: _train(p, tokenizer="chars"), r"tokenizer 'chars' is not known; allowed: bpe, word",
     "tokenizer"),
    ("train embed dim", lambda p: _train(p, embed_dim=0), r"embed_dim 0 is not allowed; use an integer in 1..8192 features",
     "embed_dim"),
    ("train eval split", lambda p: _train(p, eval_splits=["trian"]),
     r"eval_splits 'trian': data '.*madman' has no such split; it has: ood, test, train", "eval_splits"),
    ("train eval split string", lambda p: _train(p, eval_splits="trian"),
     r"eval_splits 'trian': data '.*madman' has no such split; it has: ood, test, train", "eval_splits"),
    ("probe seed", lambda p: _probe(p, seed=-1), r"seed -1 is not allowed; use an integer in 0\.\.4294967295", "seed"),
    ("probe lr", lambda p: _probe(p, lr=-0.1), r"lr -0.1 is not allowed; use a finite number > 0", "lr"),
    ("probe steps 0", lambda p: _probe(p, steps=0), r"steps 0 is not allowed; use an integer >= 1", "steps"),
    ("probe steps -1", lambda p: _probe(p, steps=-1), r"steps -1 is not allowed; use an integer >= 1", "steps"),
    ("probe attributes string", lambda p: _probe(p, attributes="color"),
     r"attributes: 'color' is not an attribute of this dataset; it has colour, .*", "attributes"),
    ("probe existing out", lambda p: bindscope.probe(p / "madman", NONE, out=p / "old.json"),
     r"out '.*old.json' already exists; pass overwrite=True to replace it, or choose another file", "out"),
    ("labclip seed", lambda p: _fit(p, seed=-1), r"seed -1 is not allowed; use an integer in 0\.\.4294967295", "seed"),
    ("labclip epochs", lambda p: _fit(p, epochs=0), r"epochs 0 is not allowed; use an integer >= 1", "epochs"),
    ("labclip batch", lambda p: _fit(p, fit_batch_size=1),
     r"fit_batch_size 1 is not allowed; use an integer >= 2 pairs", "fit_batch_size"),
    ("labclip lr", lambda p: _fit(p, lr=0), r"lr 0 is not allowed; use a finite number > 0", "lr"),
    ("audit unknown option", lambda p: bindscope.audit(p / "madman", epoch=1),
     rf"epoch is not an audit option; allowed: {AUDIT_ALLOWED}", "epoch"),
    ("audit epochs", lambda p: bindscope.audit(p / "madman", epochs=0),
     r"epochs 0 is not allowed; use an integer in 1..1000", "epochs"),
    ("audit width", lambda p: bindscope.audit(p / "madman", width=1000),
     r"width 1000 is not allowed; use an integer in 1..256", "width"),
    ("audit shift", lambda p: bindscope.audit(p / "madman", shift=100),
     r"shift 100 is not allowed; use an integer in 0..16", "shift"),
    ("generate seed string", lambda p: bindscope.madman.generate(p / "out", seed="1"),
     r"seed '1' is not allowed; use an integer in 0\.\.4294967295", "seed"),
    ("generate seed float", lambda p: bindscope.madman.generate(p / "out", seed=1.5),
     r"seed 1.5 is not allowed; use an integer in 0\.\.4294967295", "seed"),
    ("generate jobs string", lambda p: bindscope.madman.generate(p / "out", jobs="2"),
     r"jobs '2' is not allowed; use an integer in 1..256 worker processes", "jobs"),
    ("generate empty splits", lambda p: bindscope.madman.generate(p / "out", splits={"train": 0, "test": 0, "ood": 0}),
     r"splits \{'train': 0, 'test': 0, 'ood': 0\}: every split is empty; give at least one of train, test, ood a "
     r"size >= 1", "splits"),
    ("generate unknown split", lambda p: bindscope.madman.generate(p / "out", splits={"trian": 5}),
     r"config: splits: Additional properties are not allowed \('trian' was unexpected\); allowed: train, test, ood",
     "splits"),
    ("generate preset", lambda p: bindscope.madman.generate(p / "out", preset="nope"),
     r"preset 'nope' is not known; allowed: realistic, ideal", "preset"),
    ("preview existing png", lambda p: preview.write_preview(p / "madman", p / "old.png"),
     r"out '.*old.png' already exists; pass overwrite=True to replace it, or choose another file", "out"),
]


@pytest.mark.parametrize("call, message, param", [c[1:] for c in LIBRARY_CASES], ids=[c[0] for c in LIBRARY_CASES])
def test_library_refuses_a_bad_argument_by_name(place, call, message, param):
    before = snapshot(place)
    with pytest.raises(BadInput) as caught:
        call(place)
    assert re.fullmatch(message, str(caught.value)), str(caught.value)
    assert caught.value.param == param
    assert snapshot(place) == before, "the library call wrote something"


# (id, command group, arguments run in the place folder, the whole Error line without "Error: ")
CLI_CASES = [
    ("audit width", madman, ["audit", "madman", "--width", "1000", "--out", "r.json"],
     r"--width 1000 is not allowed; use an integer in 1..256"),
    ("audit shift", madman, ["audit", "madman", "--shift", "100", "--out", "r.json"],
     r"--shift 100 is not allowed; use an integer in 0..16"),
    ("train eval split", madman, ["train", "madman", "--out", "run", "--eval-split", "trian", *TRAIN],
     r"--eval-split 'trian': data 'madman' has no such split; it has: ood, test, train"),
    ("preview existing png", madman, ["preview", "madman", "--out", "old.png"],
     r"--out 'old.png' already exists; pass --overwrite to replace it, or choose another file"),
    ("generate empty splits", madman, ["generate", "--out", "out", "--quiet", "--config", "zero.yaml"],
     r"splits \{'train': 0, 'test': 0, 'ood': 0\}: every split is empty; give at least one of train, test, ood a "
     r"size >= 1"),
]


@pytest.mark.parametrize("group, args, line", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_command_refuses_a_bad_argument_by_its_flag(place, group, args, line):
    if "zero.yaml" in args and not (place / "zero.yaml").exists():
        (place / "zero.yaml").write_text("splits: {train: 0, test: 0, ood: 0}\n")
    shown = _cli_error(group, args, place)
    assert re.fullmatch(line, shown), shown


def test_preview_creates_its_folder_and_replaces_only_with_overwrite(place, tmp_path):
    out = tmp_path / "new" / "grid.png"
    assert preview.write_preview(place / "madman", out, count=2) == out
    first = out.read_bytes()
    assert first.startswith(b"\x89PNG")
    out.write_bytes(b"mine")
    assert preview.write_preview(place / "madman", out, count=2, overwrite=True) == out
    assert out.read_bytes() == first


def test_generate_help_shows_the_canvas_default():
    from bindscope.generators.madman.config import DEFAULTS

    text = CliRunner().invoke(madman, ["generate", "--help"]).output
    assert DEFAULTS["image_size"] == 96 and "Canvas side in pixels (default 96)." in " ".join(text.split())
