"""The MoE router's GEMM output dtype (Megatron-Core ``moe_router_dtype``) and what Megatron Bridge's model
providers set it to.

Megatron-Core (transformer_config.py, every release 0.13-0.19): ``moe_router_dtype`` None (the input's dtype, bf16),
'fp32' or 'fp64'; router.py gating passes it to router_gating_linear, whose Transformer Engine GEMM takes the bf16
input and weight and writes the logits in that dtype (moe_utils.py RouterGatingLinearFunction). The routing scores
after softmax / sigmoid are fp32 whatever it is (moe_utils.py compute_routing_scores: ``dtype=torch.float32`` /
``logits.float()``). Megatron-Core warns for >= 32 experts without it ("Using a large number of experts (e.g.
>=32) without fp32 routing"): a warning of Megatron-Core, not a rule Bridge follows.

Megatron Bridge v0.6.0 sets 'fp32' in the model bridges / providers of these Hugging Face model types
(src/megatron/bridge/models/...: deepseek/deepseek_v2_bridge.py, deepseek_v3_bridge.py, deepseek_v4_bridge.py,
kimi/kimi_bridge.py, glm/glm45_bridge.py, glm_moe_dsa/glm5_bridge.py, nemotronh/nemotron_h_bridge.py,
qwen/qwen3_next_bridge.py, qwen_vl/qwen35_vl_provider.py Qwen35VLMoEModelProvider) and leaves it unset in
qwen3_moe_bridge.py, gpt_oss_bridge.py and the Mixtral bridge.

A leaf: imports nothing from moeplan.
"""

from __future__ import annotations

from typing import Literal, get_args

# moeplan's values (the knob moe_router_dtype's type): auto = what the model's Bridge provider sets (the run keeps
# the word; router_dtype_value resolves it); none = unset (Megatron-Core's default None).
RouterDtype = Literal["auto", "fp32", "fp64", "none"]
ROUTER_DTYPES: tuple[str, ...] = get_args(RouterDtype)

BRIDGE_FP32_ROUTER_MODEL_TYPES: frozenset[str] = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v4", "kimi_k2", "glm4_moe", "glm_moe_dsa", "nemotron_h", "qwen3_next",
    "qwen3_5_moe"})

# Bytes per element of the router logits per Megatron-Core value (None: the bf16 input's dtype).
ROUTER_LOGIT_BYTES: dict[str | None, int] = {None: 2, "fp32": 4, "fp64": 8}


def bridge_router_dtype(model_type: str) -> str | None:
    """``moe_router_dtype`` as Megatron Bridge's provider for this Hugging Face model type sets it (None: unset)."""
    return "fp32" if model_type in BRIDGE_FP32_ROUTER_MODEL_TYPES else None


def router_dtype_value(knob: str, model_type: str) -> str | None:
    """The Megatron-Core ``moe_router_dtype`` of moeplan's knob value ``knob`` (see ROUTER_DTYPES) for a model."""
    if knob == "auto":
        return bridge_router_dtype(model_type)
    return None if knob == "none" else knob
