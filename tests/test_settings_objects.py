"""The settings objects that carry a group of parameters from a command to its library call: each command's options
of a group are generated from the dataclass's fields (one decorator per group), give the library's defaults when
no option is given, and a library call takes the object or its fields as keywords, refusing other keywords by
name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import click
import pytest
from click.testing import CliRunner

from bindscope.alignment.protocols import LabclipOptions, ProbeSettings
from bindscope.build.backends import BuildSettings
from bindscope.cli.main import Group, bindscope, comco, madman
from bindscope.cli.options import settings_options, task_options
from bindscope.errors import BadInput, with_changes
from bindscope.evaluation import AuditSettings, PairSettings
from bindscope.evaluation.sampled import SampledCaptions
from bindscope.evaluation.tasks import Task, register_task, unregister_task
from bindscope.generators.comco.overrides import ComcoOverrides
from bindscope.generators.madman.overrides import MadmanOverrides
from bindscope.generators.t2i.api import DiffusionSettings
from bindscope.generators.t2i.prompts import PromptSettings
from bindscope.importers.settings import ImportSettings

# (settings class, the keyword the command receives, the command that offers the options, the object made from no
# option: the library's defaults)
GROUPS = [
    (BuildSettings, "build", (madman, "generate"), BuildSettings()),
    (MadmanOverrides, "overrides", (madman, "generate"), MadmanOverrides()),
    (ComcoOverrides, "overrides", (comco, "render"), ComcoOverrides()),
    (AuditSettings, "settings", (madman, "audit"), AuditSettings()),
    (LabclipOptions, "options", (bindscope, "labclip", "fit"), LabclipOptions()),
    (ImportSettings, "settings", (bindscope, "import", "pug"), ImportSettings()),
    (SampledCaptions, "sampling", (comco, "eval"), SampledCaptions()),
    (PairSettings, "pairs", (bindscope, "caption-bias"), PairSettings()),
    (PromptSettings, "prompts", (comco, "t2i"), PromptSettings()),
    (DiffusionSettings, "diffusion", (comco, "t2i"), DiffusionSettings()),
]


def _command(group, *path):
    for name in path:
        group = group.commands[name]
    return group


def _flags(command) -> set[str]:
    return {flag for p in command.params if isinstance(p, click.Option) for flag in p.opts + p.secondary_opts}


@pytest.mark.parametrize("cls, keyword, where, default", GROUPS, ids=[g[0].__name__ for g in GROUPS])
def test_the_command_offers_every_field_and_no_option_gives_the_defaults(cls, keyword, where, default):
    flagged = [f for f in dataclasses.fields(cls) if "flag" in f.metadata]
    declared = {d for f in flagged for d in ((f.metadata["flag"],) if isinstance(f.metadata["flag"], str)
                                             else f.metadata["flag"]) for d in d.split("/")}
    assert declared <= _flags(_command(*where))

    @click.command()
    @settings_options(cls, keyword)
    def show(**kwargs):
        click.echo(repr(kwargs[keyword]))

    result = CliRunner().invoke(show, [])
    assert result.exit_code == 0, result.output
    assert result.output == repr(default) + "\n"


def test_the_probe_options_give_the_protocols_settings_and_list_what_replaces_them():
    @click.command()
    @settings_options(ProbeSettings, "settings", ProbeSettings.of,
                      only=("protocol", "fractions", "min_objects", "steps", "lr", "weight_decay", "seed"))
    def show(settings):
        click.echo(f"{settings.protocol} {settings.steps} {settings.lr} {settings.fractions} {settings.overrides}")

    assert CliRunner().invoke(show, []).output == "bindscope 300 0.01 (0.6, 0.2, 0.2) ()\n"
    shown = CliRunner().invoke(show, ["--protocol", "authors", "--steps", "7", "--fractions", "0.5,0.25,0.25"])
    assert shown.output == "authors 7 0.1 (0.5, 0.25, 0.25) ('fractions', 'steps')\n"
    assert ProbeSettings.of() == ProbeSettings()
    bad = CliRunner().invoke(Group(commands={"show": show}), ["show", "--fractions", "a,b"])
    assert (bad.exit_code, bad.output) == (2, "Error: --fractions 'a,b': give three numbers train,val,test such as "
                                              "0.6,0.2,0.2\n")
    with pytest.raises(BadInput, match=r"^split fractions \(0\.5, 0\.5, 0\.5\): need three non-negative numbers"):
        ProbeSettings(fractions=(0.5, 0.5, 0.5))
    with pytest.raises(BadInput, match="^protocol 'authors' and settings both given") as caught:
        ProbeSettings.given(ProbeSettings(), {"protocol": "authors"})
    assert caught.value.param == "protocol"
    assert ProbeSettings.given(ProbeSettings(), {"steps": 5}).overrides == ("steps",)
    with pytest.raises(BadInput, match="^stepz is not a field of ProbeSettings; allowed: fractions, seed, "):
        ProbeSettings.of(stepz=3)


def test_labclip_options_give_the_protocols_settings_of_each_negatives_source():
    authors = LabclipOptions(protocol="authors", epochs=3)
    stored, shuffled = authors.settings("stored"), authors.settings("shuffled")
    assert (stored.epochs, stored.batch_size, stored.lr, stored.captions) == (3, 128, 0.01, "first")
    assert (shuffled.epochs, shuffled.batch_size, shuffled.lr, shuffled.captions) == (3, 1024, 1e-3, "all")
    assert stored.overrides == shuffled.overrides == ("epochs",)
    with pytest.raises(BadInput, match="^fit_batch_size 1 is not allowed; use an integer >= 2 pairs") as caught:
        LabclipOptions(fit_batch_size=1)
    assert caught.value.param == "fit_batch_size"
    with pytest.raises(BadInput, match=r"^holdout 1: must be between 0 and 1 \(exclusive\)"):
        LabclipOptions(holdout=1)


def test_a_call_takes_the_fields_as_keywords_and_refuses_others_by_name(tmp_path):
    from bindscope.importers.pug import import_pug

    assert with_changes(AuditSettings(), {"epochs": 2}, "an audit option") == AuditSettings(epochs=2)
    with pytest.raises(BadInput, match="^imagesize is not an import setting; allowed: image_size, limit, seed, "
                                       "shard_size, jobs$") as caught:
        import_pug(tmp_path / "out", parquet=tmp_path / "x.parquet", imagesize=32)
    assert caught.value.param == "imagesize"
    with pytest.raises(BadInput, match=r"^image_size 16 is not allowed; use 32\.\.2048 pixels$"):
        import_pug(tmp_path / "out", parquet=tmp_path / "x.parquet", image_size=16)
    with pytest.raises(BadInput, match=r"^jobs 0 is not allowed; use an integer in 1\.\.256 worker processes$"):
        ImportSettings(jobs=0)
    assert not (tmp_path / "out").exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ImportSettings().jobs = 2


def test_the_t2i_call_routes_each_keyword_to_its_settings_and_refuses_others(tmp_path):
    from bindscope.generators.t2i.api import t2i

    with pytest.raises(BadInput, match=r"^stepz is not a setting of comco t2i; allowed: names, objects, n, order, "
                                       r"template, articles, images_per_prompt, steps, guidance, resolution, "
                                       r"precision$"):
        t2i(tmp_path / "out", "nowhere", n=3, steps=1, stepz=2)
    with pytest.raises(BadInput, match=r"^objects 1-3 is not allowed; prompts name 2\.\.5 objects"):
        PromptSettings(objects="1-3")
    assert PromptSettings(objects="2-3", template=None).counts() == (2, 3)
    assert DiffusionSettings(guidance=0).guidance == 0.0 and isinstance(DiffusionSettings(guidance=0).guidance, float)
    assert not (tmp_path / "out").exists()


def test_pair_settings_given_with_a_dataset_are_refused_by_name(tmp_path):
    assert PairSettings().given() == [] and PairSettings(device="cpu").given() == []
    assert PairSettings(names="comco72", limit=3).given() == ["limit", "names"]
    with pytest.raises(BadInput, match=r"^threshold 2 is not allowed; use a number in 0\.\.1"):
        PairSettings(threshold=2)


def test_the_generator_overrides_give_the_config_keys_of_their_flags():
    made = MadmanOverrides(attribute_density=2.0, saliency="size", num_images=7, image_size=64,
                           holdout=["7:colour=red"], holdout_fraction=0.1)
    assert made.holdout == ("7:colour=red",)
    assert made.config() == {"attribute_density": 2.0, "saliency": "size", "image_size": 64,
                             "splits": {"train": 7, "test": 7, "ood": 7},
                             "ood": {"holdout": ["7:colour=red"], "holdout_fraction": 0.1}}
    assert MadmanOverrides().config() == {} and ComcoOverrides().config() == {}
    assert ComcoOverrides(n=3, references=False, set="simco18").config() == {"n": 3, "set": "simco18",
                                                                             "references": False}


@dataclass(frozen=True)
class _MarginOptions:
    object_order: str = "mention"
    margin: float = field(default=0.0, metadata={"flag": "--toy-margin", "range": (0.0, 2.0), "help": "toy"})


_TOY = Task(name="toy-margin", kind="comco-eval", summary="toy", compute=lambda run, options: None,
            options=_MarginOptions)


def test_task_options_are_one_option_per_field_given_to_every_task_that_has_it():
    register_task(_TOY)
    try:
        @click.command()
        @task_options("comco-eval")
        def show(options):
            click.echo(repr(options))

        assert "--toy-margin" in _flags(show) and "--object-order" in _flags(show)
        assert CliRunner().invoke(show, []).output == "{}\n"
        shown = CliRunner().invoke(show, ["--object-order", "size", "--toy-margin", "0.5", "--protocol", "both"])
        assert shown.output == repr({"tor": {"protocol": "both"}, "ior": {"protocol": "both", "object_order": "size"},
                                     "matching": {"object_order": "size"}, "ioc": {"object_order": "size"},
                                     "toy-margin": {"object_order": "size", "margin": 0.5}}) + "\n"
    finally:
        unregister_task(_TOY)
