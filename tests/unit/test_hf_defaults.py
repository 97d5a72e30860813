"""A key that config.json leaves out takes its transformers class's default (F9): the real configs of
../shared/models with one key removed count the same parameters and FLOPs, layer by layer, as with the key set to
that default. The defaults are transformers 5.25.0's (transformers/models/<type>/configuration_<type>.py, the
dataclass field defaults and __post_init__ rules), written here from that source, not from moeplan's table."""

from __future__ import annotations

import json
from typing import Any

import pytest

from moeplan.base.errors import MoeplanError
from moeplan.engine.flops import flops_per_token
from moeplan.models.hf import spec_from_dict
from moeplan.models.spec import ModelSpec
from moeplan.engine.params import count_params

from ..conftest import MODELS_DIR


def _config(name: str) -> dict[str, Any]:
    return json.loads((MODELS_DIR / f"{name}.json").read_text(encoding="utf-8"))


def _alternating(n: int) -> list[str]:
    """GptOssConfig.__post_init__: 'sliding_attention' if (i + 1) % 2 else 'full_attention'."""
    return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]


# (config, key, transformers 5.25.0 default of its class)
DEFAULTS: list[tuple[str, str, Any]] = [
    # GptOssConfig
    ("gpt-oss-120b", "layer_types", _alternating(36)),
    ("gpt-oss-120b", "num_key_value_heads", 8),
    ("gpt-oss-120b", "head_dim", 64),
    ("gpt-oss-120b", "sliding_window", 128),
    ("gpt-oss-120b", "num_experts_per_tok", 4),
    ("gpt-oss-120b", "swiglu_limit", 7.0),
    ("gpt-oss-120b", "attention_bias", True),
    ("gpt-oss-120b", "tie_word_embeddings", False),
    # Qwen3MoeConfig
    ("qwen3-30b-a3b", "num_key_value_heads", 4),
    ("qwen3-235b-a22b", "num_key_value_heads", 4),
    ("qwen3-30b-a3b", "attention_bias", False),
    ("qwen3-30b-a3b", "decoder_sparse_step", 1),
    ("qwen3-30b-a3b", "mlp_only_layers", []),
    # Qwen3NextConfig (full_attention_interval: __post_init__'s kwargs.pop("full_attention_interval", 4))
    ("qwen3-next-80b-a3b", "num_key_value_heads", 2),
    ("qwen3-next-80b-a3b", "head_dim", 256),
    ("qwen3-next-80b-a3b", "full_attention_interval", 4),
    ("qwen3-next-80b-a3b", "shared_expert_intermediate_size", 512),
    ("qwen3-next-80b-a3b", "decoder_sparse_step", 1),
    # MixtralConfig
    ("mixtral-8x7b", "num_key_value_heads", 8),
    ("mixtral-8x7b", "sliding_window", None),
    # DeepseekV3Config (num_mtp_layers: int = 1, stored as num_nextn_predict_layers through its attribute_map)
    ("deepseek-v3", "q_lora_rank", 1536),
    ("deepseek-v3", "n_group", 8),
    ("deepseek-v3", "topk_group", 4),
    ("deepseek-v3", "n_shared_experts", 1),
    ("deepseek-v3", "first_k_dense_replace", 3),
    ("deepseek-v3", "num_nextn_predict_layers", 1),
    ("deepseek-v3", "moe_layer_freq", 1),
    # DeepseekV2Config (n_group / topk_group None: no group-limited routing; no MTP field)
    ("deepseek-v2-lite", "q_lora_rank", 1536),
    ("deepseek-v2-lite", "n_group", None),
    ("deepseek-v2-lite", "topk_group", None),
    ("deepseek-v2-lite", "n_shared_experts", 2),
    ("deepseek-v2-lite", "first_k_dense_replace", 0),
    ("deepseek-v2-lite", "num_nextn_predict_layers", 0),
    # Glm4MoeConfig
    ("glm-4.5", "num_key_value_heads", 8),
    ("glm-4.5", "use_qk_norm", False),
    ("glm-4.5", "attention_bias", False),
    ("glm-4.5", "n_shared_experts", 1),
    ("glm-4.5", "first_k_dense_replace", 1),
    ("glm-4.5", "num_nextn_predict_layers", 1),  # 5.25.0: num_mtp_layers: int = 1 (attribute_map, as DeepSeek-V3)
    ("glm-4.5", "n_group", 1),
    ("glm-4.5", "topk_group", 1),
]


def _facts(spec: ModelSpec) -> tuple[Any, ...]:
    total, active = count_params(spec), count_params(spec, active=True)
    flops = flops_per_token(spec, 32768, 1)
    return (total.main_total, total.mtp, active.main_total, flops.total_flops, flops.attention_share,
            spec.layers, spec.mtp_layers, spec.tie_embeddings)


@pytest.mark.parametrize(("name", "key", "default"), DEFAULTS, ids=[f"{n}-{k}" for n, k, _ in DEFAULTS])
def test_a_left_out_key_takes_the_transformers_default(name: str, key: str, default: Any) -> None:
    given = _config(name) | {key: default}
    left_out = {k: v for k, v in given.items() if k != key}
    if name == "gpt-oss-120b" and key == "num_experts_per_tok":
        left_out.pop("experts_per_token")
    assert _facts(spec_from_dict(left_out, name, "t")) == _facts(spec_from_dict(given, name, "t"))


def test_gpt_oss_without_either_top_k_key_routes_to_four() -> None:
    """GptOssConfig num_experts_per_tok = 4; OpenAI's own experts_per_token is read where it alone is given."""
    cfg = {k: v for k, v in _config("gpt-oss-120b").items() if k not in ("num_experts_per_tok", "experts_per_token")}
    assert spec_from_dict(cfg, "x", "t").first_moe.top_k == 4
    assert spec_from_dict(cfg | {"experts_per_token": 2}, "x", "t").first_moe.top_k == 2


def test_gpt_oss_without_layer_types_is_the_released_model() -> None:
    """F9: the file without layer_types is the same model as with its alternating list (not all full attention)."""
    full = _config("gpt-oss-120b")
    assert full["layer_types"] == _alternating(full["num_hidden_layers"])  # the Hub file spells out the default
    trimmed = {k: v for k, v in full.items() if k != "layer_types"}
    assert _facts(spec_from_dict(trimmed, "x", "t")) == _facts(spec_from_dict(full, "x", "t"))


def test_null_takes_the_class_rule_for_none() -> None:
    """num_key_value_heads None -> num_attention_heads (the classes' __post_init__); q_lora_rank None -> no
    query LoRA (DeepseekV2Attention builds q_proj); layer_types None -> the class's list."""
    qwen = spec_from_dict(_config("qwen3-30b-a3b") | {"num_key_value_heads": None}, "x", "t")
    assert qwen.layers[0].mixer.num_kv_heads == qwen.layers[0].mixer.num_heads
    lite = spec_from_dict(_config("deepseek-v2-lite") | {"q_lora_rank": None}, "x", "t")
    assert lite.layers[0].mixer.q_lora_rank is None
    oss = _config("gpt-oss-120b")
    assert spec_from_dict(oss | {"layer_types": None}, "x", "t").layers == spec_from_dict(oss, "x", "t").layers


KIMI_OPTIONAL = ["q_lora_rank", "n_group", "topk_group", "n_shared_experts", "first_k_dense_replace",
                 "num_nextn_predict_layers", "moe_layer_freq", "tie_word_embeddings"]


@pytest.mark.parametrize("key", KIMI_OPTIONAL)
def test_kimi_k2_has_no_transformers_default_to_take(key: str) -> None:
    """transformers has no kimi_k2 configuration class (the Hub checkpoint ships configuration_deepseek.py): a
    key left out is refused in one line that names it, not guessed."""
    cfg = {k: v for k, v in _config("kimi-k2").items() if k != key}
    with pytest.raises(MoeplanError, match=f"key '{key}' is missing.*no transformers configuration class") as exc:
        spec_from_dict(cfg, "kimi", "t")
    assert "\n" not in str(exc.value)


def test_required_keys_are_still_refused() -> None:
    """DeepseekV2Config num_experts_per_tok defaults to None (no routing): no default to take."""
    cfg = {k: v for k, v in _config("deepseek-v2-lite").items() if k != "num_experts_per_tok"}
    with pytest.raises(MoeplanError, match="key 'num_experts_per_tok' is missing"):
        spec_from_dict(cfg, "x", "t")


# (config, the key moeplan reads, the other name its transformers 5.25.0 class takes for it: attribute_map, whose
# alias __setattr__ stores under the attribute, so to_dict writes the attribute's name)
ALIASES: list[tuple[str, str, str]] = [
    ("qwen3-30b-a3b", "num_experts", "num_local_experts"),  # Qwen3MoeConfig: a re-saved Qwen3 file says the latter
    ("mixtral-8x7b", "num_local_experts", "num_experts"),  # MixtralConfig
    ("gpt-oss-120b", "num_local_experts", "num_experts"),  # GptOssConfig
    ("deepseek-v2-lite", "n_routed_experts", "num_experts"),  # DeepseekV2Config
    ("deepseek-v3", "n_routed_experts", "num_local_experts"),  # DeepseekV3Config
    ("deepseek-v3", "num_nextn_predict_layers", "num_mtp_layers"),
    ("glm-4.5", "n_routed_experts", "num_local_experts"),  # Glm4MoeConfig
    ("glm-4.5", "num_nextn_predict_layers", "num_mtp_layers"),
]


@pytest.mark.parametrize(("name", "key", "alias"), ALIASES, ids=[f"{n}-{a}" for n, _, a in ALIASES])
def test_a_key_is_read_under_its_attribute_map_name(name: str, key: str, alias: str) -> None:
    """Review finding 16: a file that gives the key under the class's other name is the same model (Qwen3-MoE's
    num_local_experts was refused as a missing num_experts)."""
    given = _config(name)
    renamed = {(alias if k == key else k): v for k, v in given.items()}
    assert key not in renamed and alias in renamed
    assert _facts(spec_from_dict(renamed, name, "t")) == _facts(spec_from_dict(given, name, "t"))


@pytest.mark.parametrize("name", ["deepseek-v3", "glm-4.5"])
def test_num_mtp_layers_zero_is_not_the_default(name: str) -> None:
    """num_mtp_layers 0 is read (transformers: num_nextn_predict_layers 0), not replaced by the class default 1."""
    cfg = {k: v for k, v in _config(name).items() if k != "num_nextn_predict_layers"}
    assert spec_from_dict(cfg, name, "t").mtp_layers == 1
    assert spec_from_dict(cfg | {"num_mtp_layers": 0}, name, "t").mtp_layers == 0


def test_a_key_and_its_alias_that_disagree_are_refused() -> None:
    cfg = _config("glm-4.5") | {"num_nextn_predict_layers": 1, "num_mtp_layers": 0}
    with pytest.raises(MoeplanError, match="'num_nextn_predict_layers' .1. and 'num_mtp_layers' .0. name the same"
                       ) as exc:
        spec_from_dict(cfg, "x", "t")
    assert "\n" not in str(exc.value)
    same = _config("qwen3-30b-a3b")
    assert spec_from_dict(same | {"num_local_experts": same["num_experts"]}, "x", "t").num_experts == 128


def test_transformers_5_rope_parameters_are_read() -> None:
    """transformers 5 writes rope_scaling as rope_parameters (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict:
    rope_scaling or rope_parameters): gpt-oss's YaRN factor is the same under either name."""
    oss = _config("gpt-oss-120b")
    saved = {k: v for k, v in oss.items() if k != "rope_scaling"} | {"rope_parameters": oss["rope_scaling"]}
    mscale = spec_from_dict(oss, "x", "t").layers[0].mixer.rope_mscale
    assert mscale > 1.3 and spec_from_dict(saved, "x", "t").layers[0].mixer.rope_mscale == mscale


def test_a_null_sliding_window_says_null() -> None:
    """Review finding 17: gpt-oss's sliding_window present but null was reported 'is missing'. Without sliding
    layers no window is needed."""
    oss = _config("gpt-oss-120b") | {"sliding_window": None}
    with pytest.raises(MoeplanError, match="key 'sliding_window' is null: the sliding layers need a window"):
        spec_from_dict(oss, "x", "t")
    full = spec_from_dict(oss | {"layer_types": ["full_attention"] * oss["num_hidden_layers"]}, "x", "t")
    assert all(layer.mixer.sliding_window is None for layer in full.layers)


def test_a_null_required_key_says_null() -> None:
    cfg = _config("qwen3-30b-a3b") | {"moe_intermediate_size": None}
    with pytest.raises(MoeplanError, match="key 'moe_intermediate_size' is null .needed for model_type 'qwen3_moe'."):
        spec_from_dict(cfg, "x", "t")
