"""open_clip model configs are data: every key is known, none can load code or reach outside the config.

open_clip builds a model from a config dict (a model config file given as ``--model cfg.json``, or the
``model_cfg`` of an ``hf-hub:`` repository's ``open_clip_config.json``). Some of its keys make open_clip load more
than the architecture: ``text_cfg.tokenizer_kwargs`` is handed to ``transformers.AutoTokenizer.from_pretrained``
(where ``trust_remote_code: true`` runs Python code shipped with a tokenizer), ``text_cfg.hf_tokenizer_name`` and
``text_cfg.hf_model_name`` name a tokenizer or text model to read from a folder or the Hub, and
``vision_cfg.timm_model_pretrained`` downloads weights. :func:`check_open_clip_config` refuses, before open_clip
sees the config:

- a key that is not a field of open_clip's ``CLIP`` / ``CLIPVisionCfg`` / ``CLIPTextCfg`` / CoCa's
  ``MultimodalCfg`` (open_clip 3.3; the lists below; every config open_clip ships passes), so a key a later open_clip version might act on is never passed through unseen;
- ``tokenizer_kwargs`` keys other than the tokenizer's own cleaning options (:data:`TOKENIZER_KWARGS`);
  ``trust_remote_code`` in particular;
- for a config file on disk: ``hf_tokenizer_name`` / ``hf_model_name`` (a tokenizer or text tower read from
  elsewhere) and ``timm_model_pretrained: true`` (weights fetched from elsewhere): a local config is read from
  its own folder alone. A Hub repository's config may name Hub tokenizers and text towers (open_clip's published
  SigLIP and XLM-R configs do); they load with ``trust_remote_code`` unset and no prompt
  (:func:`bindscope.io.model_folder.no_prompts`), so custom code is refused there too.
"""

from __future__ import annotations

from bindscope.errors import BadInput

TOP_KEYS = frozenset({"embed_dim", "vision_cfg", "text_cfg", "quick_gelu", "cast_dtype", "custom_text",
                      "init_logit_scale", "init_logit_bias", "nonscalar_logit_scale", "multimodal_cfg"})
VISION_KEYS = frozenset({
    "layers", "width", "head_width", "mlp_ratio", "patch_size", "image_size", "ls_init_value", "patch_dropout",
    "attentional_pool", "attn_pooler_queries", "attn_pooler_heads", "no_ln_pre", "pos_embed_type",
    "final_ln_after_pool", "pool_type", "output_tokens", "act_kwargs", "norm_kwargs", "block_type", "qk_norm",
    "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn", "scale_fc", "timm_model_name",
    "timm_model_pretrained", "timm_pool", "timm_proj", "timm_proj_bias", "timm_drop", "timm_drop_path"})
TEXT_KEYS = frozenset({
    "context_length", "vocab_size", "hf_tokenizer_name", "tokenizer_mode", "tokenizer_kwargs", "width", "heads",
    "layers", "mlp_ratio", "ls_init_value", "embed_cls", "pad_id", "eos_id", "no_causal_mask", "final_ln_after_pool",
    "pool_type", "proj_bias", "proj_type", "output_tokens", "act_kwargs", "norm_kwargs", "block_type", "qk_norm",
    "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn", "scale_fc", "hf_model_name",
    "hf_model_pretrained", "hf_proj_type", "hf_pooler_type"})
MULTIMODAL_KEYS = TEXT_KEYS | {"dim_head", "n_queries", "attn_pooler_heads"}  # CoCa's text decoder
TOKENIZER_KWARGS = frozenset({"clean", "strip_sep_token", "language"})
KWARGS_KEYS = frozenset({"eps", "elementwise_affine", "approximate", "inplace"})  # act_kwargs / norm_kwargs
BLOCKS = (("vision_cfg", VISION_KEYS), ("text_cfg", TEXT_KEYS), ("multimodal_cfg", MULTIMODAL_KEYS))
ELSEWHERE_KEYS = {"vision_cfg": ("timm_model_pretrained",), "text_cfg": ("hf_tokenizer_name", "hf_model_name"),
                  "multimodal_cfg": ("hf_tokenizer_name", "hf_model_name")}


def _refuse(source: str, key: str, why: str) -> BadInput:
    return BadInput(f"model {source!r}: the open_clip config key {key!r} is not allowed ({why}); bindscope builds "
                    "open_clip models from architecture keys only and never runs code a config names", param="model")


def _check_keys(block: dict, allowed: frozenset, source: str, prefix: str) -> None:
    for key in block:
        if key not in allowed:
            raise _refuse(source, f"{prefix}{key}", "not an open_clip architecture key")


def check_open_clip_config(config: dict, source: str, *, local: bool) -> None:
    """Refuse an open_clip model config that names code, a tokenizer or weights from elsewhere, or unknown keys.

    Args:
        config: the model config dict (``embed_dim``, ``vision_cfg``, ``text_cfg``, ...; for a Hub repository its
            ``model_cfg``).
        source: the ``--model`` value, for messages.
        local: True for a config file on disk (then it must not name a tokenizer, text tower or weights to read
            from anywhere else).

    Raises:
        BadInput: naming the first key (dotted, e.g. ``text_cfg.tokenizer_kwargs.trust_remote_code``) that is not
            allowed, and why.
    """
    if not isinstance(config, dict):
        raise BadInput(f"model {source!r}: the open_clip config is not a JSON object", param="model")
    _check_keys(config, TOP_KEYS, source, "")
    for name, allowed in BLOCKS:
        block = config.get(name, {})
        if not isinstance(block, dict):
            raise _refuse(source, name, "not a JSON object")
        _check_keys(block, allowed, source, f"{name}.")
        for sub, keys in (("act_kwargs", KWARGS_KEYS), ("norm_kwargs", KWARGS_KEYS),
                          ("tokenizer_kwargs", TOKENIZER_KWARGS)):
            value = block.get(sub)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise _refuse(source, f"{name}.{sub}", "not a JSON object")
            for key in value:
                if key not in keys:
                    raise _refuse(source, f"{name}.{sub}.{key}", f"allowed: {', '.join(sorted(keys))}")
        if local:
            for key in ELSEWHERE_KEYS[name]:
                if block.get(key):
                    raise _refuse(source, f"{name}.{key}", "a config file may not load a tokenizer, text tower or "
                                  "weights from outside its own folder")


def check_hub_open_clip_config(repo: str, source: str) -> None:
    """Read an ``hf-hub:`` repository's ``open_clip_config.json`` (downloaded into the Hugging Face cache, or read
    from it offline) and check its ``model_cfg`` with :func:`check_open_clip_config` before open_clip reads it.

    Raises:
        BadInput: the file cannot be fetched or parsed, or a key is not allowed.
    """
    import json

    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo, "open_clip_config.json")
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInput(f"model {source!r}: could not read open_clip_config.json of {repo!r}: {reason} (weights and "
                       "configs are downloaded on first use)", param="model") from None
    if not isinstance(config, dict):
        raise BadInput(f"model {source!r}: open_clip_config.json of {repo!r} is not a JSON object", param="model")
    check_open_clip_config(config.get("model_cfg", config), source, local=False)
