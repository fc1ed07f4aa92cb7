"""The public Python API writes the bytes of the commands for the workflows that run a model: ``comco eval``
(sampled captions and a dataset), ``madman train``, ``bindscope probe`` and ``bindscope labclip fit|eval``.
Tiny data (a 144-image MADMAN dataset, the COCO fixture) and a 3-step CLIP trained here; nothing downloaded.

Each command runs first and its output is moved aside; the call then writes to the same path (results record
their own paths), and the files are compared byte for byte. Only ``madman train``'s wall-clock fields differ
between two runs: ``elapsed_s``, ``cpu_s``, ``images_per_s`` and ``step_s`` of ``log.jsonl`` (removed before
comparing)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from coco_fixture import write_coco

import bindscope
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.cli.main import comco, madman

TRAIN = {"embed_dim": 32, "image_size": 32, "vision_width": 64, "vision_layers": 1, "text_width": 64,
         "text_layers": 1, "batch_size": 16, "steps": 3, "warmup_steps": 1, "device": "cpu", "seed": 1}
TRAIN_FLAGS = ["--embed-dim", "32", "--image-size", "32", "--vision-width", "64", "--vision-layers", "1",
               "--text-width", "64", "--text-layers", "1", "--batch-size", "16", "--steps", "3", "--warmup", "1",
               "--device", "cpu", "--seed", "1", "--quiet"]
WALL_CLOCK = ("elapsed_s", "cpu_s", "images_per_s", "step_s")  # log.jsonl fields that time the run


def _cli(group, *args):
    result = CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _files(root) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _then_api(folder, command, call):
    """Run ``command()`` (writing into ``folder``), move ``folder`` aside, run ``call()`` (writing into
    ``folder`` again); return ``(command's files, call's files, call's return value)``."""
    command()
    aside = folder.with_name(folder.name + "-cli")
    shutil.move(folder, aside)
    folder.mkdir()
    value = call()
    return _files(aside), _files(folder), value


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(root, MADMAN dataset, model file)``: a small dataset of real digits (train 48 / test 64 / ood 8) and a 3-step
    CLIP trained on it by ``madman train`` into ``root / "run"``, then moved to ``root / "run-cli"`` (where the
    model file stays); :func:`test_train_writes_the_run_folder_of_the_command` repeats the run through the API."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    root = tmp_path_factory.mktemp("runs")
    data = root / "madman"
    build_dataset(tiny_madman({"train": 48, "test": 64, "ood": 8}, shard_size=16), data, progress=False)
    _cli(madman, "train", data, "--out", root / "run", *TRAIN_FLAGS)
    shutil.move(root / "run", root / "run-cli")
    return root, data, root / "run-cli" / "model.pt"


def test_train_writes_the_run_folder_of_the_command(trained):
    root, data, _ = trained
    run = root / "run"
    summary = bindscope.train(data, run, progress=False, **TRAIN)
    cli, api = _files(root / "run-cli"), _files(run)
    assert sorted(cli) == sorted(api) and {"model.pt", "log.jsonl", "result.json", "run.json"} <= set(api)
    timed = {name for name in cli if cli[name] != api[name]}
    assert timed == {"log.jsonl"}, timed  # everything else, weights included, is byte-identical

    def untimed(text: bytes) -> list[dict]:
        rows = [json.loads(line) for line in text.decode().splitlines()]
        return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in rows]

    assert untimed(cli["log.jsonl"]) == untimed(api["log.jsonl"])
    assert any(set(WALL_CLOCK) <= set(json.loads(line)) for line in api["log.jsonl"].decode().splitlines())
    assert summary["steps"] == 3 and summary["files"]["model.pt"] == str(run / "model.pt")
    assert summary["result"] == json.loads(api["result.json"])


def test_comco_eval_writes_the_bytes_of_the_command(trained, tmp_path):
    _, _, model = trained
    sampled = tmp_path / "sampled" / "result.json"
    sampled.parent.mkdir()
    cli, api, run = _then_api(
        sampled.parent, lambda: _cli(comco, "eval", "--model", model, "-n", "40", "--objects", "3", "--vocab",
                                     "simco18", "--seed", "2", "--device", "cpu", "--no-cache", "--quiet", "--out",
                                     sampled),
        lambda: bindscope.evaluate(bindscope.SampledCaptions(n=40, objects=3, vocab="simco18"),
                                   bindscope.EncoderSettings(model, device="cpu", use_cache=False), seed=2,
                                   progress=False, out=sampled))
    assert cli == api and set(cli) == {"result.json", "result.samples.jsonl"}
    assert run.result == json.loads(api["result.json"])
    assert run.result["metrics"]["tor"]["by_num_objects"]["3"]["num_queries"] == 40

    from bindscope.importers.coco import import_coco

    coco = tmp_path / "coco"
    import_coco(*write_coco(tmp_path / "src"), coco, image_size=40, progress=False)
    out = tmp_path / "coco-eval" / "result.json"
    out.parent.mkdir()
    cli, api, run = _then_api(
        out.parent, lambda: _cli(comco, "eval", coco, "--model", model, "--device", "cpu", "--no-cache", "--quiet",
                          "--out", out),
        lambda: bindscope.evaluate(coco, bindscope.EncoderSettings(model, device="cpu", use_cache=False),
                                   progress=False, out=out))
    assert cli == api and set(cli) == {"result.json", "result.samples.jsonl"}
    assert set(run.result["metrics"]) >= {"tor", "i2tor", "matching"}

    # the analyses of results and captions: bindscope collect and bindscope caption-bias
    table = tmp_path / "table" / "t.csv"
    table.parent.mkdir()
    results = [sampled, out]
    cli, api, made = _then_api(
        table.parent,
        lambda: _cli(bindscope_cli, "collect", *results, "--out", table, "--plot", table.parent / "t.png"),
        lambda: bindscope.collect(results, table, plot=table.parent / "t.png"))
    assert cli == api and set(cli) == {"t.csv", "t.png"} and len(made["rows"]) == 2
    bias = tmp_path / "bias" / "b.json"
    bias.parent.mkdir()
    cli, api, run = _then_api(bias.parent, lambda: _cli(bindscope_cli, "caption-bias", coco, "--out", bias, "--plot",
                                                                   bias.with_suffix(".png")),
                              lambda: bindscope.caption_bias(coco, out=bias, plot=bias.with_suffix(".png")))
    assert cli == api and set(cli) == {"b.json", "b.png"} and run.path == bias and run.plot == bias.with_suffix(".png")


def test_probe_and_labclip_write_the_bytes_of_the_commands(trained, tmp_path):
    _, data, model = trained
    model = str(model)
    common = ["--model", model, "--device", "cpu", "--no-cache"]
    encoder = bindscope.EncoderSettings(model, device="cpu", use_cache=False)
    out = tmp_path / "probe" / "result.json"
    out.parent.mkdir()
    cli, api, run = _then_api(
        out.parent, lambda: _cli(bindscope_cli, "probe", data, *common, "--steps", "20", "--out", out, "--quiet"),
        lambda: bindscope.probe(data, encoder, steps=20, out=out, progress=False))
    assert cli == api and "result.json" in cli
    assert run.result == json.loads(api["result.json"]) and run.result["metrics"]["modalities"]

    fit = tmp_path / "fit" / "labclip.pt"
    fit.parent.mkdir()
    cli, api, labclip = _then_api(
        fit.parent, lambda: _cli(bindscope_cli, "labclip", "fit", data, *common, "--epochs", "4", "--holdout-fraction", "0.2",
                          "--fit-batch-size", "32", "--out", fit),
        lambda: bindscope.labclip.fit(data, encoder, fit, epochs=4, holdout=0.2,
                                      fit_batch_size=32, progress=False))
    assert cli == api and set(cli) == {"labclip.pt"}
    assert len(labclip.meta["loss_history"]) == 5

    out = tmp_path / "labclip-eval" / "result.json"
    out.parent.mkdir()
    cli, api, run = _then_api(
        out.parent, lambda: _cli(bindscope_cli, "labclip", "eval", data, *common, "--labclip", fit, "--out", out),
        lambda: bindscope.labclip.eval(data, encoder, fit, out=out, progress=False))
    assert cli == api and "result.json" in cli
    assert run.result["metrics"]["before"]["binding"]["n"] > 0
