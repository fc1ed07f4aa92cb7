"""A task defined outside the package (here, in this one file) is an evaluation task like bindscope's own: it is
listed by ``comco eval --tasks``, runs through the command and through ``bindscope.evaluate`` with the same bytes,
its result block is validated against its schema, and ``bindscope collect`` lays out its column with its
definition; an installed package adds it through the ``bindscope.tasks`` entry-point group."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import SpecGenerator, build, hash_encoder, image, obj

import bindscope
from bindscope.build.registry import register_generator
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.cli.main import comco
from bindscope.encoders import registry as encoders
from bindscope.errors import BadInput
from bindscope.evaluation.report import format_result
from bindscope.evaluation.tasks import Task, register_task, registry, tasks, unregister_task
from bindscope.evaluation.tasks.schema import validate_result
from bindscope.format.records import Sample


# ------------------------------------------------------------------------------------- the task, all of it
@dataclass(frozen=True)
class FirstNameOptions:
    margin: float = 0.0

    def check(self) -> FirstNameOptions:
        if not 0 <= self.margin < 2:
            raise BadInput(f"margin {self.margin!r} is not allowed; use a number in [0, 2)", param="margin")
        return self


def first_name(run, options: FirstNameOptions) -> None:
    """Share of captions of two or more objects nearer the name of their first-mentioned object than the last's."""
    index = {name: j for j, name in enumerate(run.vocab)}
    pairs = [(q, float(run.cap_emb[q] @ run.name_emb[index[m[0]]]), float(run.cap_emb[q] @ run.name_emb[index[m[-1]]]))
             for q, m in enumerate(run.mentions) if len(m) >= 2]
    wins = [first > last + options.margin for _, first, last in pairs]
    run.metrics["first_name"] = {"captions": len(pairs), "share": sum(wins) / len(pairs) if pairs else None}
    if run.rows is not None:
        run.rows.extend({"task": "first-name", "sample": run.caption_ids[q], "first": a, "last": b, "wins": w}
                        for (q, a, b), w in zip(pairs, wins))


TOY = Task(
    name="first-name", kind="comco-eval", summary="toy: is a caption nearer its first-mentioned name than its last?",
    compute=first_name, needs=frozenset({"mentions"}), reads=frozenset({"captions"}), options=FirstNameOptions,
    schema={"first_name": {"type": "object", "required": ["captions", "share"], "additionalProperties": False,
                           "properties": {"captions": {"type": "integer", "minimum": 0},
                                          "share": {"type": ["number", "null"], "minimum": 0, "maximum": 1}}}},
    settings=lambda run, options: {"first_name_margin": options.margin},
    report=lambda r: [f"first-name: {r['metrics']['first_name']['share']:.3f} of "
                      f"{r['metrics']['first_name']['captions']} captions"] if "first_name" in r["metrics"] else [],
    columns=lambda r, c: c.add("first-name/share", r["metrics"]["first_name"]["share"],
                               definition="captions nearer their first-mentioned name than their last (share)")
    if "first_name" in r["metrics"] else None)


# ------------------------------------------------------------------------------------- the tests
@pytest.fixture
def toy_task():
    register_task(TOY)
    yield TOY
    unregister_task(TOY)


register_generator(SpecGenerator, "toy-scenes")  # datasets of given samples, under a name bindscope does not know


@pytest.fixture
def scenes(tmp_path):
    samples = [Sample(i, image(10 + i), np.zeros((8, 8), np.uint8), " and ".join(names),
                      [obj(k, name, size_rank=k, mention=k) for k, name in enumerate(names, start=1)], [], {})
               for i, names in enumerate([("cat", "dog"), ("dog", "car", "cat"), ("car", "cat")])]
    return build(tmp_path, "scenes", SpecGenerator({"scenes": samples}, name="toy-scenes", attribute_names=[]))


@pytest.fixture
def hash_model():
    kind = encoders.register_encoder(encoders.EncoderKind("hash:", lambda m: m.startswith("hash:"),
                                                          lambda m, p, **o: hash_encoder()))
    yield "hash:16"
    encoders._REGISTERED.remove(kind)


def test_the_toy_task_is_listed_by_tasks(toy_task):
    assert toy_task in tasks("comco-eval") and toy_task not in tasks("madman-eval")
    shown = " ".join(CliRunner().invoke(comco, ["eval", "--help"]).output.split())
    assert "first-name: toy: is a caption nearer its first-mentioned name than its last?" in shown
    listed = CliRunner().invoke(comco, ["eval", "--tasks", "help"])
    assert listed.exit_code == 0 and "first-name: toy: is a caption nearer its first-mentioned name" in listed.output
    assert "tor (default): text-based object retrieval" in listed.output


def test_command_and_library_write_the_same_bytes_and_collect_defines_the_column(toy_task, scenes, hash_model,
                                                                                  tmp_path):
    cli_out, lib_out = tmp_path / "cli.json", tmp_path / "lib.json"
    shown = CliRunner().invoke(comco, ["eval", scenes, "--tasks", "first-name,tor", "--model", hash_model, "--no-cache",
                                       "--quiet", "--out", str(cli_out)])
    assert shown.exit_code == 0, shown.output
    run = bindscope.evaluate(scenes, bindscope.EncoderSettings(hash_model, use_cache=False), tasks="first-name,tor",
                             out=lib_out, progress=False)
    assert cli_out.read_bytes() == lib_out.read_bytes()
    assert (tmp_path / "cli.samples.jsonl").read_bytes() == (tmp_path / "lib.samples.jsonl").read_bytes()
    assert shown.output.startswith(format_result(run.result) + "\n\nwrote ")  # what the command prints
    result = run.result
    assert result["metrics"]["first_name"]["captions"] == 3 and result["settings"]["first_name_margin"] == 0.0
    assert "first-name: " in shown.output and "TOR  (top-1" in shown.output
    assert [r for r in run_rows(tmp_path / "lib.samples.jsonl") if r["task"] == "first-name"][0]["sample"] == 0
    validate_result(result, "result")
    broken = json.loads(lib_out.read_text())
    broken["metrics"]["first_name"]["share"] = 2
    with pytest.raises(BadInput, match="first_name.share: 2 is greater than the maximum of 1"):
        validate_result(broken, "result")
    table = CliRunner().invoke(bindscope_cli, ["collect", str(lib_out), "--out", str(tmp_path / "t.md")])
    assert table.exit_code == 0, table.output
    assert "- `first-name/share`: captions nearer their first-mentioned name than their last (share)" in \
        (tmp_path / "t.md").read_text()


def run_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_toy_task_options_are_checked_before_a_model_loads(toy_task, scenes):
    with pytest.raises(BadInput, match=r"margin 5 is not allowed; use a number in \[0, 2\)") as caught:
        bindscope.evaluate(scenes, "nowhere:model", tasks="first-name", options={"first-name": {"margin": 5}})
    assert caught.value.param == "margin"
    with pytest.raises(BadInput, match="task first-name needs mentions"):
        bindscope.evaluate(build_without_mentions(scenes), "nowhere:model", tasks="first-name")


def build_without_mentions(scenes):
    from pathlib import Path

    samples = [Sample(0, image(1), np.zeros((8, 8), np.uint8), "a picture", [obj(1, "cat")], [], {})]
    return build(Path(scenes).parent, "bare", SpecGenerator({"scenes": samples}, name="toy-scenes", attribute_names=[]))


def test_an_installed_package_adds_the_task_through_its_entry_point(monkeypatch):
    point = EntryPoint(name="first-name", value="test_task_plugin:TOY", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point] if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_REGISTERED", {})
    monkeypatch.setattr(registry, "_LOADED", False)
    names = [t.name for t in tasks("comco-eval")]
    assert names[-1] == "first-name" and names[0] == "tor"
