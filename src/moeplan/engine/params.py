"""Parameter counting, per component, from the architecture spec.

Counts are of learned weights as stored in the Hugging Face checkpoints (norms and biases included;
FP8 scales and buffers such as ``e_score_correction_bias`` or ``inv_freq`` excluded), which is what
../shared/models/README.md tabulates. Shapes follow each model's transformers modeling file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property, lru_cache

from moeplan.engine.dsa import indexer_params
from moeplan.engine.latent_moe import expert_width, latent_proj_params
from moeplan.engine.mamba import mamba_params
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, Mamba2, ModelSpec, MoE


def attention_params(a: Attention, hidden: int) -> int:
    """Softmax attention weights of one layer (without the layer's input norm)."""
    if a.is_mla:
        # modeling_deepseek.py DeepseekV3Attention: q_a_proj/q_a_layernorm/q_b_proj (or q_proj),
        # kv_a_proj_with_mqa (kv_lora + rope), kv_a_layernorm, kv_b_proj, o_proj.
        q_out = a.num_heads * a.head_dim
        q = hidden * q_out if a.q_lora_rank is None else a.q_lora_rank * (hidden + 1 + q_out)
        kv = hidden * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + a.num_heads * a.v_head_dim * hidden + indexer_params(a, hidden)  # DSA indexer (moeplan.engine.dsa)
    q_out = a.num_heads * a.head_dim * (2 if a.output_gate else 1)  # gate shares q_proj
    kv_out = 2 * a.num_kv_heads * a.head_dim
    total = hidden * (q_out + kv_out) + a.num_heads * a.head_dim * hidden
    if a.qkv_bias:
        total += q_out + kv_out
    if a.o_bias:
        total += hidden
    if a.qk_norm:
        total += 2 * a.head_dim  # q_norm and k_norm are per-head RMSNorms of width head_dim
    return total + a.sink_logits


def gdn_params(g: GatedDeltaNet, hidden: int) -> int:
    """Qwen3-Next Gated DeltaNet (transformers Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba,
    depthwise conv1d (no bias), A_log, dt_bias, gated RMSNorm of width value_head_dim, out_proj."""
    conv = g.conv_dim * g.conv_kernel
    return hidden * g.in_proj_dim + conv + 2 * g.num_value_heads + g.value_head_dim + g.value_dim * hidden


def mixer_params(mixer: Attention | GatedDeltaNet | Mamba2 | None, hidden: int) -> int:
    if mixer is None:  # an MLP-only layer of a hybrid stack
        return 0
    if isinstance(mixer, GatedDeltaNet):
        return gdn_params(mixer, hidden)
    if isinstance(mixer, Mamba2):
        return mamba_params(mixer, hidden)
    return attention_params(mixer, hidden)


def ffn_params(hidden: int, ffn: int, gated: bool, bias: bool = False) -> int:
    """One feed-forward block: (gate +) up + down projections."""
    n_in = 2 if gated else 1
    total = hidden * ffn * (n_in + 1)
    if bias:
        total += n_in * ffn + hidden
    return total


@dataclass(frozen=True)
class MoEParams:
    routed_experts: int  # all experts of the layer
    one_expert: int
    shared_experts: int  # shared expert(s) plus their gate
    router: int
    latent_proj: int = 0  # LatentMoE fc1_latent_proj + fc2_latent_proj (moeplan.engine.latent_moe)


def moe_params(m: MoE, hidden: int) -> MoEParams:
    # routed experts take the latent width under LatentMoE (moeplan.engine.latent_moe.expert_width)
    one = ffn_params(expert_width(m, hidden), m.expert_ffn_hidden, m.gated, m.expert_bias)
    shared = ffn_params(hidden, m.shared_ffn_hidden, m.gated) if m.has_shared else 0
    if m.shared_gate:
        shared += hidden
    router = m.num_experts * hidden + (m.num_experts if m.router_bias else 0)
    return MoEParams(m.num_experts * one, one, shared, router, latent_proj_params(m, hidden))


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameters by component (elements). ``mtp`` holds the MTP modules' unique parameters (their
    embedding and output head are shared with the main model, as in Megatron-Core)."""

    embedding: int = 0
    output: int = 0
    attention: int = 0
    linear_attention: int = 0
    dense_mlp: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    router: int = 0
    moe_latent_proj: int = 0
    norms: int = 0
    mtp: int = 0

    @property
    def main_total(self) -> int:
        return self.total - self.mtp

    @cached_property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _layer_breakdown(layer: Layer, hidden: int, active: bool) -> dict[str, int]:
    # input_layernorm + post_attention_layernorm; one pre-norm per block of a hybrid stack's single-block layer
    out = {"norms": layer.blocks * hidden}
    # Mamba-2 counts with the linear-time mixers (Gated DeltaNet): both keep a constant-size state
    key = "linear_attention" if layer.is_linear_attention or layer.is_mamba else "attention"
    out[key] = mixer_params(layer.mixer, hidden)
    if layer.mlp is None:
        pass
    elif isinstance(layer.mlp, DenseMLP):
        out["dense_mlp"] = ffn_params(hidden, layer.mlp.ffn_hidden, layer.mlp.gated)
    else:
        mp = moe_params(layer.mlp, hidden)
        out["routed_experts"] = mp.one_expert * layer.mlp.top_k if active else mp.routed_experts
        out["shared_experts"] = mp.shared_experts
        out["router"] = mp.router
        out["moe_latent_proj"] = mp.latent_proj
    return out


def mtp_module_params(spec: ModelSpec, active: bool = False) -> int:
    """One DeepSeek-V3 style MTP module without its shared embedding/head: enorm, hnorm,
    eh_proj (2h -> h), one transformer layer, and the final norm of its shared head."""
    if spec.mtp_layer is None:
        return 0
    h = spec.hidden
    return 3 * h + 2 * h * h + sum(_layer_breakdown(spec.mtp_layer, h, active).values())


@lru_cache(maxsize=256)
def count_params(spec: ModelSpec, active: bool = False) -> ParamBreakdown:
    """Total parameters, or (``active=True``) parameters touched per token: top-k routed experts,
    all shared experts, router, attention, embedding and output head."""
    h = spec.hidden
    acc = {"embedding": spec.vocab * h, "output": 0 if spec.tie_embeddings else spec.vocab * h, "norms": h}
    for layer, count in spec.layer_groups():
        for key, value in _layer_breakdown(layer, h, active).items():
            acc[key] = acc.get(key, 0) + value * count
    acc["mtp"] = spec.mtp_layers * mtp_module_params(spec, active)
    return ParamBreakdown(**acc)
