"""Per-object colour/material planning, attribute captions, negatives and conjunctive-search plans (no Blender)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from bindscope.cli.main import comco
from bindscope.config import resolve_config
from bindscope.errors import BadInput
from bindscope.generators.comco import attributes as A
from bindscope.generators.comco import scene
from bindscope.generators.comco.config import DEFAULT_CONFIG, resolve_render_config
from bindscope.generators.comco.registry import load_set

SIMCO = load_set("simco18")
NAMES = [c.name for c in SIMCO]


def config(**overrides) -> dict:
    cfg = resolve_config("comco_config", DEFAULT_CONFIG, {"set": "simco18", **overrides})
    A.check_attribute_config(cfg, NAMES)
    return cfg


def test_default_colours_are_clevr_in_linear_rgb():
    assert list(A.DEFAULT_COLOURS) == ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"]
    assert A.DEFAULT_COLOURS["red"] == [round(((173 / 255 + 0.055) / 1.055) ** 2.4, 4),
                                        round(((35 / 255 + 0.055) / 1.055) ** 2.4, 4),
                                        round(((35 / 255 + 0.055) / 1.055) ** 2.4, 4)]
    assert A.parse_attributes("colour, material,colour") == ["colour", "material"]
    with pytest.raises(BadInput, match="unknown attribute 'shape'"):
        A.parse_attributes("colour,shape")


def test_captions_carry_the_sampled_attributes_and_parse_back():
    cfg = config(attributes=["size", "colour", "material"])
    for i in range(30):
        spec = scene.plan_scene(cfg, SIMCO, 5, i)
        parsed = A.parse_caption(spec["caption"], cfg, NAMES)
        by_mention = sorted(spec["objects"], key=lambda e: e["mention_position"])
        assert parsed == [{"size": e["size"], "colour": e["colour"], "material": e["material"],
                           "category": e["category"]} for e in by_mention]
        for e in spec["objects"]:
            assert e["look"] == {"rgb": cfg["colours"][e["colour"]], "bsdf": cfg["materials"][e["material"]]}
            assert e["size"] == ("large" if e["large"] else "small")
    # the word order of docs/comco.md: size, colour, material, category
    assert A.object_words({"size": "small", "colour": "red", "material": "metal", "category": "cube"},
                          A.caption_order(cfg), cfg["attributes"]) == "small red metal cube"


def test_caption_order_and_templates_are_configurable():
    cfg = config(attributes=["colour", "material"],
                 caption={"order": ["material", "colour", "size"], "templates": ["a render of {objects}."],
                          "joiner": ", "})
    spec = scene.plan_scene(cfg, SIMCO, 0, 1)
    first = min(spec["objects"], key=lambda e: e["mention_position"])
    assert spec["caption"].startswith(f"a render of {first['material']} {first['colour']} {first['category']}")
    assert spec["caption"].count(", ") == len(spec["objects"]) - 1
    assert len(A.parse_caption(spec["caption"], cfg, NAMES)) == len(spec["objects"])
    with pytest.raises(BadInput, match="does not follow"):
        A.parse_caption("a render of green cube.", cfg, NAMES)


def test_without_attributes_specs_are_unchanged():
    plain = config()
    spec = scene.plan_scene(plain, SIMCO, 3, 2)
    assert "caption_parts" not in spec and "colour" not in spec["objects"][0]
    ordered = sorted(spec["objects"], key=lambda e: e["mention_position"])
    assert spec["caption"] == " and ".join(e["category"] for e in ordered)


def test_colour_and_material_are_uniform_and_seeded():
    cfg = config(attributes=["colour", "material"])
    specs = [scene.plan_scene(cfg, SIMCO, 0, i) for i in range(400)]
    assert specs[:5] == [scene.plan_scene(cfg, SIMCO, 0, i) for i in range(5)]
    pairs = Counter((e["colour"], e["material"]) for s in specs for e in s["objects"])
    assert len(pairs) == 16
    total = sum(pairs.values())  # 400 scenes x 3.5 objects; each of 16 pairs expects 87.5
    assert all(abs(n - total / 16) < 4.5 * np.sqrt(total / 16) for n in pairs.values())


def test_held_out_combinations_exclude_and_only():
    held = [{"category": "cube", "colour": "red"}, {"category": "sphere", "colour": "blue", "material": "metal"}]
    train = config(attributes=["colour", "material"], combinations={"held_out": held, "mode": "exclude"})
    test = config(attributes=["colour", "material"], combinations={"held_out": held, "mode": "only"})
    assert A.allowed_pairs(train, "cube") == [(c, m) for c in A.DEFAULT_COLOURS if c != "red"
                                              for m in ("rubber", "metal")]
    assert A.allowed_pairs(test, "cube") == [("red", "rubber"), ("red", "metal")]
    assert A.allowed_pairs(test, "sphere") == [("blue", "metal")]
    assert len(A.allowed_pairs(test, "torus")) == 16
    for cfg, inside in ((train, False), (test, True)):
        seen = [(e["category"], e["colour"], e["material"]) for i in range(300)
                for e in scene.plan_scene(cfg, SIMCO, 1, i)["objects"] if e["category"] in ("cube", "sphere")]
        assert seen
        assert all((c == "cube" and col == "red" or c == "sphere" and (col, m) == ("blue", "metal")) == inside
                   for c, col, m in seen)


def test_attribute_config_errors_name_the_value():
    with pytest.raises(BadInput, match="size_mode=.one-large."):
        config(attributes=["size"], size_mode="equal")
    with pytest.raises(BadInput, match="'teapot' is not in set"):
        config(attributes=["colour"], combinations={"held_out": [{"category": "teapot", "colour": "red"}],
                                                    "mode": "exclude"})
    with pytest.raises(BadInput, match="colour 'pink' is not a sampled colour"):
        config(attributes=["colour"], combinations={"held_out": [{"category": "cube", "colour": "pink"}],
                                                    "mode": "exclude"})
    everything = [{"category": "cube", "colour": c} for c in A.DEFAULT_COLOURS]
    with pytest.raises(BadInput, match="leaves category 'cube' no colour"):
        config(attributes=["colour"], combinations={"held_out": everything, "mode": "exclude"})
    with pytest.raises(BadInput, match="needs attributes='colour'"):
        config(task="conjunctive-search")


def test_negatives_swap_and_replace_and_never_equal_the_caption():
    cfg = config(attributes=["size", "colour", "material"])
    for i in range(40):
        spec = scene.plan_scene(cfg, SIMCO, 2, i)
        negatives = A.scene_negatives(spec, cfg, np.random.default_rng(i))
        objs = {e["index"]: e for e in spec["objects"]}
        m = len(objs)
        for a in ("size", "colour", "material"):
            rec = [n for n in negatives if n.kind == "recognition" and n.attribute == a]
            assert len(rec) == m
            differing = sum(objs[p][a] != objs[q][a] for p in objs for q in objs if p < q)
            binding = [n for n in negatives if n.kind == "binding" and n.attribute == a]
            assert len(binding) == differing
            for n in binding:
                p, q = n.objects
                parsed = {d["category"]: d for d in A.parse_caption(n.caption, cfg, NAMES)}
                assert parsed[objs[p]["category"]][a] == objs[q][a] != objs[p][a]
                assert parsed[objs[q]["category"]][a] == objs[p][a]
            for n in rec:
                (k,) = n.objects
                parsed = {d["category"]: d for d in A.parse_caption(n.caption, cfg, NAMES)}
                assert parsed[objs[k]["category"]][a] == n.replacement != n.original == objs[k][a]
        assert all(n.caption != spec["caption"] for n in negatives)
        assert len({n.caption for n in negatives if n.kind == "binding"}) == \
            len([n for n in negatives if n.kind == "binding"])


def test_conjunctive_scenes_hold_the_planned_objects_and_match_bags():
    cfg = config(attributes=["colour"], task="conjunctive-search", objects={"min": 2, "max": 5})
    present_bags, absent_bags = Counter(), Counter()
    for i in range(80):
        spec = scene.plan_scene(cfg, SIMCO, 4, i)
        info = spec["conjunctive_search"]
        objs = [(e["category"], e["colour"]) for e in spec["objects"]]
        assert len(objs) == len(set(objs)) == info["distractors"] + 1 == 2 + i % 4
        assert info["present"] == ((i // 4) % 2 == 0)
        assert (("sphere", "red") in objs) == info["present"]
        others = [o for o in objs if o != ("sphere", "red")]
        sharing = [o for o in others if (o[0] == "sphere") != (o[1] == "red")]
        assert len(sharing) == len(others) - (1 if info["present"] else 0)
        # the multiset of shapes and colours does not tell present from absent: S + C counts are equal
        bag = (sum(c == "sphere" for c, _ in objs) + sum(col == "red" for _, col in objs), len(objs))
        (present_bags if info["present"] else absent_bags)[bag] += 1
        assert bag[0] == len(objs)
    assert sorted(present_bags) == sorted(absent_bags)


def test_cli_flags_reach_the_config(tmp_path):
    cfg = resolve_render_config(None, {"attributes": "colour,material", "task": "conjunctive-search",
                                       "depth": True, "set": "simco18"})
    assert cfg["attributes"] == ["colour", "material"] and cfg["task"] == "conjunctive-search" and cfg["depth"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"colours": {"red": [0.8, 0.0, 0.0], "blue": [0.0, 0.0, 0.8]}}))
    cfg = resolve_render_config(str(path), {"attributes": "colour"})
    assert cfg["colours"] == {"red": [0.8, 0.0, 0.0], "blue": [0.0, 0.0, 0.8]}  # replaces the table
    result = CliRunner().invoke(comco, ["render", "--attributes", "colour,shine", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "unknown attribute 'shine'" in result.output
    assert not (tmp_path / "x").exists()
