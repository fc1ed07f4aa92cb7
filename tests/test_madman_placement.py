"""The two digits of a MADMAN image never share or come near each other's ink: the gap check that ``bindscope
verify`` runs, the ink search of the layout, re-plans, the configs refused for want of room, and ``madman eval
--tasks large-object`` on fresh datasets at small image sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from madman_support import CACHE  # noqa: F401  (the session's table cache, set before any table is built)
from tiny_madman import tiny_madman

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope, madman
from bindscope.errors import BadInput, DatasetError, GenerationError
from bindscope.format.reader import Dataset
from bindscope.format.records import crowded_pairs
from bindscope.generators.madman import config as madman_config
from bindscope.generators.madman import render
from bindscope.generators.madman.generator import REPLANS, MadmanGenerator
from bindscope.generators.madman.placement import GAP, fit_ink
from bindscope.generators.madman.render import Renderer, Unplaceable
from bindscope.publish.verify import sample_problems, verify_dataset


def _square(side: int, at: tuple[int, int], shape=(12, 12)) -> np.ndarray:
    m = np.zeros(shape, bool)
    m[at[0]:at[0] + side, at[1]:at[1] + side] = True
    return m


# ------------------------------------------------------------------------------------------ the check itself
@pytest.mark.parametrize("second, apart_at", [
    ((0, 5), {0, 1, 2}),  # columns 3 and 4 empty between them
    ((0, 4), {0, 1}),     # column 3 empty
    ((3, 3), {0}),        # corner to corner: touching
    ((2, 2), set()),      # pixel (2, 2) shared
])
def test_crowded_pairs_counts_the_empty_pixels_along_rows_columns_and_diagonals(second, apart_at):
    one, two = _square(3, (0, 0)), _square(3, second)
    for gap in (0, 1, 2, 3):
        assert (crowded_pairs([one, two], gap) == []) is (gap in apart_at), gap
    # an empty set is apart from everything; pairs are positions in the list
    assert crowded_pairs([one, np.zeros_like(one), two], 0) == ([] if apart_at else [(0, 2)])


def test_fit_ink_by_hand():
    # a 10-pixel canvas with a 1-pixel margin: rows and columns 1..8 may hold ink; 3x3 blocks of ink
    block = np.ones((3, 3), np.float32)
    # object 1 at rows/columns 1..3 has room beside it: object 2 (columns 4..6) moves 2 columns right, to 6..8,
    # the nearest place with 2 empty columns between them (2 rows down would not do: rows 3 and 4 overlap)
    assert fit_ink((block, 1, 1), (block, 1, 4), 10, 1.0, gap=2) == ((0, 0), (0, 2))
    # object 1 in the middle (rows/columns 3..5) leaves no room anywhere: it moves 2 columns left (1..3) and
    # object 2 (columns 6..8) stays; moving it up instead would send object 2 3 rows down
    assert fit_ink((block, 3, 3), (block, 3, 6), 10, 1.0, gap=2) == ((0, -2), (0, 0))
    # at their places already: no shift
    assert fit_ink((block, 1, 1), (block, 1, 6), 10, 1.0, gap=2) == ((0, 0), (0, 0))
    # too large for the canvas: 6 + 2 + 6 pixels do not fit in 8
    big = np.ones((6, 6), np.float32)
    assert fit_ink((big, 1, 1), (big, 1, 1), 10, 1.0, gap=2) is None


# ------------------------------------------------------------------------------------------ generated images
@pytest.fixture(scope="module")
def bundled():
    """The default config on the 5,000 bundled MNIST digits, per image size (one glyph table for all)."""
    made = {}

    def generator(size: int) -> MadmanGenerator:
        if size not in made:
            made[size] = MadmanGenerator.create(madman_config.resolve(flags={"image_size": size}), 0)
        return made[size]
    return generator


@pytest.fixture
def searches(monkeypatch):
    """Counts the layouts that needed the ink search (:func:`fit_ink`) in this process."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return fit_ink(*args, **kwargs)
    monkeypatch.setattr(render, "fit_ink", counted)
    return calls


@pytest.mark.parametrize("size, plans, searched", [(96, 20000, 40), (32, 5000, 500), (64, 5000, 40), (128, 5000, 1)])
def test_no_two_digits_share_or_come_near_each_others_pixels(bundled, searches, size, plans, searched):
    """Default plans (two digits each) at every image size: the check ``bindscope verify`` runs finds nothing, with
    the gap of this generator version; among them are the pairs that needed the ink search."""
    gen = bundled(size)
    gap = gen.object_gap(gen.version)
    assert gap == GAP == 2
    problems, replans = [], 0
    for start in range(0, plans, 1000):
        for sample in gen.make_samples("train", start, 1000):
            assert len(sample.objects) == 2
            problems += sample_problems(sample, f"train[{sample.index}]", gap)
            replans += "replans" in sample.spec
    assert problems == []
    assert len(searches) >= searched and replans == 0


def test_case_madman_digits_overlap(bundled):
    """shared/cases/madman-digits-overlap.md: the demo's test samples 107 and 387 and train samples 702 and 786
    (two large digits, the ink of one crossing the other in generator version 6) keep their digits apart, and the
    two digits drawn alone add up to the image."""
    gen = bundled(96)
    for split, index in (("test", 107), ("test", 387), ("train", 702), ("train", 786)):
        sample = gen.make_samples(split, index, 1)[0]
        assert [o.attributes["size"] for o in sample.objects] == ["large", "large"]
        assert sample_problems(sample, f"{split}[{index}]", GAP) == []
        (one, mask1), (two, mask2) = (gen.render_alone(sample.spec, k) for k in (1, 2))
        assert np.array_equal(one.astype(np.int32) + two, sample.image)
        assert np.array_equal(mask1 + mask2, sample.mask)
        drawn = [one.any(axis=-1), two.any(axis=-1)]  # every lit pixel of each digit
        assert crowded_pairs(drawn, GAP) == []


def test_verify_and_large_object_name_an_old_dataset_whose_digits_overlap(tmp_path, monkeypatch):
    """A dataset whose two digits overlap (as version 6 drew some): ``bindscope verify`` names the shard and the
    sample of each such image, and the large-object task refuses it naming the version and why."""
    gen = tiny_madman({"train": 0, "test": 6, "ood": 0}, shard_size=6, ood={"holdout": []})

    def on_top(self, poses, jitter, direction):  # both digits near the centre: their ink overlaps
        mid = (self.size - 1) / 2
        centres = [(mid, mid - 3.0), (mid, mid + 3.0)]
        return centres, [self.drawing(p, c) for p, c in zip(poses, centres)]
    with monkeypatch.context() as m:
        m.setattr(Renderer, "place", on_top)
        m.setattr(MadmanGenerator, "version", "6")
        build_dataset(gen, tmp_path / "old", progress=False)
    problems = verify_dataset(tmp_path / "old")
    assert len(problems) == 6
    for k, line in enumerate(problems):
        assert line.startswith(f"shards/test-00000.h5[{k}]: sample {k}: the masks of objects 1 and 2 are fewer than "
                               "1 pixel(s) apart"), line
    result = CliRunner().invoke(bindscope, ["verify", str(tmp_path / "old")])
    assert result.exit_code == 1 and "shards/test-00000.h5[0]: sample 0: the masks of objects 1 and 2" in result.output
    from bindscope.evaluation.saliency import single_digit_renders

    with Dataset(tmp_path / "old") as ds, pytest.raises(DatasetError) as err:
        single_digit_renders(ds, "test", generator=gen)
    assert "sample 0 of split 'test': its single-digit renders do not add up to its stored image: the dataset was " \
           "made by MADMAN generator version 6, whose pixels this installation's version 7 does not redraw" in str(err.value)
    # the same plans drawn by this version: verify finds nothing
    build_dataset(gen, tmp_path / "new", progress=False)
    assert verify_dataset(tmp_path / "new") == []


# ------------------------------------------------------------------------------------------ re-plans and refusals
def test_a_plan_without_room_is_replanned_deterministically(monkeypatch):
    gen = tiny_madman({"train": 0, "test": 4, "ood": 0}, ood={"holdout": []})
    spec, caption, negatives = gen.planner.plan("test", 0)
    again = gen.planner.replan(spec, 1)
    assert again == gen.planner.replan(spec, 1) and again["replans"] == 1
    for key in ("digit", "attributes", "swell", "cuts"):
        assert [d[key] for d in again["digits"]] == [d[key] for d in spec["digits"]]
    assert again["mentions"] == spec["mentions"] and again["layout"] != spec["layout"]
    assert [d["alternates"] for d in again["digits"]] != [d["alternates"] for d in spec["digits"]]
    drawn = Renderer.render
    tries = []

    def picky(self, plan):  # no room until the second re-plan
        tries.append(plan.get("replans", 0))
        if tries[-1] < 2:
            raise Unplaceable("no room")
        return drawn(self, plan)
    monkeypatch.setattr(Renderer, "render", picky)
    sample = gen.make_samples("test", 0, 1)[0]
    assert tries == [0, 1, 2] and sample.spec["replans"] == 2 and sample.caption == caption
    assert sample.spec["digits"] == gen.planner.replan(gen.planner.replan(spec, 1), 2)["digits"]
    monkeypatch.setattr(Renderer, "render", lambda self, plan: (_ for _ in ()).throw(Unplaceable("no room")))
    with pytest.raises(GenerationError, match=f"^sample 0 of split 'test': no room, nor with {REPLANS} other "):
        gen.make_samples("test", 0, 1)


def test_a_config_without_room_for_two_digits_is_refused_before_writing(tmp_path):
    config = tmp_path / "huge.yaml"
    config.write_text("attributes:\n  size: {small: 0.3, huge: 0.8}\n")
    out = tmp_path / "o"
    result = CliRunner().invoke(madman, ["generate", "--out", str(out), "--config", str(config), "--image-size", "32",
                                         "-n", "4", "--quiet"])
    assert result.exit_code == 2
    assert result.output.startswith("Error: --image-size 32 leaves no room for two digits of size 'huge' (0.8 of the "
                                    "canvas) 2 pixels apart: a ") and result.output.count("\n") == 1, result.output
    assert "allowed: a larger image_size or smaller size values" in result.output and not out.exists()
    # the library call says the same
    with pytest.raises(BadInput, match="leaves no room"):
        MadmanGenerator.create(madman_config.resolve(flags={"image_size": 32, "attributes": {"size": {"huge": 0.8}}}),
                               0)


def test_same_bytes_for_any_jobs_where_the_ink_search_places_the_digits(tmp_path, searches):
    gen = tiny_madman({"train": 40, "test": 20, "ood": 0}, shard_size=10, ood={"holdout": []}, image_size=32)
    one = build_dataset(gen, tmp_path / "one", jobs=1, progress=False)
    assert len(searches) >= 3  # 32-pixel canvases: many pairs of large digits need it
    two = build_dataset(gen, tmp_path / "two", jobs=2, progress=False)
    for split in ("train", "test"):
        assert [e["sha256"] for e in one["splits"][split]["shards"]] == \
               [e["sha256"] for e in two["splits"][split]["shards"]]
    assert verify_dataset(tmp_path / "one") == []


@pytest.mark.parametrize("size", [32, 64])
def test_large_object_runs_on_a_fresh_dataset(tmp_path, size):
    """``madman eval --tasks large-object`` on a dataset just made at a small image size (the bundled digits, a
    random-weight open_clip model): every test image whose digits differ in size level is scored."""
    out = tmp_path / "d"
    result = CliRunner().invoke(madman, ["generate", "--out", str(out), "-n", "24", "--image-size", str(size),
                                         "--quiet"])
    assert result.exit_code == 0, result.output
    report = tmp_path / "r.json"
    result = CliRunner().invoke(madman, ["eval", str(out), "--model", "ViT-B-32", "--pretrained", "none", "--device",
                                         "cpu", "--tasks", "large-object", "--no-cache", "--quiet", "--out",
                                         str(report)])
    assert result.exit_code == 0, result.output
    with Dataset(out) as ds:
        unequal = sum(s.objects[0].attributes["size"] != s.objects[1].attributes["size"] for s in ds.split("test"))
    scored = json.loads(report.read_text())["metrics"]["large_object"]["test"]
    assert scored["all"]["total"] == unequal > 0 and scored["equal_size_skipped"] == 24 - unequal


def test_a_config_from_another_build_of_the_generator_is_named_as_such():
    """A recorded config whose derived digit pool differs from what this build derives (the same version number,
    other code) is refused naming the differing key, not blamed on the installed digits."""
    import copy

    config = copy.deepcopy(MadmanGenerator.create(madman_config.resolve(), 0).config)
    config["digits"]["rejected"] = config["digits"]["rejected"][1:]
    with pytest.raises(BadInput, match=r"^this dataset's recorded config \(digits\.rejected\) differs from what this "
                                       r"build of MADMAN generator version 7 derives"):
        MadmanGenerator.from_config(config, 0)._load()
