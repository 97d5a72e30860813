"""Readers for Hugging Face ``config.json`` files of MoE models.

Key names and their meaning follow the transformers configuration classes of each model type
(``DeepseekV3Config``, ``Qwen3MoeConfig``, ``Qwen3NextConfig``, ``MixtralConfig``, ``GptOssConfig``,
``Glm4MoeConfig``). Conventions that trip calculators (see ../shared/models/README.md):
- Mixtral and gpt-oss ``intermediate_size`` is the per-expert width;
- Qwen3-MoE ``intermediate_size`` is unused when every layer is MoE;
- DeepSeek/Kimi/GLM have ``num_hidden_layers - first_k_dense_replace`` MoE layers;
- MLA models: ``head_dim`` (if present, added by transformers 5) is *not* the attention width.

Defaults: only the keys :data:`TRANSFORMERS_DEFAULTS` lists for the model type (routing options, layer patterns,
GQA head counts, biases, MTP modules, tied embeddings) take their configuration class's default when the file leaves
them out, as transformers loads the file; a null takes the class's own rule for None where it has one (MHA for
``num_key_value_heads``, no query LoRA for ``q_lora_rank``). Every other key is required even where the class has a
default (the sizes: hidden_size, vocab_size, layers, heads, expert counts and widths, MLA ranks and head dims, the
Gated DeltaNet sizes), as a class default there is some other model's size; a missing or null one is refused, naming
it. A key may be given under either name of its class's ``attribute_map`` (:data:`ALIASES`). ``kimi_k2`` has no
transformers class (its checkpoint ships its own configuration code), so its optional keys must be given.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.base.limits import arch_problem
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, Mamba2, ModelSpec, MoE, SparseAttention

# Every size and count indexes tensors with int32 in the kernels (Transformer Engine, the fused MoE
# permute, Megatron's indexed datasets store token ids as int32 from a 65,500-entry vocabulary on:
# megatron/core/datasets/indexed_dataset.py DType.optimal_dtype); a value past it is no model.
INT32_MAX = 2**31 - 1

# The transformers 5.25.0 field defaults of the keys the readers take as optional, per model type: a key that
# config.json leaves out gets its class's default (PreTrainedConfig.from_dict builds the dataclass from the
# file's keys). Each from transformers/models/<type>/configuration_<type>.py unless said otherwise.
_DEEPSEEK_V3: dict[str, Any] = {  # DeepseekV3Config
    "q_lora_rank": 1536, "n_group": 8, "topk_group": 4, "n_shared_experts": 1, "first_k_dense_replace": 3,
    # the field num_mtp_layers: int = 1, stored as num_nextn_predict_layers (attribute_map; configuration_deepseek_v3.py
    # lines 80 and 118 in 5.25.0)
    "num_nextn_predict_layers": 1,
    # not a field: DeepseekV3DecoderLayer (modeling_deepseek_v3.py) puts MoE on every layer from
    # first_k_dense_replace on, i.e. a frequency of 1
    "moe_layer_freq": 1,
    "tie_word_embeddings": False,
}
TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v3": _DEEPSEEK_V3,
    "deepseek_v2": {  # DeepseekV2Config; n_group / topk_group None = no group-limited routing (greedy topk_method)
        "q_lora_rank": 1536, "n_group": 1, "topk_group": 1, "n_shared_experts": 2, "first_k_dense_replace": 0,
        "num_nextn_predict_layers": 0,  # no MTP field
        "moe_layer_freq": 1,  # not a field: DeepseekV2DecoderLayer makes MoE of every layer >= first_k_dense_replace
        "tie_word_embeddings": False,
    },
    "glm4_moe": {  # Glm4MoeConfig (no head_dim field: the modeling's hidden_size // num_attention_heads)
        "num_key_value_heads": 8, "use_qk_norm": False, "attention_bias": False, "n_shared_experts": 1,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
        # num_mtp_layers: int = 1 stored as num_nextn_predict_layers, as DeepseekV3Config (configuration_glm4_moe.py
        # lines 84 and 116 in 5.25.0; other releases' Glm4MoeConfig differ, hence the pin)
        "num_nextn_predict_layers": 1,
        "moe_layer_freq": 1,  # not a field: Glm4MoeDecoderLayer makes MoE of every layer >= first_k_dense_replace
        "tie_word_embeddings": False,
    },
    "glm_moe_dsa": {  # GlmMoeDsaConfig (GLM-5, GLM-5.2): DeepSeek-V3 MLA + MoE with a DSA indexer per layer
        "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 3,
        "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32,
        # __post_init__: indexer_types from index_topk_pattern, else index_topk_freq (1) / index_skip_topk_offset (2)
        "index_topk_freq": 1, "index_skip_topk_offset": 2,
        # no MTP field (GlmMoeDsaPreTrainedModel ignores model.layers.78.*): counted where the file says so
        "num_nextn_predict_layers": 0,
        "moe_layer_freq": 1,  # not a field: mlp_layer_types, else first_k_dense_replace dense layers then MoE
        "tie_word_embeddings": False,
    },
    "qwen3_moe": {  # Qwen3MoeConfig (no head_dim field: the modeling's hidden_size // num_attention_heads)
        "num_key_value_heads": 4, "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "shared_expert_intermediate_size": 0,  # not a field: Qwen3MoeSparseMoeBlock has no shared expert
        "tie_word_embeddings": False,
    },
    "qwen3_next": {  # Qwen3NextConfig; full_attention_interval is its __post_init__'s kwargs.pop(..., 4)
        "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4, "shared_expert_intermediate_size": 512,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_nextn_predict_layers": 0, "mtp_num_hidden_layers": 0,  # no MTP field (the modeling drops mtp.*)
        "tie_word_embeddings": False,
    },
    # Qwen3_5MoeTextConfig (transformers 5.x configuration_qwen3_5_moe.py, the text_config of a qwen3_5_moe file);
    # full_attention_interval is its __post_init__'s kwargs.pop(..., 4). It has no decoder_sparse_step /
    # mlp_only_layers / intermediate_size field: Qwen3_5MoeDecoderLayer puts MoE on every layer; and no MTP field
    # (the modeling drops mtp.*), so mtp_num_hidden_layers absent counts none, as for Qwen3-Next
    "qwen3_5_moe": {
        "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4, "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_nextn_predict_layers": 0, "mtp_num_hidden_layers": 0,
        "tie_word_embeddings": False,
    },
    "mixtral": {  # MixtralConfig (head_dim None: the modeling's hidden_size // num_attention_heads)
        "num_key_value_heads": 8, "sliding_window": None, "tie_word_embeddings": False,
    },
    "nemotron_h": {  # NemotronHConfig (Nemotron-H, Nemotron-3 Nano / Super / 3.5 Lightning)
        "n_group": 1, "topk_group": 1, "n_shared_experts": 1, "moe_latent_size": None, "chunk_size": 128,
        "mlp_hidden_act": "relu2", "num_nextn_predict_layers": 0,
        # mtp_layers_block_type None -> ["full_attention", "moe"] in __post_init__, i.e. the pattern "*E"
        "mtp_hybrid_override_pattern": "*E",
        "tie_word_embeddings": False,
    },
    "gpt_oss": {  # GptOssConfig; layer_types None -> alternating sliding / full in __post_init__ (_layer_types)
        "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128, "num_experts_per_tok": 4,
        "swiglu_limit": 7.0,
        # a field in 5.25.0 (attention_bias: bool = True), so a file's false is honoured, as here; the 4.x
        # GptOssConfig.__init__ set self.attention_bias = True whatever the file said
        "attention_bias": True,
        "tie_word_embeddings": False,
    },
}
# The other name each class reads a key under: its attribute_map (alias -> attribute; transformers 5.25.0
# configuration_<type>.py). PreTrainedConfig.__setattr__ stores an alias's value under the attribute and to_dict
# writes __dict__, so a Hub file may use one name and a file re-saved by transformers the other (Qwen3-MoE: the Hub's
# num_experts, re-saved num_local_experts). Keyed by the name the readers ask for; Qwen3NextConfig has none.
ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "deepseek_v3": {"n_routed_experts": ("num_local_experts",), "num_nextn_predict_layers": ("num_mtp_layers",)},
    "deepseek_v2": {"n_routed_experts": ("num_experts",)},
    "glm4_moe": {"n_routed_experts": ("num_local_experts",), "num_nextn_predict_layers": ("num_mtp_layers",)},
    "glm_moe_dsa": {"n_routed_experts": ("num_local_experts",)},
    "qwen3_moe": {"num_experts": ("num_local_experts",)},
    "mixtral": {"num_local_experts": ("num_experts",)},
    "gpt_oss": {"num_local_experts": ("num_experts",)},
    "nemotron_h": {"n_routed_experts": ("num_local_experts",)},
}
# Model types read like another that transformers has no class for (Kimi-K2's Hub checkpoint ships its own
# configuration_deepseek.py): the other type's optional keys have no default to take and must be given.
CLASSLESS: dict[str, str] = {"kimi_k2": "deepseek_v3"}

_UNSET: Any = object()


class _Cfg:
    """Typed access to a config dict; every failure names the file and the key. A key is read under its name or
    ``aliases`` (the class's attribute_map); one the file leaves out takes ``defaults`` (its transformers class's
    default: :data:`TRANSFORMERS_DEFAULTS`); a key of ``optional`` that ``defaults`` lacks (a model type with no
    transformers class) is refused."""

    def __init__(self, data: Mapping[str, Any], origin: str, defaults: Mapping[str, Any] | None = None,
                 optional: frozenset[str] = frozenset(),
                 aliases: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.data = data
        self.origin = origin
        self.defaults: Mapping[str, Any] = defaults or {}
        self.optional = optional
        self.aliases: Mapping[str, tuple[str, ...]] = aliases or {}

    def _given(self, key: str) -> list[str]:
        """The names the file gives ``key`` under: the key and its class's attribute_map aliases."""
        return [n for n in (key, *self.aliases.get(key, ())) if n in self.data]

    def name(self, key: str) -> str:
        """``key`` as the file names it (an alias where the file uses one), for messages."""
        given = self._given(key)
        return given[0] if given else key

    def _fail(self, key: str, why: str) -> MoeplanError:
        return MoeplanError(f"{self.origin}: key '{self.name(key)}' {why}")

    def _missing(self, key: str, need: str = "") -> MoeplanError:
        """A key the file leaves out or gives as null where a value is needed; ``need`` says why (else the type)."""
        state = "is null" if self._given(key) else "is missing"
        if key in self.optional and key not in self.defaults:
            return self._fail(key, f"{state}, and model_type '{self.model_type}' has no transformers "
                              "configuration class whose default moeplan could take; give it")
        return self._fail(key, f"{state}: {need}" if need else f"{state} (needed for model_type '{self.model_type}')")

    def raw(self, key: str) -> Any:
        """The file's value of ``key`` under either of its names (None: null), ``_UNSET`` where it gives neither;
        both names with different values are refused (transformers would keep one silently)."""
        given = self._given(key)
        if not given:
            return _UNSET
        first = self.data[given[0]]
        for other in given[1:]:
            if self.data[other] != first:
                raise MoeplanError(f"{self.origin}: keys '{given[0]}' ({first!r}) and '{other}' ({self.data[other]!r}) "
                                   f"name the same setting (the {self.model_type} class's attribute_map) and "
                                   "disagree; keep one")
        return first

    def get(self, key: str, null: Any = _UNSET) -> Any:
        """The file's value of ``key``; where it is absent, its transformers default (``_UNSET`` without one); where
        it is null, ``null`` (the class's own rule for None) when given, else the same default."""
        value = self.raw(key)
        if value is not None and value is not _UNSET:
            return value
        if value is None and null is not _UNSET:
            return null
        return self.defaults.get(key, _UNSET)

    def int(self, key: str, default: int | None = None, *, allow_zero: bool = False, null: Any = _UNSET,
            need: str = "") -> int:
        """A count; ``default`` only where neither the file nor the class gives one (a derived width); ``need``: why
        a missing or null one is refused."""
        value = self.get(key, null)
        if value is _UNSET or value is None:
            if default is None:
                raise self._missing(key, need)
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, f"must be an integer, got {value!r}")
        if value < 0 or (value == 0 and not allow_zero):
            raise self._fail(key, f"must be {'>= 0' if allow_zero else 'positive'}, got {value}")
        if value > INT32_MAX:
            raise self._fail(key, f"is {value:.3g}, past the int32 range (2^31 - 1) that the kernels and "
                             "Megatron's datasets index with")
        problem = arch_problem(key, value)  # far beyond any real model: refused before any work grows with it
        if problem:
            raise MoeplanError(f"{self.origin}: {self.name(key)} {problem}")
        return value

    def divides(self, key: str, value: int, by_key: str, by: int, why: str) -> None:
        """``value`` (key) must be a multiple of ``by`` (by_key), as the model code requires."""
        if value % by:
            raise self._fail(key, f"({value}) is not divisible by {by_key} ({by}): {why}")

    def opt_int(self, key: str) -> int | None:
        """A count, or None where the file or the class default says null (or 0: the feature is off)."""
        value = self.get(key, null=None)
        if value is _UNSET:
            raise self._missing(key)
        if value in (None, 0):
            return None
        return self.int(key)

    def opt_float(self, key: str) -> float | None:
        """A positive number, or None where the file or the class default says null."""
        value = self.get(key, null=None)
        if value is _UNSET:
            raise self._missing(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self._fail(key, f"must be a positive number, got {value!r}")
        return float(value)

    def bool(self, key: str) -> bool:
        value = self.get(key)
        if value is _UNSET:
            raise self._missing(key)
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.get(key, null=[])  # the Qwen classes' __post_init__: None -> []
        if value is _UNSET:
            raise self._missing(key)
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            raise self._fail(key, f"must be a list of integers, got {value!r}")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.raw(key)
        if value is None or value is _UNSET:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, f"must be a list of strings, got {value!r}")
        return value

    @property
    def model_type(self) -> str:
        return str(self.data.get("model_type"))


def _mla_layers(c: _Cfg) -> tuple[Attention, DenseMLP, MoE]:
    heads = c.int("num_attention_heads")
    nope = c.int("qk_nope_head_dim")
    rope = c.int("qk_rope_head_dim")
    attn = Attention(
        kind="mla",
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        v_head_dim=c.int("v_head_dim"),
        q_lora_rank=c.opt_int("q_lora_rank"),  # null: no query LoRA (the classes' q_lora_rank None)
        kv_lora_rank=c.int("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
    )
    return attn, DenseMLP(c.int("intermediate_size")), _deepseek_moe(c)


def _top_k(c: _Cfg, experts_key: str, top_k: int | None = None) -> tuple[int, int]:
    """(experts, top-k): a token is routed to top-k distinct experts (torch.topk over the router
    scores in Megatron-Core moe/router.py and transformers), so top-k cannot exceed the experts."""
    experts = c.int(experts_key)
    k = c.int("num_experts_per_tok") if top_k is None else top_k
    if k > experts:
        raise c._fail("num_experts_per_tok", f"({k}) exceeds {experts_key} ({experts}): a token is routed to "
                      "top-k distinct experts")
    return experts, k


def _deepseek_moe(c: _Cfg) -> MoE:
    """DeepSeek/Kimi/GLM routed experts with n_shared_experts shared experts of the same width."""
    moe_ffn = c.int("moe_intermediate_size")
    experts, top_k = _top_k(c, "n_routed_experts")
    n_group, topk_group = c.int("n_group", null=1), c.int("topk_group", null=1)  # None: no groups
    # group-limited routing (Megatron-Core moe/moe_utils.py group_limited_topk): the experts split into
    # n_group equal groups, topk_group of them are kept, and top-k experts are picked inside those
    c.divides("n_routed_experts", experts, "n_group", n_group, "group-limited routing splits the experts into "
              "equal groups")
    if topk_group > n_group:
        raise c._fail("topk_group", f"({topk_group}) exceeds n_group ({n_group})")
    if top_k > topk_group * (experts // n_group):
        raise c._fail("num_experts_per_tok", f"({top_k}) exceeds the {topk_group * (experts // n_group)} experts in "
                      f"topk_group ({topk_group}) groups of {experts // n_group}")
    return MoE(
        num_experts=experts,
        top_k=top_k,
        expert_ffn_hidden=moe_ffn,
        shared_ffn_hidden=c.int("n_shared_experts", allow_zero=True) * moe_ffn,
        n_group=n_group,
        topk_group=topk_group,
    )


def _first_k_dense(c: _Cfg, attn: Attention, dense: DenseMLP, moe: MoE) -> tuple[Layer, ...]:
    """DeepSeek/GLM rule (modeling_deepseek.py): layer i is MoE when i >= first_k_dense_replace and
    i % moe_layer_freq == 0."""
    n = c.int("num_hidden_layers")
    k = c.int("first_k_dense_replace", allow_zero=True)
    freq = c.int("moe_layer_freq")
    if k > n:
        raise c._fail("first_k_dense_replace", f"({k}) exceeds num_hidden_layers ({n})")
    dense_layer, moe_layer = Layer(attn, dense), Layer(attn, moe)
    return tuple(moe_layer if (i >= k and i % freq == 0) else dense_layer for i in range(n))


def _read_deepseek(c: _Cfg) -> dict[str, Any]:
    attn, dense, moe = _mla_layers(c)
    layers = _first_k_dense(c, attn, dense, moe)
    mtp = c.int("num_nextn_predict_layers", allow_zero=True)
    return {"layers": layers, "mtp_layers": mtp, "mtp_layer": Layer(attn, moe) if mtp else None}


def _yarn_mscale(c: _Cfg) -> float:
    """The YaRN concentration factor of ``rope_scaling`` (1.0 without YaRN), as transformers'
    _compute_yarn_parameters and Megatron-Core's _yarn_get_concentration_factor compute it: attention_factor if
    given, else mscale / mscale_all_dim when both are set, else 0.1 x ln(factor) + 1 (factor > 1)."""
    # transformers 5 saves rope_scaling as rope_parameters (modeling_rope_utils.py convert_rope_params_to_dict:
    # ``rope_scaling or self.rope_parameters``)
    rs = c.data.get("rope_scaling") or c.data.get("rope_parameters")
    if not isinstance(rs, Mapping) or (rs.get("rope_type") or rs.get("type")) != "yarn":
        return 1.0
    factor = float(rs.get("factor") or 1.0)

    def get_mscale(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if rs.get("attention_factor") is not None:
        return float(rs["attention_factor"])
    if rs.get("mscale") and rs.get("mscale_all_dim"):
        return get_mscale(float(rs["mscale"])) / get_mscale(float(rs["mscale_all_dim"]))
    return get_mscale()


def _gqa(c: _Cfg, **extra: Any) -> Attention:
    heads = c.int("num_attention_heads")
    hidden = c.int("hidden_size")
    # absent: the class's head_dim, or (no such field) the modeling's getattr(config, "head_dim", hidden_size //
    # num_attention_heads); null: hidden_size // num_attention_heads (GptOssConfig.__post_init__, Mixtral's modeling)
    if c.get("head_dim", null=None) in (_UNSET, None):  # the width is hidden / heads: it must divide
        c.divides("hidden_size", hidden, "num_attention_heads", heads, "without head_dim each head is "
                  "hidden_size / num_attention_heads wide")
    head_dim = c.int("head_dim", hidden // heads, null=hidden // heads)
    # absent: the class default (GQA); null: num_attention_heads (the classes' __post_init__ for None)
    kv = c.int("num_key_value_heads", null=heads)
    # grouped-query attention: every KV head serves the same number of query heads (Megatron-Core
    # TransformerConfig: num_attention_heads % num_query_groups == 0; transformers repeat_kv)
    c.divides("num_attention_heads", heads, "num_key_value_heads", kv, "grouped-query attention gives every KV "
              "head the same number of query heads")
    return Attention(
        kind="gqa",
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        v_head_dim=head_dim,
        rope_mscale=_yarn_mscale(c),
        **extra,
    )


def _read_glm4_moe(c: _Cfg) -> dict[str, Any]:
    attn = _gqa(c, qk_norm=c.bool("use_qk_norm"), qkv_bias=c.bool("attention_bias"))
    moe = _deepseek_moe(c)
    layers = _first_k_dense(c, attn, DenseMLP(c.int("intermediate_size")), moe)
    mtp = c.int("num_nextn_predict_layers", allow_zero=True)
    return {"layers": layers, "mtp_layers": mtp, "mtp_layer": Layer(attn, moe) if mtp else None}


def _indexer_types(c: _Cfg, n: int) -> list[bool]:
    """Per layer, whether it runs its own DSA indexer (GlmMoeDsaConfig.__post_init__: indexer_types "full" /
    "shared", else index_topk_pattern "F" / "S", else "full" where max(i - offset + 1, 0) % freq == 0)."""
    types = c.str_list("indexer_types")
    if types is None:
        pattern = c.raw("index_topk_pattern")
        if isinstance(pattern, str) and pattern:
            if set(pattern) - {"F", "S"}:
                raise c._fail("index_topk_pattern", f"must hold only F and S, got {pattern!r}")
            types = ["full" if ch == "F" else "shared" for ch in pattern]
        else:
            freq = c.int("index_topk_freq")
            offset = c.int("index_skip_topk_offset", allow_zero=True)
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if len(types) != n:
        raise c._fail("indexer_types", f"has {len(types)} entries but num_hidden_layers is {n}")
    if bad := [t for t in types if t not in ("full", "shared")]:
        raise c._fail("indexer_types", f"has unknown entry '{bad[0]}'")
    if types and types[0] != "full":
        raise c._fail("indexer_types", "starts with 'shared': the first layer has no earlier top-k to reuse")
    return [t == "full" for t in types]


def _read_glm_moe_dsa(c: _Cfg) -> dict[str, Any]:
    """GLM-5 / GLM-5.2 (transformers GlmMoeDsaForCausalLM): DeepSeek-V3 MLA and MoE, every layer's attention
    sparse (DSA: each query reads the index_topk keys its lightning indexer picks), IndexShare layers reusing
    the previous indexer's top-k (moeplan.engine.dsa)."""
    attn, dense, moe = _mla_layers(c)
    n = c.int("num_hidden_layers")
    sparse = SparseAttention(topk=c.int("index_topk"), index_heads=c.int("index_n_heads"),
                             index_head_dim=c.int("index_head_dim"))
    full, shared = replace(attn, sparse=sparse), replace(attn, sparse=replace(sparse, runs_indexer=False))
    kinds = c.str_list("mlp_layer_types")
    if kinds is None:
        is_moe = [layer.is_moe for layer in _first_k_dense(c, attn, dense, moe)]
    else:
        if len(kinds) != n or set(kinds) - {"dense", "sparse"}:
            raise c._fail("mlp_layer_types", f"must list {n} entries of 'dense' / 'sparse'")
        is_moe = [k == "sparse" for k in kinds]
    layers = tuple(Layer(full if runs else shared, moe if m else dense) for runs, m in zip(_indexer_types(c, n), is_moe))
    # The MTP module numbers its layers afresh, so its layer computes its own top-k (Megatron Bridge flop_utils
    # "MTP1 ... computes one fresh index"; the GLM-5.2 checkpoint's layer 78 holds indexer weights)
    mtp = c.int("num_nextn_predict_layers", allow_zero=True)
    return {"layers": layers, "mtp_layers": mtp, "mtp_layer": Layer(full, moe) if mtp else None}


def _qwen_moe(c: _Cfg, shared_gate: bool) -> MoE:
    experts, top_k = _top_k(c, "num_experts")
    return MoE(
        num_experts=experts,
        top_k=top_k,
        expert_ffn_hidden=c.int("moe_intermediate_size"),
        shared_ffn_hidden=c.int("shared_expert_intermediate_size", allow_zero=True),
        shared_gate=shared_gate and c.int("shared_expert_intermediate_size", allow_zero=True) > 0,
    )


def _qwen_is_moe(c: _Cfg, i: int) -> bool:
    """transformers Qwen3MoeDecoderLayer: sparse when not in mlp_only_layers and
    (i + 1) % decoder_sparse_step == 0."""
    step = c.int("decoder_sparse_step")
    return i not in set(c.int_list("mlp_only_layers")) and (i + 1) % step == 0


def _mlp_only_in_range(c: _Cfg, n: int) -> None:
    bad = [i for i in c.int_list("mlp_only_layers") if not 0 <= i < n]
    if bad:
        raise c._fail("mlp_only_layers", f"names layer {bad[0]}, outside 0..{n - 1} (num_hidden_layers {n})")


def _read_qwen3_moe(c: _Cfg) -> dict[str, Any]:
    attn = _gqa(c, qk_norm=True, qkv_bias=c.bool("attention_bias"))
    moe = _qwen_moe(c, shared_gate=False)
    n = c.int("num_hidden_layers")
    _mlp_only_in_range(c, n)
    needs_dense = any(not _qwen_is_moe(c, i) for i in range(n))
    dense = DenseMLP(c.int("intermediate_size")) if needs_dense else None
    layers = tuple(Layer(attn, moe if _qwen_is_moe(c, i) else dense) for i in range(n))  # type: ignore[arg-type]
    return {"layers": layers}


def _layer_types(c: _Cfg, n: int, pattern: Callable[[int], str]) -> list[str]:
    """``layer_types``, or where it is absent or null the class's own list (``pattern``: layer index -> kind)."""
    types = c.str_list("layer_types")
    if types is None:
        types = [pattern(i) for i in range(n)]
    if len(types) != n:
        raise c._fail("layer_types", f"has {len(types)} entries but num_hidden_layers is {n}")
    return types


def _read_qwen3_next(c: _Cfg) -> dict[str, Any]:
    n = c.int("num_hidden_layers")
    _mlp_only_in_range(c, n)
    attn = _gqa(c, qk_norm=True, output_gate=True)
    key_heads, value_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    # Gated DeltaNet repeats each q/k head over value_heads / key_heads value heads (transformers
    # Qwen3NextGatedDeltaNet, Megatron-Core ssm/gated_delta_net.py)
    c.divides("linear_num_value_heads", value_heads, "linear_num_key_heads", key_heads, "each key head serves "
              "the same number of value heads")
    gdn = GatedDeltaNet(
        num_key_heads=key_heads,
        num_value_heads=value_heads,
        key_head_dim=c.int("linear_key_head_dim"),
        value_head_dim=c.int("linear_value_head_dim"),
        conv_kernel=c.int("linear_conv_kernel_dim"),
    )
    moe = _qwen_moe(c, shared_gate=True)
    # the dense width only where some layer is dense (Qwen3.5-MoE has no intermediate_size: every layer is MoE)
    dense = DenseMLP(c.int("intermediate_size")) if any(not _qwen_is_moe(c, i) for i in range(n)) else None
    layers = []
    interval = c.int("full_attention_interval")
    # Qwen3NextConfig.__post_init__: "linear_attention" if (i + 1) % full_attention_interval else "full_attention"
    kinds = _layer_types(c, n, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention")
    for i, kind in enumerate(kinds):
        if kind not in ("full_attention", "linear_attention"):
            raise c._fail("layer_types", f"has unknown entry '{kind}'")
        mixer = attn if kind == "full_attention" else gdn
        layers.append(Layer(mixer, moe if _qwen_is_moe(c, i) else dense))  # type: ignore[arg-type]
    # The released checkpoints hold one MTP module (mtp.*) that no config key describes; count it
    # only when the config says so (num_nextn_predict_layers / mtp_num_hidden_layers).
    mtp = c.int("num_nextn_predict_layers", allow_zero=True) or c.int("mtp_num_hidden_layers", allow_zero=True)
    return {"layers": tuple(layers), "mtp_layers": mtp, "mtp_layer": Layer(attn, moe) if mtp else None}


def _read_mixtral(c: _Cfg) -> dict[str, Any]:
    attn = _gqa(c, sliding_window=c.opt_int("sliding_window"))
    experts, top_k = _top_k(c, "num_local_experts")
    moe = MoE(
        num_experts=experts,
        top_k=top_k,
        expert_ffn_hidden=c.int("intermediate_size"),
    )
    return {"layers": tuple(Layer(attn, moe) for _ in range(c.int("num_hidden_layers")))}


def _read_gpt_oss(c: _Cfg) -> dict[str, Any]:
    n = c.int("num_hidden_layers")
    bias = c.bool("attention_bias")
    heads = c.int("num_attention_heads")
    full = _gqa(c, qkv_bias=bias, o_bias=bias, sink_logits=heads)
    # GptOssConfig.__post_init__: "sliding_attention" if (i + 1) % 2 else "full_attention"
    kinds = _layer_types(c, n, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention")
    mixers = {"full_attention": full}
    if "sliding_attention" in kinds:  # a null window refused: GptOssAttention would give those layers none
        window = c.int("sliding_window", null=None, need="the sliding layers need a window")
        mixers["sliding_attention"] = _gqa(c, qkv_bias=bias, o_bias=bias, sink_logits=heads, sliding_window=window)
    # OpenAI's own key experts_per_token where transformers' num_experts_per_tok is absent, else the class default
    own = c.data.get("num_experts_per_tok") is None and c.data.get("experts_per_token") is not None
    top_k = c.int("experts_per_token" if own else "num_experts_per_tok")
    experts, top_k = _top_k(c, "num_local_experts", top_k)
    moe = MoE(
        num_experts=experts,
        top_k=top_k,
        expert_ffn_hidden=c.int("intermediate_size"),
        router_bias=True,
        expert_bias=True,
        act_clamp=c.opt_float("swiglu_limit"),
    )
    layers = []
    for kind in kinds:
        if kind not in ("full_attention", "sliding_attention"):
            raise c._fail("layer_types", f"has unknown entry '{kind}'")
        layers.append(Layer(mixers[kind], moe))
    return {"layers": tuple(layers)}


# Megatron-Core's hybrid layer symbols (megatron/core/models/hybrid/hybrid_layer_allocation.py Symbols) and the
# layers_block_type names transformers' NemotronHConfig maps them to (_pattern_to_list; older checkpoints' "mamba",
# "attention" remapped by remap_legacy_layer_types).
HYBRID_SYMBOLS: dict[str, str] = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*",
                                  "moe": "E", "mlp": "-"}


def _hybrid_pattern(c: _Cfg) -> str:
    """The main stack's hybrid pattern: hybrid_override_pattern, else layers_block_type (its alias layer_types)."""
    pattern = c.data.get("hybrid_override_pattern")
    if pattern is None:
        types = c.data.get("layers_block_type", c.data.get("layer_types"))
        if not isinstance(types, list) or not types or not all(t in HYBRID_SYMBOLS for t in types):
            raise c._fail("hybrid_override_pattern", "is missing (and layers_block_type gives no list of "
                          f"{', '.join(sorted(HYBRID_SYMBOLS))})")
        pattern = "".join(HYBRID_SYMBOLS[t] for t in types)
    if not isinstance(pattern, str) or not pattern:
        raise c._fail("hybrid_override_pattern", f"must be a non-empty string, got {pattern!r}")
    bad = sorted(set(pattern) - set("M*E-"))
    if bad:
        raise c._fail("hybrid_override_pattern", f"has symbol(s) {' '.join(bad)}: a layer is one of M (Mamba), "
                      "* (attention), E (MoE), - (MLP)")
    n = c.data.get("num_hidden_layers")
    if n is not None and n != len(pattern):
        raise c._fail("num_hidden_layers", f"({n}) differs from the {len(pattern)} layers of hybrid_override_pattern")
    return pattern


def _read_nemotron_h(c: _Cfg) -> dict[str, Any]:
    """Nemotron-H / Nemotron-3 (transformers NemotronHConfig; Megatron Bridge nemotron_h_bridge.py): one block per
    pattern symbol, each a pre-norm and one of a Mamba-2 mixer, GQA attention, a (latent) MoE or a squared-ReLU
    MLP; MTP modules of the mtp_hybrid_override_pattern (Nemotron-3 Super / 3.5 Lightning: "*E")."""
    pattern = _hybrid_pattern(c)
    act = c.get("mlp_hidden_act")
    if act != "relu2":
        raise c._fail("mlp_hidden_act", f"is {act!r}; moeplan reads the squared-ReLU (relu2) MLPs of Nemotron-H only")
    blocks: dict[str, Any] = {}
    if "M" in pattern:
        heads, groups = c.int("mamba_num_heads"), c.int("n_groups")
        c.divides("mamba_num_heads", heads, "n_groups", groups, "every Mamba group serves the same number of heads "
                  "(mamba_mixer.py: nheads % ngroups == 0)")
        blocks["M"] = Mamba2(num_heads=heads, head_dim=c.int("mamba_head_dim"), state_dim=c.int("ssm_state_size"),
                             num_groups=groups, conv_kernel=c.int("conv_kernel"), chunk_size=c.int("chunk_size"))
    attn = _gqa(c) if "*" in pattern or c.int("num_nextn_predict_layers", allow_zero=True) else None
    blocks["*"] = attn
    moe = None
    if "E" in pattern or c.int("num_nextn_predict_layers", allow_zero=True):
        experts, top_k = _top_k(c, "n_routed_experts")
        shared = c.int("moe_shared_expert_intermediate_size", allow_zero=True) if c.int(
            "n_shared_experts", allow_zero=True) else 0
        moe = MoE(num_experts=experts, top_k=top_k, expert_ffn_hidden=c.int("moe_intermediate_size"),
                  shared_ffn_hidden=shared, gated=False, n_group=c.int("n_group", null=1),
                  topk_group=c.int("topk_group", null=1), latent_size=c.opt_int("moe_latent_size"))
    blocks["E"] = moe
    if "-" in pattern:
        blocks["-"] = DenseMLP(c.int("intermediate_size"), gated=False)
    layers = tuple(Layer(blocks[s], None) if s in "M*" else Layer(None, blocks[s]) for s in pattern)
    mtp = c.int("num_nextn_predict_layers", allow_zero=True)
    mtp_layer = None
    if mtp:
        mtp_pattern = c.get("mtp_hybrid_override_pattern")
        if mtp_pattern != "*E":
            raise c._fail("mtp_hybrid_override_pattern", f"is {mtp_pattern!r}; moeplan models MTP modules of one "
                          "attention and one MoE layer ('*E') only")
        mtp_layer = Layer(attn, moe)
    return {"layers": layers, "mtp_layers": mtp, "mtp_layer": mtp_layer, "hybrid_pattern": pattern}


READERS: dict[str, Callable[[_Cfg], dict[str, Any]]] = {
    "nemotron_h": _read_nemotron_h,
    "deepseek_v3": _read_deepseek,
    "kimi_k2": _read_deepseek,
    "deepseek_v2": _read_deepseek,
    "qwen3_moe": _read_qwen3_moe,
    "qwen3_next": _read_qwen3_next,
    # Qwen3.5 / Qwen3.6 MoE (transformers Qwen3_5MoeTextModel): the Qwen3-Next hybrid (3 Gated DeltaNet + 1 gated
    # attention, in_proj split into in_proj_qkv / _z / _b / _a of the same total width) with MoE on every layer
    "qwen3_5_moe": _read_qwen3_next,
    "mixtral": _read_mixtral,
    "gpt_oss": _read_gpt_oss,
    "glm4_moe": _read_glm4_moe,
    "glm_moe_dsa": _read_glm_moe_dsa,
}


# Multimodal files whose language model is a sub-config: model_type -> (key, the text config's own model_type).
# Qwen3_5MoeConfig (transformers configuration_qwen3_5_moe.py) holds Qwen3_5MoeTextConfig under text_config and
# the vision tower's under vision_config; moeplan plans the language model (the vision tower is not costed).
TEXT_CONFIGS: dict[str, tuple[str, str]] = {"qwen3_5_moe": ("text_config", "qwen3_5_moe_text")}


# Public architectures moeplan does not read, and why (README, "Not supported").
NOT_SUPPORTED: dict[str, str] = {
    "deepseek_v4": "DeepSeek-V4's hybrid compressed sparse attention and mHC hyper-connections are not costed",
}


def _text_config(data: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """The language model's keys of a multimodal file (:data:`TEXT_CONFIGS`), read under the outer model_type; a
    bare text config (model_type qwen3_5_moe_text) is read as the same type. The outer tie_word_embeddings is the
    one the model class ties by (Qwen3_5MoeConfig's field); provenance keys stay."""
    model_type = data.get("model_type")
    for outer, (key, inner) in TEXT_CONFIGS.items():
        if model_type == inner:
            return {**data, "model_type": outer}
        if model_type == outer:
            text = data.get(key)
            if not isinstance(text, Mapping):
                raise MoeplanError(f"{origin}: key '{key}' must be an object (the {outer} language model's config)")
            out = {k: v for k, v in text.items() if k != "model_type"}
            out.update({k: data[k] for k in ("_source", "_notes", "tie_word_embeddings") if k in data})
            return {**out, "model_type": outer}
    return data


def spec_from_dict(data: Mapping[str, Any], name: str, origin: str, path: str = "") -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed config.json (``origin`` names it in errors; ``path``, the
    file's absolute path, is kept on the spec for exports to record)."""
    if not isinstance(data, Mapping):
        raise MoeplanError(f"{origin}: expected a JSON object at the top level")
    data = _text_config(data, origin)
    model_type = data.get("model_type")
    if model_type in NOT_SUPPORTED:
        raise MoeplanError(f"{origin}: model_type '{model_type}' is not supported: {NOT_SUPPORTED[model_type]}")
    if not isinstance(model_type, str) or model_type not in READERS:
        supported = ", ".join(sorted(READERS))
        raise MoeplanError(f"{origin}: key 'model_type' is {model_type!r}; supported types: {supported}")
    like = CLASSLESS.get(model_type)
    c = _Cfg(data, origin, None if like else TRANSFORMERS_DEFAULTS[model_type],
             frozenset(TRANSFORMERS_DEFAULTS[like]) if like else frozenset(), ALIASES.get(model_type))
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    if model_type != "nemotron_h":  # NemotronHConfig derives the layer count from its pattern (num_hidden_layers
        c.int("num_hidden_layers")  # is deprecated there and may be null)
    parts = READERS[str(model_type)](c)
    notes = data.get("_notes") or ()
    return ModelSpec(
        name=name,
        model_type=str(model_type),
        hidden=hidden,
        vocab=vocab,
        tie_embeddings=c.bool("tie_word_embeddings"),
        source=str(data.get("_source", origin)),
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
        path=path,
        **parts,
    )


def read_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json file. Raises :class:`MoeplanError` with one line on failure."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MoeplanError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise MoeplanError(f"{p}: not a UTF-8 text file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MoeplanError(f"{p}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise MoeplanError(f"{p}: JSON nested too deeply to read (a config.json is a few levels deep)") from None
    stem = p.parent.name if p.name == "config.json" else p.stem
    return spec_from_dict(data, name or stem, str(p), str(p.resolve()))
