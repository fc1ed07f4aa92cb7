"""open_clip model configs and sentence-transformers module configs are data: no key they hold can enable code
or make a load read from outside the model's own folder.

The case ``model-config-remote-code`` (shared cases): a config written by ``bindscope export open-clip-config``
whose ``text_cfg`` gains ``hf_tokenizer_name`` (a folder whose tokenizer config maps to Python code) and
``tokenizer_kwargs: {"trust_remote_code": true}`` made ``madman eval --model cfg.json --pretrained none`` run that
code. It now exits 2 with one ``Error:`` line naming the key, and nothing runs.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest
from test_model_code_refusal import EVIL_CODE, _cli, _linked_copy, _one_error, _replace

from bindscope.encoders.open_clip_config import check_open_clip_config
from bindscope.errors import BadInput

TINY_OPEN_CLIP = {"embed_dim": 32, "quick_gelu": False,
                  "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "mlp_ratio": 2.0,
                                 "patch_size": 8},
                  "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2,
                               "mlp_ratio": 2.0}}


def _evil_tokenizer(folder: Path, marker: Path) -> Path:
    """A tokenizer folder whose ``tokenizer_config.json`` maps AutoTokenizer to ``tokenization_evil.py``."""
    folder.mkdir(parents=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}, "model_max_length": 32}))
    (folder / "tokenization_evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    return folder


def _with_text(**extra) -> dict:
    return {**TINY_OPEN_CLIP, "text_cfg": {**TINY_OPEN_CLIP["text_cfg"], **extra}}


def test_model_config_remote_code_case_exits_2_naming_the_key_and_runs_nothing(tmp_path):
    from eval_fakes import madman_fixture

    data, _ = madman_fixture(tmp_path)
    marker = tmp_path / "ran"
    tokenizer = _evil_tokenizer(tmp_path / "tok", marker)
    config = tmp_path / "models" / "bs-evil.json"
    config.parent.mkdir()
    config.write_text(json.dumps(_with_text(hf_tokenizer_name=str(tokenizer),
                                            tokenizer_kwargs={"trust_remote_code": True})))
    done = _cli(["eval", data, "--model", str(config), "--pretrained", "none", "--device", "cpu", "--no-cache",
                 "--quiet", "--out", str(tmp_path / "r.json")], tmp_path)
    _one_error(done, "text_cfg.tokenizer_kwargs.trust_remote_code", "is not allowed")
    assert not marker.exists() and not (tmp_path / "r.json").exists()
    # without the kwargs, the tokenizer folder alone is still outside the config's folder: refused by name
    config.write_text(json.dumps(_with_text(hf_tokenizer_name=str(tokenizer))))
    done = _cli(["eval", data, "--model", str(config), "--pretrained", "none", "--device", "cpu", "--no-cache",
                 "--quiet"], tmp_path)
    _one_error(done, "text_cfg.hf_tokenizer_name", "outside its own folder")
    assert not marker.exists()


@pytest.mark.parametrize("config, key", [
    (_with_text(tokenizer_kwargs={"cache_dir": "/elsewhere"}), "text_cfg.tokenizer_kwargs.cache_dir"),
    (_with_text(hf_model_name="bert-base-uncased"), "text_cfg.hf_model_name"),
    ({**TINY_OPEN_CLIP, "vision_cfg": {**TINY_OPEN_CLIP["vision_cfg"], "timm_model_pretrained": True}},
     "vision_cfg.timm_model_pretrained"),
    ({**TINY_OPEN_CLIP, "loader": "evil.load"}, "loader"),
    (_with_text(act_kwargs={"module": "os.system"}), "text_cfg.act_kwargs.module"),
    ({**TINY_OPEN_CLIP, "text_cfg": ["not", "a", "dict"]}, "text_cfg"),
    (_with_text(tokenizer_kwargs="trust_remote_code"), "text_cfg.tokenizer_kwargs"),
])
def test_a_key_that_reaches_code_or_elsewhere_is_refused_by_name(config, key):
    with pytest.raises(BadInput, match=rf"the open_clip config key {key!r} is not allowed"):
        check_open_clip_config(config, "cfg.json", local=True)


def test_every_config_open_clip_ships_passes_and_the_cleaning_options_are_kept():
    import open_clip

    shipped = sorted(glob.glob(os.path.join(os.path.dirname(open_clip.__file__), "model_configs", "*.json")))
    assert len(shipped) > 100
    for path in shipped:
        check_open_clip_config(json.loads(Path(path).read_text()), path, local=False)
    check_open_clip_config(_with_text(tokenizer_kwargs={"clean": "canonicalize", "strip_sep_token": True}), "c",
                           local=True)
    # a Hub repository's config may name a Hub tokenizer (open_clip's SigLIP configs do); a local file may not
    hub = _with_text(hf_tokenizer_name="timm/ViT-B-16-SigLIP")
    check_open_clip_config(hub, "hf-hub:timm/ViT-B-16-SigLIP", local=False)
    with pytest.raises(BadInput, match="text_cfg.hf_tokenizer_name"):
        check_open_clip_config(hub, "cfg.json", local=True)


def test_an_hf_hub_config_is_checked_before_open_clip_reads_it(tmp_path, monkeypatch):
    import huggingface_hub
    import open_clip

    from bindscope.encoders.registry import load_adapter

    config = tmp_path / "open_clip_config.json"
    config.write_text(json.dumps({"model_cfg": _with_text(tokenizer_kwargs={"trust_remote_code": True}),
                                  "preprocess_cfg": {}}))
    fetched = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **_: fetched.append((repo, name))
                        or str(config))
    monkeypatch.setattr(open_clip, "create_model", lambda *a, **k: pytest.fail("open_clip read the config"))
    with pytest.raises(BadInput, match=r"'text_cfg\.tokenizer_kwargs\.trust_remote_code' is not allowed"):
        load_adapter("hf-hub:someone/evil-clip", device="cpu")
    assert fetched == [("someone/evil-clip", "open_clip_config.json")]


@pytest.mark.parametrize("change, needle", [
    ({"tokenizer_name_or_path": "/elsewhere/tokenizer"}, "holds the key 'tokenizer_name_or_path'"),
    ({"tokenizer_args": {"cache_dir": "/elsewhere"}}, "holds tokenizer_args.cache_dir"),
    ({"model_kwargs": {"trust_remote_code": True}}, "holds model_kwargs.trust_remote_code"),
    ({"config_args": "x"}, "'config_args' is not a JSON object"),
])
def test_sentence_transformers_module_configs_hold_known_keys_only(tmp_path, change, needle):
    from bindscope.encoders.registry import load_adapter

    folder = _linked_copy(tmp_path / "st")
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    assert config == {"max_seq_length": 256, "do_lower_case": False}
    _replace(folder / "sentence_bert_config.json", json.dumps({**config, **change}))
    with pytest.raises(BadInput, match=needle.replace("(", r"\(").replace(".", r"\.")):
        load_adapter(str(folder), device="cpu")
    _replace(folder / "sentence_bert_config.json", json.dumps({**config, "tokenizer_args": {"model_max_length": 128}}))
    assert load_adapter(str(folder), device="cpu").embed_dim == 384
