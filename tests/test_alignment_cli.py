"""End to end: `bindscope probe` and `bindscope labclip fit|eval|apply` on a tiny generated MADMAN dataset with a
tiny CLIP trained here by `madman train`. Figures are checked against embeddings computed directly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bindscope.cli.main import bindscope, madman

pytestmark = pytest.mark.slow

TINY_MODEL = ["--embed-dim", "32", "--image-size", "32", "--vision-width", "64", "--vision-layers", "1",
              "--text-width", "64", "--text-layers", "1", "--batch-size", "16", "--steps", "3", "--warmup", "1",
              "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("alignment")
    config = root / "splits.yaml"
    config.write_text("splits:\n  train: 48\n  test: 160\n  ood: 0\n")
    data = root / "madman"
    r = CliRunner().invoke(madman, ["generate", "--preset", "realistic", "--config", str(config), "--out", str(data),
                                    "--quiet"])
    assert r.exit_code == 0, r.output
    run = root / "run"
    r = CliRunner().invoke(madman, ["train", str(data), "--out", str(run), *TINY_MODEL])
    assert r.exit_code == 0, r.output
    return data, run / "model.pt", root


def invoke(args):
    return CliRunner().invoke(bindscope, args, catch_exceptions=False)


def test_probe_cli_counts_and_schema(tiny):
    from bindscope.alignment.data import load_table
    from bindscope.alignment.probes import probe_splits, probe_targets
    from bindscope.format.reader import Dataset
    from bindscope.schemas import validate

    data, model, root = tiny
    out = root / "probe.json"
    r = invoke(["probe", str(data), "--model", str(model), "--no-cache", "--steps", "20", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    validate(result, "alignment_result", "result")
    assert result["kind"] == "probe" and result["settings"]["split"] == "test"
    table = load_table(Dataset(data), "test", build_swaps=False)
    for modality in ("image", "text"):
        for attribute in ("colour", "rotation"):
            summary = result["metrics"]["modalities"][modality][attribute]
            split = probe_splits(table, attribute, (0.6, 0.2, 0.2), seed=0)
            expected = {c: sum(split.get(c, {}).get(s) == 2 for s, _ in pairs)
                        for c, pairs in probe_targets(table, modality, attribute).items()}
            for category, info in summary["targets"].items():
                assert info["n_test"] == expected[category]
                if "accuracy" in info:
                    assert 0 <= info["accuracy"] <= 1 and info["chance"] == pytest.approx(1 / info["n_classes"])
    # every two-digit test caption describes both digits with one attribute: the text view has 2 objects
    assert "colour" in r.output and "chance" in r.output
    # refusing to overwrite, and a bad attribute, before anything is computed
    r = CliRunner().invoke(bindscope, ["probe", str(data), "--model", str(model), "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.output
    r = CliRunner().invoke(bindscope, ["probe", str(data), "--model", str(model), "--attributes", "shape",
                                       "--out", str(root / "none.json")])
    assert r.exit_code == 2 and "'shape'" in r.output and "colour" in r.output
    assert not (root / "none.json").exists()


def test_labclip_fit_eval_apply_match_direct_computation(tiny):
    from bindscope.alignment.data import load_table
    from bindscope.alignment.labclip import load_labclip
    from bindscope.alignment.splits import hold_out_triples
    from bindscope.alignment.pairs import labclip_items
    from bindscope.encoders.registry import load_adapter
    from bindscope.format.reader import Dataset

    data, model, root = tiny
    path = root / "labclip.pt"
    r = invoke(["labclip", "fit", str(data), "--model", str(model), "--no-cache", "--out", str(path),
                "--holdout-fraction", "0.2", "--epochs", "8", "--lr", "0.01", "--fit-batch-size", "32"])
    assert r.exit_code == 0, r.output
    labclip = load_labclip(path)
    losses = labclip.meta["loss_history"]
    assert len(losses) == 9 and losses[-1] < losses[0]
    assert labclip.weight.shape == (32, 32)

    # the held-out samples and negatives, recomputed by hand
    ds = Dataset(data)
    table = load_table(ds, "test")
    items = labclip_items(table)
    held, is_held = hold_out_triples([table.triples(i) for i in items], 0.2, seed=0)
    assert sorted(map(tuple, labclip.meta["held_out"])) == sorted(held)
    adapter = load_adapter(str(model), device="cpu")
    split = ds.split("test")
    rows = []  # (sample, caption, swapped caption) of every binding negative that swaps a held-out combination
    for s in items[is_held]:
        sample = split[int(s)]
        by_index = {o.index: o for o in sample.objects}
        for n in sample.negatives:
            triples = {(by_index[k].category, n.attribute, by_index[k].attributes[n.attribute]) for k in n.objects}
            if n.kind == "binding" and triples & held:
                rows.append((int(s), sample.caption, n.caption))
    images = adapter.encode_images(np.stack([split[s].image for s, _, _ in rows]))
    captions, swapped = (adapter.encode_texts([r[k] for r in rows]) for k in (1, 2))
    correct = {"before": np.sum(images * captions, 1) > np.sum(images * swapped, 1),
               "after": np.sum(images * labclip(captions), 1) > np.sum(images * labclip(swapped), 1)}
    assert len(rows) >= 3, "the tiny dataset must hold out some binding negatives"

    out = root / "labclip.json"
    r = invoke(["labclip", "eval", str(data), "--model", str(model), "--no-cache", "--labclip", str(path),
                "--out", str(out)])
    assert r.exit_code == 0, r.output
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["before"]["binding"]["n"] == len(correct["before"])
    assert metrics["before"]["binding"]["accuracy"] == pytest.approx(np.mean(correct["before"]))
    assert metrics["after"]["binding"]["accuracy"] == pytest.approx(np.mean(correct["after"]))
    assert 0 <= metrics["after"]["modality_gap"] <= 2 and "modality gap" in r.output

    # applying the map to stored embeddings, without re-encoding
    captions = adapter.encode_texts([table.captions[i] for i in items[:10]])
    np.save(root / "captions.npy", captions)
    r = invoke(["labclip", "apply", str(root / "captions.npy"), "--labclip", str(path), "--out",
                str(root / "mapped.npy")])
    assert r.exit_code == 0, r.output
    mapped = np.load(root / "mapped.npy")
    expected = captions @ labclip.weight.T
    np.testing.assert_allclose(mapped, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)

    # `madman eval --labclip` scores the mapped text embeddings with the evaluation module's protocol; its
    # binding counts equal this module's on every test sample with binding negatives
    from bindscope.alignment.data import make_embedder
    from bindscope.alignment.pairs import binding_report, embed_pairs

    r = CliRunner().invoke(madman, ["eval", str(data), "--model", str(model), "--split", "test", "--no-cache",
                                    "--labclip", str(path), "--out", str(root / "eval.json"), "--quiet"])
    assert r.exit_code == 0, r.output
    evaluated = json.loads((root / "eval.json").read_text())["metrics"]["splits"]["test"]["binding"]["per_attribute"]
    pairs = embed_pairs(table, ds, make_embedder(adapter, use_cache=False), items)
    mine = binding_report(pairs, labclip, None, table.attributes)["binding_given_recognition"]["per_attribute"]
    assert {a: (v["correct"], v["total"]) for a, v in evaluated.items() if v["total"]} == \
        {a: (v["correct"], v["n"]) for a, v in mine.items() if v["n"]}

    # a map of another dimension is refused with exit status 2
    np.save(root / "wrong.npy", np.ones((2, 16), np.float32))
    r = CliRunner().invoke(bindscope, ["labclip", "apply", str(root / "wrong.npy"), "--labclip", str(path),
                                       "--out", str(root / "wrong-out.npy")])
    assert r.exit_code == 2 and "32-dimensional" in r.output and not (root / "wrong-out.npy").exists()


def test_labclip_fit_quiet_prints_no_progress_bar(tiny):
    data, model, root = tiny
    args = ["labclip", "fit", str(data), "--model", str(model), "--no-cache", "--epochs", "2", "--fit-batch-size",
            "32"]
    loud = invoke([*args, "--out", str(root / "loud.pt")])
    assert loud.exit_code == 0 and "LABCLIP: 100%" in loud.output, loud.output
    quiet = invoke([*args, "--out", str(root / "quiet.pt"), "--quiet"])
    assert quiet.exit_code == 0
    lines = quiet.output.splitlines()
    assert len(lines) == 4 and lines[0].startswith("LABCLIP fitted on ") and lines[3] == f"wrote {root / 'quiet.pt'}"
    assert lines[1] == "protocol bindscope (overrides: batch_size, epochs): 2 epochs of 32 pairs, Adam lr 0.001, " \
                       "temperature from 14.29"
    assert lines[2] in loud.output  # the same fit (its losses), without the bar
