"""`bindscope collect` over one real file of every result kind the project writes, each made by the library call
behind its command on tiny fixtures (real MNIST digits, a tiny CLIP trained here, hand-chosen fake encoders):
the rows, the kind of each and a few columns are checked against the source files."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, SpecGenerator, build, comco_fixture, image, madman_fixture, obj
from PIL import Image

import bindscope
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.evaluation.bench import evaluate_bench, read_bench
from bindscope.evaluation.collect import collect
from bindscope.evaluation.comco import evaluate_comco
from bindscope.evaluation.madman import evaluate_madman
from bindscope.evaluation.results import write_result
from bindscope.format.records import Negative, Sample

TINY = {"embed_dim": 16, "image_size": 32, "vision_width": 32, "vision_layers": 1, "text_width": 32,
        "text_layers": 1, "batch_size": 16, "steps": 2, "warmup_steps": 1, "device": "cpu"}
COLOURS = ["red", "blue", "green"]
SHAPES = ["cube", "sphere", "cone"]


def _hashed(dim):
    """Text rule: a fixed random unit vector per text (seeded by its crc32)."""
    def rule(text):
        v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=dim).astype(np.float32)
        return v / np.linalg.norm(v)
    return rule


@dataclass
class ConjunctiveGenerator(SpecGenerator):
    """A ComCO-format dataset as `comco render --attributes colour --task conjunctive-search` records it: the
    manifest config names the attributes and the target."""

    @property
    def config(self):
        return {"task": "conjunctive-search", "attributes": ["colour"],
                "conjunctive_search": {"target": {"category": "sphere", "colour": "red"}}}


def conjunctive_fixture(tmp_path):
    """36 scenes of 2-3 coloured shapes, half holding a red sphere, with attribute captions and stored
    recognition / binding negatives (so that `comco eval --tasks binding` scores them too)."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(36):
        n = 2 + i % 2
        present = (i // 2) % 2 == 0
        pairs = [("sphere", "red")] if present else []
        while len(pairs) < n:
            pair = (SHAPES[rng.integers(3)], COLOURS[rng.integers(3)])
            if pair != ("sphere", "red"):
                pairs.append(pair)
        objects = [obj(k + 1, s, {"colour": c}, k + 1, k + 1) for k, (s, c) in enumerate(pairs)]
        caption = " and ".join(f"{c} {s}" for s, c in pairs)
        (s1, c1), (s2, c2) = pairs[:2]
        other = next(c for c in COLOURS if c not in (c1, c2))
        negatives = [Negative("recognition", caption.replace(f"{c1} {s1}", f"{other} {s1}", 1), "colour", (1,),
                              "x", "y"),
                     Negative("binding", caption.replace(f"{c1} {s1}", f"{c2} {s1}", 1).replace(
                         f"{c2} {s2}", f"{c1} {s2}", 1), "colour", (1, 2), "x", "y")]
        samples.append(Sample(i, image(i + 1, 32), np.zeros((32, 32), np.uint8), caption, objects, negatives, {}))
    generator = ConjunctiveGenerator({"scenes": samples}, name="comco", attribute_names=["colour"],
                                     image_size=(32, 32))
    path = build(tmp_path, "conjunctive", generator)
    dim = 16
    images = {i + 1: _hashed(dim)(f"image {i}") for i in range(36)}
    return path, FakeEncoder(dim, {}, images, text_rule=_hashed(dim))


def sugarcrepe_fixture(root):
    """Two SugarCrepe subsets (3 and 2 items) in the published layout; the caption of items 0 and 3 is nearer
    its image than the negative."""
    dim = 8
    e = np.eye(dim, dtype=np.float32)
    entries = {"add_att": {"0": (1, "a red bus", e[1], "a red bus on grass", e[2]),
                           "7": (2, "a dog", e[3], "a big dog", e[2]),
                           "12": (1, "a cat", e[4], "a small cat", e[1])},
               "swap_obj": {"3": (2, "a man and a horse", e[2], "a horse and a man", e[3]),
                            "5": (3, "a cup on a table", e[5], "a table on a cup", e[3])}}
    texts = {}
    (root / "sugarcrepe").mkdir(parents=True)
    (root / "val2017").mkdir()
    for subset, items in entries.items():
        data = {}
        for key, (img, cap, cap_vec, neg, neg_vec) in items.items():
            data[key] = {"filename": f"{img:012d}.jpg", "caption": cap, "negative_caption": neg}
            texts[cap], texts[neg] = cap_vec, neg_vec
            Image.fromarray(np.full((40, 40, 3), img, np.uint8)).save(root / "val2017" / f"{img:012d}.jpg")
        (root / "sugarcrepe" / f"{subset}.json").write_text(json.dumps(data))
    images = {i: e[i] for i in range(1, 4)}
    return root / "sugarcrepe", root / "val2017", FakeEncoder(dim, texts, images)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One result file of every kind in one folder: name -> path."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    root = tmp_path_factory.mktemp("collect")
    out = root / "results"
    out.mkdir()
    files = {}
    # MADMAN (real digits) -> a tiny CLIP trained here: its result.json, its probes, LABCLIP, the audit
    data = root / "madman"
    build_dataset(tiny_madman(splits={"train": 32, "test": 48, "ood": 0}, shard_size=16, ood={"holdout": []}),
                  data, jobs=1, progress=False)
    run = root / "run"
    summary = bindscope.train(data, run, progress=False, **TINY)
    files["result.json"] = out / "train-result.json"
    files["result.json"].write_bytes((run / "result.json").read_bytes())
    assert summary["files"]["result.json"] == str(run / "result.json")
    model = bindscope.EncoderSettings(run / "model.pt", device="cpu", use_cache=False)
    files["probe"] = bindscope.probe(data, model, steps=20, out=out / "probe.json", progress=False).path
    bindscope.labclip.fit(data, model, root / "map.pt", epochs=2, progress=False)
    files["labclip"] = bindscope.labclip.eval(data, model, root / "map.pt", out=out / "labclip.json",
                                              progress=False).path
    files["audit"] = bindscope.audit(data, out=out / "audit.json", epochs=1, batch_size=16, width=4,
                                     progress=False).path
    # conjunctive search with the trained CLIP; ComCO binding on the same scenes with a fake encoder
    conj, conj_encoder = conjunctive_fixture(root)
    files["conjunctive"] = bindscope.probe(conj, model, task="conjunctive-search", steps=20,
                                           out=out / "conjunctive.json", progress=False).path
    files["binding"] = write_result(out / "comco-binding.json",
                                    evaluate_comco(conj, conj_encoder, ["binding"], progress=False))
    # hand-chosen encoders: madman eval, comco eval with retrieval, bench; caption bias of the ComCO scenes
    mpath, menc = madman_fixture(root, "madman-fake")
    files["madman"] = write_result(out / "madman.json", evaluate_madman(mpath, menc, progress=False))
    cpath, cenc = comco_fixture(root)
    files["comco"] = write_result(out / "comco.json", evaluate_comco(cpath, cenc, ["tor", "retrieval"],
                                                                     progress=False))
    bench_data, bench_images, bench_encoder = sugarcrepe_fixture(root / "sc")
    files["bench"] = write_result(out / "bench.json", evaluate_bench(
        "sugarcrepe", read_bench("sugarcrepe", bench_data, bench_images), bench_encoder, image_size=40,
        progress=False))
    files["caption-bias"] = bindscope.caption_bias(cpath, out=out / "caption-bias.json").path
    return out, {k: json.loads(v.read_text()) for k, v in files.items()}


def test_collect_reads_every_kind(results, tmp_path):
    folder, source = results
    table = collect([folder])
    kinds = {r["file"].rsplit("/", 1)[1]: r["kind"] for r in table["rows"]}
    assert kinds == {"audit.json": "madman-audit", "bench.json": "bench", "caption-bias.json": "caption-bias",
                     "comco-binding.json": "comco-eval", "comco.json": "comco-eval",
                     "conjunctive.json": "conjunctive-search", "labclip.json": "labclip-eval",
                     "madman.json": "madman-eval", "probe.json": "probe", "train-result.json": "madman-eval"}
    assert {k: s["files"] for k, s in table["summary"].items()} == {
        "bench": 1, "caption-bias": 1, "comco-eval": 2, "conjunctive-search": 1, "labclip-eval": 1,
        "madman-audit": 1, "madman-eval": 2, "probe": 1}
    rows = {r["file"].rsplit("/", 1)[1]: r for r in table["rows"]}
    for name, row in rows.items():
        assert row["figures"], name  # every kind gives columns
        assert all(c in table["definitions"] for c in row["figures"])
    assert rows["probe.json"]["model"] == "model.pt" and rows["probe.json"]["pretrained"] == "(file)"
    assert rows["audit.json"]["model"] == "oracle CNN" and rows["caption-bias.json"]["step"] is None

    # probe: macro / micro test accuracy, chance, accuracy by object count with its Wilson interval
    colour = source["probe"]["metrics"]["modalities"]["image"]["colour"]
    f = rows["probe.json"]["figures"]
    assert f["probe/image/colour/macro"]["value"] == pytest.approx(100 * colour["accuracy"])
    assert f["probe/image/colour/micro"]["value"] == pytest.approx(100 * colour["accuracy_micro"])
    assert f["probe/image/colour/chance"]["value"] == pytest.approx(100 * colour["chance"])
    two = colour["by_object_count"]["2"]
    assert f["probe/image/colour/2obj"]["interval"] == "W"
    assert [f["probe/image/colour/2obj"]["low"], f["probe/image/colour/2obj"]["high"]] == pytest.approx(
        [100 * v for v in two["ci95"]])
    assert "macro" in table["definitions"]["probe/image/colour/macro"]

    # conjunctive search: overall and per number of distractors (1 or 2), Wilson over test scenes
    conj = source["conjunctive"]["metrics"]
    f = rows["conjunctive.json"]["figures"]
    assert set(conj["by_distractors"]) == {"1", "2"}
    assert f["conjunctive-search/accuracy"]["value"] == pytest.approx(100 * conj["accuracy"]["accuracy"])
    assert f["conjunctive-search/2distractors/bag_of_words"]["value"] == pytest.approx(
        100 * conj["by_distractors"]["2"]["bag_of_words"]["accuracy"])
    assert f["conjunctive-search/chance"]["value"] == 50.0

    # LABCLIP: conditional binding is the report's binding_given_recognition; the gap is a distance
    after = source["labclip"]["metrics"]["after"]
    f = rows["labclip.json"]["figures"]
    conditional = after["binding_given_recognition"]["accuracy"]  # None when no sample passed recognition
    assert f["labclip/after/binding/micro"]["value"] == (None if conditional is None
                                                         else pytest.approx(100 * conditional))
    assert f["labclip/after/binding_all/micro"]["value"] == pytest.approx(100 * after["binding"]["accuracy"])
    gap = f["labclip/before/modality_gap"]
    assert gap["unit"] == "distance" and gap["value"] == pytest.approx(
        source["labclip"]["metrics"]["before"]["modality_gap"])

    # audit: trained attributes and the digit (swelling-free columns only for trained attributes)
    audit = source["audit"]
    f = rows["audit.json"]["figures"]
    assert f["audit/digit"]["value"] == pytest.approx(100 * audit["digit"]["accuracy"])
    assert f["audit/colour/macro"]["value"] == pytest.approx(100 * audit["attributes"]["colour"]["macro"])
    trained = {a for a, b in audit["attributes"].items() if b["trained"]}
    assert {c.split("/")[1] for c in f if c.count("/") == 1} == trained | {"digit"}

    # caption bias: share at each position with the bootstrap-over-images interval
    bias = source["caption-bias"]
    f = rows["caption-bias.json"]["figures"]
    assert bias["kind"] == "caption-bias" and bias["schema_version"] == 1
    assert f["caption-bias/pos1"]["value"] == pytest.approx(100 * bias["largest_first_share"])
    assert f["caption-bias/pos1"]["interval"] == "img"
    assert [f["caption-bias/pos1"]["low"], f["caption-bias/pos1"]["high"]] == pytest.approx(
        [100 * v for v in bias["positions"]["1"]["ci95_cluster"]])

    # the evaluation kinds as before: MADMAN binding (both files), ComCO TOR and retrieval, ComCO binding, bench
    f = rows["madman.json"]["figures"]
    assert f["test/binding/colour"]["value"] == pytest.approx(100 * 2 / 3)
    trained_eval = source["result.json"]["metrics"]["splits"]["test"]["recognition"]["average"]["micro"]
    assert rows["train-result.json"]["figures"]["test/recognition/micro"]["value"] == pytest.approx(
        100 * trained_eval["accuracy"])
    f = rows["comco.json"]["figures"]
    tor = source["comco"]["metrics"]["tor"]["by_num_objects"]["3"]["positions"][0]
    assert f["tor/3obj/pos1"]["value"] == pytest.approx(100 * tor["conditional"]["share"])
    assert f["retrieval/text-to-image/R@1"]["interval"] == "img"
    binding = source["binding"]["metrics"]["binding"]["recognition"]["average"]["micro"]
    assert rows["comco-binding.json"]["figures"]["recognition/micro"]["value"] == pytest.approx(
        100 * binding["accuracy"])
    assert rows["bench.json"]["figures"]["sugarcrepe/micro"]["value"] == pytest.approx(100 * 2 / 5)

    # the CLI: one row per file in the Markdown table, the per-kind summary, the JSON output
    out = tmp_path / "t.md"
    r = CliRunner().invoke(bindscope_cli, ["collect", str(folder), "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.count("\n| ") == 10
    assert "read 10 result files: 1 bench (" in r.output and "2 madman-eval (" in r.output
    probe_columns = len({c for row in table["rows"] if row["kind"] == "probe" for c in row["figures"]})
    assert f"1 probe ({probe_columns} columns)" in r.output
    r = CliRunner().invoke(bindscope_cli, ["collect", str(folder), "--out", str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "t.json").read_text())["summary"] == table["summary"]


def test_unknown_kind_and_schema_failures_name_the_file(results, tmp_path):
    folder, source = results
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "madman.json").write_text((folder / "madman.json").read_text())
    (bad / "weird.json").write_text(json.dumps({"kind": "sweep", "points": []}))
    r = CliRunner().invoke(bindscope_cli, ["collect", str(bad), "--out", str(tmp_path / "t.csv")])
    assert r.exit_code == 2 and "weird.json" in r.output and "'sweep'" in r.output and "probe" in r.output
    assert not (tmp_path / "t.csv").exists()
    broken = dict(source["caption-bias"])
    del broken["positions"]
    (bad / "weird.json").write_text(json.dumps(broken))
    r = CliRunner().invoke(bindscope_cli, ["collect", str(bad), "--out", str(tmp_path / "t.csv")])
    assert r.exit_code == 2 and "weird.json" in r.output and "caption_bias_result" in r.output
    assert "'positions' is a required property" in r.output
    # a caption-bias file written before results recorded their kind is still read
    legacy = {k: v for k, v in source["caption-bias"].items() if k not in ("kind", "schema_version")}
    (bad / "weird.json").write_text(json.dumps(legacy))
    assert [r["kind"] for r in collect([bad])["rows"]] == ["caption-bias", "madman-eval"]
