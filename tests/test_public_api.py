"""The public Python API (``import bindscope``): the calls behind the commands write the same bytes as the
commands, return Python objects, and raise typed exceptions before writing anything."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from madman_support import write_fake_mnist_root

import bindscope
from bindscope.build.backends import BuildSettings
from bindscope.cli.main import comco, madman
from bindscope.errors import BadInput


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(group, *args):
    result = CliRunner().invoke(group, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def test_madman_generate_writes_the_bytes_of_the_command(tmp_path):
    root = write_fake_mnist_root(tmp_path / "mnist", train_per_class=12, test_per_class=4)
    _cli(madman, "generate", "--out", tmp_path / "cli", "--mnist-root", root, "-n", "12", "--seed", "3",
         "--attribute-density", "2", "--holdout", "7:colour=red", "--quiet")
    result = bindscope.madman.generate(tmp_path / "api", mnist_root=root, seed=3, attribute_density=2.0,
                                       splits={"train": 12, "test": 12, "ood": 12},
                                       ood={"holdout": ["7:colour=red"]}, progress=False)
    assert _files(tmp_path / "api") == _files(tmp_path / "cli")
    assert result.path == tmp_path / "api" and result.part_record is None and not result.already_complete
    assert result.manifest == json.loads((tmp_path / "cli" / "manifest.json").read_text())
    assert list(result.manifest["splits"]) == ["train", "test", "ood"]
    again = bindscope.madman.generate(tmp_path / "api", mnist_root=root, seed=3, attribute_density=2.0,
                                      splits={"train": 12, "test": 12, "ood": 12},
                                      ood={"holdout": ["7:colour=red"]}, progress=False)
    assert again.already_complete and again.manifest == result.manifest


def test_madman_generate_raises_bad_input_before_writing(tmp_path):
    with pytest.raises(BadInput, match="config: attribute_density: 9 is greater than the maximum of 6"):
        bindscope.madman.generate(tmp_path / "d", attribute_density=9)
    with pytest.raises(BadInput, match=r"^seed -1 is not allowed; use an integer in 0\.\.4294967295"):
        bindscope.madman.generate(tmp_path / "d", seed=-1)
    assert not (tmp_path / "d").exists()


def test_comco_render_writes_the_bytes_of_the_command(tmp_path):
    tiny = {"visibility": {"min_pixels": 6}, "shard_size": 2, "denoise": False}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    _cli(comco, "render", "--out", tmp_path / "cli", "--set", "simco18", "--objects", "2-3", "-n", "3",
         "--resolution", "32", "--samples", "1", "--seed", "2", "--device", "cpu", "--threads", "1",
         "--no-references", "--quiet", "--config", tmp_path / "tiny.yaml")
    result = bindscope.comco.render(tmp_path / "api", tiny, set="simco18", objects="2-3", n=3, resolution=32,
                                    samples=1, seed=2, device="cpu", threads=1, references=False, progress=False)
    assert _files(tmp_path / "api") == _files(tmp_path / "cli")
    assert result.manifest["splits"]["scenes"]["num_samples"] == 3 and list(result.manifest["splits"]) == ["scenes"]
    with pytest.raises(BadInput, match="size_mode"):
        bindscope.comco.render(tmp_path / "bad", size_mode="huge")
    assert not (tmp_path / "bad").exists()


def test_the_package_exposes_the_documented_calls():
    from bindscope.generators.comco.api import render
    from bindscope.generators.madman.api import generate

    assert bindscope.madman.generate is generate and bindscope.comco.render is render
    assert set(bindscope.__all__) >= {"madman", "comco", "evaluate", "train", "probe", "labclip", "Dataset",
                                      "BadInput", "DatasetError", "GenerationError"}
    for name in bindscope.__all__:
        assert getattr(bindscope, name) is not None
    with pytest.raises(AttributeError):
        getattr(bindscope, "no_such_call")


def test_library_messages_name_parameters_and_the_command_line_shows_flags(tmp_path):
    root = write_fake_mnist_root(tmp_path / "mnist", train_per_class=12, test_per_class=4)
    small = {"train": 4, "test": 4, "ood": 4}
    bindscope.madman.generate(tmp_path / "d", mnist_root=root, seed=1, splits=small, progress=False)
    with pytest.raises(BadInput, match="^out .* another config or seed; pass overwrite=True to replace it") as caught:
        bindscope.madman.generate(tmp_path / "d", mnist_root=root, seed=2, splits=small, progress=False)
    assert caught.value.param == "out"
    result = CliRunner().invoke(madman, ["generate", "--out", str(tmp_path / "d"), "--mnist-root", str(root),
                                         "-n", "4", "--seed", "2", "--quiet"])
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: --out {str((tmp_path / 'd').resolve())!r} is not empty")
    assert "pass --overwrite to replace it" in result.output and "overwrite=True" not in result.output
    with pytest.raises(BadInput, match="^part 2 is out of range: with 2 parts"):
        bindscope.madman.generate(tmp_path / "p", mnist_root=root, splits=small,
                                  build=BuildSettings(num_parts=2, part=2))
    with pytest.warns(DeprecationWarning, match=r"^num_parts, part: pass build=BuildSettings\(\.\.\.\) instead"), \
            pytest.raises(BadInput, match="^part 2 is out of range: with 2 parts"):
        bindscope.madman.generate(tmp_path / "p", mnist_root=root, splits=small, num_parts=2, part=2)
    with pytest.raises(BadInput, match="^num_parts and build both given") as caught:
        bindscope.madman.generate(tmp_path / "p", splits=small, num_parts=2, build=BuildSettings())
    assert caught.value.param == "build" and not (tmp_path / "p").exists()
