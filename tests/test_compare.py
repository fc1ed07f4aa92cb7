"""Paired tests between results (bindscope compare), seed groups and sweep folders in bindscope collect, and TOR
intervals clustered by image: hand-computed values on toys and on the hand-chosen MADMAN / ComCO fixtures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, comco_fixture, madman_fixture, unit

import bindscope
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.errors import BadInput
from bindscope.evaluation.collect import collect
from bindscope.evaluation.collect_kinds import result_columns
from bindscope.evaluation.comco import evaluate_comco, retrieval_shares
from bindscope.evaluation.compare import compare_results
from bindscope.evaluation.madman import evaluate_madman
from bindscope.evaluation.paired import holm, mcnemar_exact, paired_bootstrap
from bindscope.evaluation.results import samples_path, write_result
from bindscope.evaluation.stats import seed_interval, wilson_interval

T975_2DF = 4.302652729911275  # Student t, 97.5th percentile, 2 degrees of freedom (tables)
RUN = "a" * 64


# ------------------------------------------------------------------------------------------------ statistics
def test_mcnemar_exact_by_hand():
    # b = 1, c = 6: 2 * P(X <= 1), X ~ Bin(7, 1/2) = 2 * (1 + 7) / 128
    assert mcnemar_exact(1, 6) == pytest.approx(2 * (1 + 7) / 2 ** 7, abs=1e-15) == pytest.approx(0.125)
    assert mcnemar_exact(6, 1) == pytest.approx(0.125)
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 2 ** 5)  # 0.0625
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    assert holm([]) == []


def test_paired_bootstrap_constant_difference_is_exact():
    """Ten images of four comparisons; A passes 2 of each image's four, B 3: every resample's difference is
    3/4 - 2/4 = 0.25, so the interval is [0.25, 0.25] and every replicate lies above 0: p = 2 / (R + 1)."""
    clusters = np.repeat(np.arange(10), 4)
    first = np.tile([1, 1, 0, 0], 10)
    second = np.tile([1, 1, 1, 0], 10)
    ones = np.ones(40)
    out = paired_bootstrap((first, ones), (second, ones), clusters, resamples=2000, seed=3)
    assert (out.first, out.second, out.difference) == (0.5, 0.75, 0.25)
    assert (out.low, out.high, out.units) == (0.25, 0.25, 10)
    assert out.p_value == pytest.approx(2 / 2001)


def test_paired_bootstrap_two_clusters_by_hand():
    """Two images, one outcome each: image 0 right only in B, image 1 right in both. A resample holds image 0
    twice (prob 1/4, difference 1), both (1/2, difference 0.5) or image 1 twice (1/4, difference 0): the 2.5% and
    97.5% percentiles are 0 and 1; about a quarter of the replicates are <= 0, so p is about 2 * 1/4."""
    out = paired_bootstrap(([0, 1], [1, 1]), ([1, 1], [1, 1]), [0, 1], resamples=4000, seed=0)
    assert (out.first, out.second, out.difference) == (0.5, 1.0, 0.5)
    assert (out.low, out.high) == (0.0, 1.0)
    assert 0.45 < out.p_value < 0.55


def test_paired_bootstrap_macro_and_conditional():
    # macro over parts x (A 1/2, B 2/2) and y (A 0/1, B 1/1): A 0.25, B 1.0
    out = paired_bootstrap(([1, 0, 0], [1, 1, 1]), ([1, 1, 1], [1, 1, 1]), [0, 1, 2], parts=["x", "x", "y"],
                           resamples=10)
    assert (out.first, out.second, out.difference) == (0.25, 1.0, 0.75)
    # conditional: A counts 2 of 3 (1 right), B 3 of 3 (2 right): 1/2 against 2/3
    out = paired_bootstrap(([1, 0, 0], [1, 1, 0]), ([1, 1, 0], [1, 1, 1]), [0, 1, 2], resamples=10)
    assert out.difference == pytest.approx(2 / 3 - 1 / 2)
    # a single unit: nothing to resample
    out = paired_bootstrap(([1], [1]), ([0], [1]), [5])
    assert (out.difference, out.low, out.high, out.p_value) == (-1.0, None, None, 1.0)


def test_seed_interval_by_hand():
    s = seed_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, half-width t(0.975, 2) / sqrt(3)
    assert s["mean"] == 2.0 and s["n"] == 3
    assert s["low"] == pytest.approx(2 - T975_2DF / math.sqrt(3)) and s["high"] == pytest.approx(2 + T975_2DF /
                                                                                                  math.sqrt(3))
    assert seed_interval([4.0, None]) == {"mean": 4.0, "low": None, "high": None, "n": 1}


# ------------------------------------------------------------------------------------------------ TOR by image
def test_tor_intervals_cluster_the_captions_of_one_image():
    """Two images with two captions of two objects each: image 0's captions both stand for their first object,
    image 1's both for their second. Position 1 wins 2 of 4 captions (Wilson [0.150, 0.850]); over images, a
    resample holds image 0 twice (share 1, prob 1/4), both (1/2) or image 1 twice (0, 1/4): [0, 1]."""
    names = ["a", "b", "c", "d"]
    e = np.eye(4, dtype=np.float32)
    queries = np.stack([e[0], e[0], e[3], e[3]])
    ordered = [["a", "b"], ["a", "c"], ["c", "d"], ["b", "d"]]
    block = retrieval_shares(queries, e, names, ordered, sample_ids=[7, 7, 9, 9])["2"]
    first = block["positions"][0]
    assert first["unconditional"]["count"] == 2 and first["unconditional"]["ci95"] == wilson_interval(2, 4)
    assert first["unconditional"]["ci95_cluster"] == [0.0, 1.0] and first["unconditional"]["clusters"] == 2
    assert first["conditional"]["ci95_cluster"] == [0.0, 1.0]
    # one query per scene (ComCO): no cluster interval, the Wilson one is by the sampling unit already
    single = retrieval_shares(queries, e, names, ordered, sample_ids=[1, 2, 3, 4])["2"]
    assert "ci95_cluster" not in single["positions"][0]["unconditional"]


def test_coco_tor_is_clustered_by_image(tmp_path):
    from coco_fixture import write_coco
    from test_coco_eval import encoder

    from bindscope.importers.coco import import_coco

    import_coco(*write_coco(tmp_path / "src"), tmp_path / "coco", image_size=40, progress=False)
    result = evaluate_comco(tmp_path / "coco", encoder(), ["tor"], progress=False)
    two = result["metrics"]["tor"]["by_num_objects"]["2"]  # 4 captions of images 7 (two) and 9 (two)
    assert two["num_queries"] == 4
    assert all(p[k]["clusters"] == 2 for p in two["positions"] for k in ("conditional", "unconditional"))
    columns = result_columns(result)
    assert columns.figures["tor/2obj/pos1"]["interval"] == "img"
    assert columns.figures["tor/2obj/pos1"]["low"] == 100 * two["positions"][0]["conditional"]["ci95_cluster"][0]
    assert "95% CI (images)" in "\n".join(bindscope.evaluation.report.retrieval_lines("TOR", result["metrics"]["tor"],
                                                                                       "position"))


def test_report_labels():
    from bindscope.evaluation.report import POSITION_NOTE, model_line

    result = {"model": {"resolved_name": "m", "pretrained": "none"}, "dataset": None,
              "settings": {"captions": "combinations: every itertools.combinations of comco72 (72 names), 3 each"}}
    assert model_line(result).endswith("on (captions combinations: every itertools.combinations of comco72 (72 "
                                       "names), 3 each, no dataset)")
    result["settings"] = {"objects": 4}
    assert model_line(result).endswith("on (sampled captions, no dataset)")
    assert "CI: Wilson 95%." not in POSITION_NOTE


# ------------------------------------------------------------------------------------------------ compare
def _madman_variant(base: FakeEncoder, score: float, run: dict | None = None) -> FakeEncoder:
    """The fixture's encoder with the caption of test image 3 ("red 3 and blue 4") at cosine ``score`` with its
    image: 0.5 (as built) passes its binding negative (0.3), 0.25 fails it; recognition (0.1, 0.2) passes both."""
    encoder = FakeEncoder(base.embed_dim, dict(base.text_vectors), dict(base.image_vectors))
    encoder.text_vectors["red 3 and blue 4"] = (score * unit(64, 3) + math.sqrt(1 - score ** 2) *
                                                unit(64, 60)).astype(np.float32)
    encoder.run = run
    return encoder


def _write(path, data, encoder, **kw):
    rows: list = []
    result = evaluate_madman(data, encoder, progress=False, rows=rows, **kw)
    write_result(path, result, rows=rows)
    return path


@pytest.fixture(scope="module")
def madman_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    data, base = madman_fixture(tmp)
    files = {s: _write(tmp / f"seed{s}.json", data, _madman_variant(base, score, {"seed": s,
                                                                                  "identity_except_seed_sha256": RUN}))
             for s, score in ((0, 0.5), (1, 0.25), (2, 0.5))}
    return tmp, data, base, files


def test_compare_madman_by_hand(madman_results):
    tmp, _, _, files = madman_results
    comparison = compare_results([files[0], files[1]], seed=0, resamples=500)
    by = {m.metric: m for m in comparison.metrics}
    # binding (all) colour: images 1 and 3 pass in A, only image 1 in B; one comparison per image: McNemar, b=1
    m = by["test/binding_all/colour"]
    assert (m.baseline_value, m.value) == pytest.approx((200 / 3, 100 / 3))
    assert m.test == "McNemar exact" and m.discordant == [1, 0] and m.p_value == 1.0 and (m.items, m.units) == (3, 3)
    # recognition colour: two comparisons per image: paired bootstrap, no change
    m = by["test/recognition/colour"]
    assert m.test == "paired bootstrap" and (m.items, m.units) == (6, 3) and m.difference == 0.0
    assert (m.low, m.high, m.p_value) == (0.0, 0.0, 1.0)
    # every compared figure equals the collect column of each file
    for number, path in ((0, files[0]), (1, files[1])):
        figures = result_columns(json.loads(path.read_text())).figures
        for m in comparison.metrics:
            value = m.baseline_value if number == 0 else m.value
            assert value == pytest.approx(figures[m.metric]["value"]), m.metric
    p = [m.p_value for m in comparison.metrics]
    assert [m.p_holm for m in comparison.metrics] == pytest.approx(holm(p))
    table = comparison.format("md")
    assert "| test/binding_all/colour | 66.7 | 33.3 | -33.3 |" in table and "McNemar exact (b=1, c=0)" in table
    assert comparison.format("csv").splitlines()[0].startswith("baseline,metric,result,baseline_value")
    assert json.loads(comparison.format("json"))["metrics"][0]["metric"] == comparison.metrics[0].metric


def test_compare_refuses_other_samples(madman_results, tmp_path):
    tmp, data, base, files = madman_results
    with pytest.raises(BadInput, match="name at least two different result files"):
        compare_results([files[0], files[0]])
    # another dataset: the manifest sha256 differs
    other = tmp_path / "other.json"
    result = json.loads(files[1].read_text())
    result["dataset"]["manifest_sha256"] = "0" * 64
    other.write_text(json.dumps(result))
    samples_path(other).write_bytes(samples_path(files[1]).read_bytes())
    with pytest.raises(BadInput, match=f"not on the same dataset: manifest sha256 [0-9a-f]{{64}} \\({data}\\) and "
                                       f"{'0' * 64}"):
        compare_results([files[0], other])
    # the same dataset, one split
    one_split = _write(tmp_path / "test-only.json", data, _madman_variant(base, 0.5), splits=["test"])
    with pytest.raises(BadInput, match=r"score different splits \(test, ood and test\)"):
        compare_results([files[0], one_split])
    # a row dropped from the per-sample file
    dropped = tmp_path / "dropped.json"
    dropped.write_bytes(files[1].read_bytes())
    lines = samples_path(files[1]).read_text().splitlines()
    samples_path(dropped).write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(BadInput, match="score different samples in task recognition"):
        compare_results([files[0], dropped])
    # an item that is another negative
    changed = tmp_path / "changed.json"
    changed.write_bytes(files[1].read_bytes())
    rows = [json.loads(line) for line in lines]
    rows[0]["negative"] = "something else"
    samples_path(changed).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BadInput, match="differ in task recognition, item"):
        compare_results([files[0], changed])
    # no per-sample file
    bare = tmp_path / "bare.json"
    bare.write_bytes(files[1].read_bytes())
    with pytest.raises(BadInput, match="has no per-sample rows"):
        compare_results([files[0], bare])


def test_compare_comco_tor_uses_mcnemar(tmp_path):
    """ComCO fixture: one caption per scene. B's caption of scene A points at pizza (position 1) instead of apple
    (position 2): TOR 3 objects, position 1 unconditional: A 1 of 4 (scene C), B 2 of 4; b = 0, c = 1."""
    data, base = comco_fixture(tmp_path)
    other = FakeEncoder(base.embed_dim, dict(base.text_vectors), dict(base.image_vectors))
    other.text_vectors["pizza and apple and desk"] = unit(8, 0)
    files = []
    for name, encoder in (("a", base), ("b", other)):
        rows: list = []
        write_result(tmp_path / f"{name}.json", evaluate_comco(data, encoder, ["tor"], progress=False, rows=rows),
                     rows=rows)
        files.append(tmp_path / f"{name}.json")
    by = {m.metric: m for m in compare_results(files).metrics}
    m = by["tor/3obj/pos1/uncond"]
    assert (m.baseline_value, m.value, m.discordant, m.p_value) == (25.0, 50.0, [0, 1], 1.0)
    assert m.test == "McNemar exact"
    assert by["tor/3obj/pos2/uncond"].discordant == [1, 0]


def test_compare_command_and_collect_compare(madman_results, tmp_path):
    _, _, _, files = madman_results
    runner = CliRunner()
    r = runner.invoke(bindscope_cli, ["compare", str(files[0]), str(files[1]), "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("baseline,metric,result")
    r = runner.invoke(bindscope_cli, ["compare", str(files[0]), str(files[1]), "--out", str(tmp_path / "c.md")])
    assert r.exit_code == 0 and (tmp_path / "c.md").read_text() in r.output
    r = runner.invoke(bindscope_cli, ["compare", str(files[0]), str(files[1]), "--out", str(tmp_path / "c.md")])
    assert r.exit_code == 2 and r.output.count("Error:") == 1 and "already exists" in r.output
    r = runner.invoke(bindscope_cli, ["compare", str(files[0])])
    assert r.exit_code == 2 and "at least two different result files" in r.output
    r = runner.invoke(bindscope_cli, ["collect", str(files[0]), str(files[1]), "--out", str(tmp_path / "t.md"),
                                      "--compare"])
    assert r.exit_code == 0, r.output
    assert "Paired comparison (madman-eval" in (tmp_path / "t.md").read_text()
    r = runner.invoke(bindscope_cli, ["collect", str(files[0]), str(files[1]), "--out", str(tmp_path / "t.csv"),
                                      "--compare"])
    assert r.exit_code == 2 and "cannot hold the comparison" in r.output and not (tmp_path / "t.csv").exists()
    assert isinstance(bindscope.compare([files[0], files[1]], resamples=10), bindscope.evaluation.compare.Comparison)


# ------------------------------------------------------------------------------------------------ seeds, sweeps
def test_collect_groups_results_that_differ_only_in_seed(madman_results):
    _, _, _, files = madman_results
    table = collect(list(files.values()))
    assert [r["seed"] for r in table["rows"]] == [0, 1, 2]
    (group,) = table["groups"]
    assert group["seeds"] == [0, 1, 2] and group["files"] == [str(files[s]) for s in (0, 1, 2)]
    f = group["figures"]["test/binding_all/colour"]
    # per seed 2/3, 1/3, 2/3: mean 500/9 %, sd 100 sqrt(3) / 9, half-width t * sd / sqrt(3) = 100 t / 9
    assert f["values"] == pytest.approx([200 / 3, 100 / 3, 200 / 3]) and f["n"] == 3
    assert f["value"] == pytest.approx(500 / 9)
    assert (f["low"], f["high"]) == pytest.approx((500 / 9 - 100 * T975_2DF / 9, 500 / 9 + 100 * T975_2DF / 9))
    assert f["interval"] == "seeds"
    from bindscope.evaluation.collect import format_table

    text = format_table(table, "md")
    assert "Over seeds: mean [95% Student t interval over the seeds, n - 1 degrees of freedom]" in text
    assert "55.6 [7.7, 103.4] (66.7; 33.3; 66.7)" in text  # 500/9 -+ 100 t / 9 = 7.75, 103.36
    csv_lines = format_table(table, "csv").splitlines()
    assert csv_lines[0].split(",")[6] == "seed" and csv_lines[-1].startswith("mean over seeds,")


def test_collect_reads_a_sweep_folder(madman_results, tmp_path):
    """A sweep folder as madman sweep lays it out: two values, two seeds each; the points of value 0 record their
    run (model.run), those of value 1 do not (seed from the folder name)."""
    _, data, base, _ = madman_results
    out = tmp_path / "sweep"
    scores = {(0, 0): 0.5, (0, 1): 0.25, (1, 0): 0.5, (1, 1): 0.5}
    for (value, seed), score in scores.items():
        run = out / "runs" / f"saliency_bias={value:g}" / f"seed-{seed}"
        run.mkdir(parents=True)
        identity = {"seed": seed, "identity_except_seed_sha256": RUN} if value == 0 else None
        _write(run / "result.json", data, _madman_variant(base, score, identity))
        (run / "run.json").write_text("{}")
    (out / "runs" / "saliency_bias=2" / "seed-0").mkdir(parents=True)  # an unfinished point: left out
    (out / "sweep.json").write_text(json.dumps({"property": "saliency_bias", "points": []}))
    table = bindscope.collect([out], tmp_path / "sweep.csv", plot=tmp_path / "sweep.png")
    assert [(r["property"], r["value"], r["seed"]) for r in table["rows"]] == [
        ("saliency_bias", 0.0, 0), ("saliency_bias", 0.0, 1), ("saliency_bias", 1.0, 0), ("saliency_bias", 1.0, 1)]
    groups = {g["value"]: g for g in table["groups"]}
    assert groups[0.0]["figures"]["test/binding_all/colour"]["value"] == pytest.approx(50.0)  # (2/3 + 1/3) / 2
    assert groups[1.0]["figures"]["test/binding_all/colour"]["values"] == pytest.approx([200 / 3, 200 / 3])
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = (tmp_path / "sweep.csv").read_text().splitlines()[0].split(",")
    assert header[6:9] == ["property", "value", "seed"]
    from bindscope.evaluation.collect_groups import curve

    xs, mean, low, high = curve(table["rows"], "value", "test/binding_all/colour")
    assert xs == [0.0, 1.0] and mean == pytest.approx([50.0, 200 / 3])
    with pytest.raises(BadInput, match="holds no finished point"):
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "sweep.json").write_text("{}")
        collect([tmp_path / "empty"])


def test_samples_file_keeps_every_dot_of_the_result_name(tmp_path):
    # results named after a sweep value: only a .json suffix is taken off, so 2.5 and 2.7 never share rows
    assert samples_path(tmp_path / "density=2.5").name == "density=2.5.samples.jsonl"
    assert samples_path(tmp_path / "density=2.7").name == "density=2.7.samples.jsonl"
    assert samples_path(tmp_path / "density=2.5.json").name == "density=2.5.samples.jsonl"
    assert samples_path(tmp_path / "result.json") == tmp_path / "result.samples.jsonl"
