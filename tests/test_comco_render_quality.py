"""The Cycles settings per ``render.quality`` (real bpy, 48 px): the RGB settings change the image only; masks,
depth and per-object results stay bit-identical to those of ComCO generator version 0.1.0's settings."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.config import resolve_config
from bindscope.errors import BadInput
from bindscope.generators.comco import quality, scene
from bindscope.generators.comco.config import DEFAULT_CONFIG, resolve_render_config

RES = 48


def test_quality_sets_samples_and_the_spec_records_it():
    cfg = resolve_render_config(None, {"set": "simco18"})
    assert cfg["render"] == {"quality": "default"} and cfg["samples"] is None
    from bindscope.generators.comco.registry import load_set

    cats = load_set("simco18")
    block = scene.plan_scene(cfg, cats, 0, 0)["render"]
    assert (block["quality"], block["samples"]) == ("default", quality.SAMPLES["default"])
    draft = scene.plan_scene(resolve_render_config(None, {"set": "simco18", "render": {"quality": "draft"}}),
                             cats, 0, 0)["render"]
    assert (draft["quality"], draft["samples"]) == ("draft", quality.SAMPLES["draft"])
    assert draft["seed"] == block["seed"]  # the quality changes no random draw
    given = scene.plan_scene(resolve_render_config(None, {"set": "simco18", "samples": 5}), cats, 0, 0)["render"]
    assert given["samples"] == 5
    legacy = {k: v for k, v in cfg.items() if k != "render"}  # a manifest config of generator version 0.1.0
    assert "quality" not in scene.render_settings({**legacy, "samples": 16}, 0, "scenes", 0, 0)
    assert quality.cycles_settings({"samples": 16, "denoise": True})["max_bounces"] == 8
    with pytest.raises(BadInput, match="render"):
        resolve_render_config(None, {"render": {"quality": "best"}})


@pytest.mark.blender
def test_every_quality_keeps_masks_and_ids_of_the_old_settings():
    from bindscope.generators.comco.generator import ComcoGenerator

    cfg = resolve_config("comco_config", DEFAULT_CONFIG, {"set": "simco18", "resolution": RES, "n": 3})
    gen = ComcoGenerator(cfg, seed=0, threads=2, device="cpu")
    session = gen._session()
    for index in range(3):
        spec = scene.plan_scene(cfg, gen.categories, 0, index)
        old = {**spec, "render": {k: v for k, v in spec["render"].items() if k != "quality"}}
        old["render"]["samples"] = 16
        ref = session.render(old, depth=True)
        assert ref.image.shape == (RES, RES, 3) and set(np.unique(ref.mask).tolist()) - {0}
        images = []
        for name in quality.QUALITIES:
            block = {**spec["render"], "quality": name, "samples": quality.SAMPLES[name]}
            out = session.render({**spec, "render": block}, depth=True)
            assert np.array_equal(out.mask, ref.mask) and out.mask.dtype == np.uint8
            assert np.array_equal(out.depth, ref.depth)
            assert [vars(o) for o in out.objects] == [vars(o) for o in ref.objects]
            images.append(out.image)
        assert not np.array_equal(images[0], images[2])  # draft and final are other pictures
        # same spec, same bytes: rendering the default spec again after other qualities gives the same image
        again = session.render({**spec, "render": {**spec["render"], "quality": "default"}})
        assert np.array_equal(again.image, images[1])


@pytest.mark.blender
def test_benchmark_candidates_start_from_factory_values():
    """Every attribute a quality-benchmark candidate changes is set by every setting (a preset value or Blender's
    factory value), so one candidate's change cannot carry into the next setting rendered in the session."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import comco_render_quality as bench
    finally:
        sys.path.pop(0)
    from bindscope.generators.comco.generator import ComcoGenerator

    preset_keys = set(quality.PRESETS[quality.LEGACY])
    assert all(set(quality.PRESETS[name]) == preset_keys for name in quality.QUALITIES)
    assert not preset_keys & set(bench.UNSET)
    for name, change in bench.CANDIDATES.items():
        assert set(change) <= preset_keys | set(bench.UNSET) | {"samples"}, name
    assert bench.settings_of("s8-guide")["use_guiding"] is True and bench.settings_of("default")["use_guiding"] is False
    cfg = resolve_config("comco_config", DEFAULT_CONFIG, {"set": "simco18", "resolution": RES, "n": 1})
    cycles = ComcoGenerator(cfg, seed=0, threads=2, device="cpu")._session().scene.cycles
    for key, value in bench.UNSET.items():  # presets never set these: the session keeps the factory values
        assert getattr(cycles, key) == pytest.approx(value), key
