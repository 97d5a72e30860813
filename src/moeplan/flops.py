"""Training FLOPs per token, as Megatron-Core counts them for its printed TFLOP/s/GPU.

Convention (megatron/training/training.py ``num_floating_point_operations``, after Narayanan et al.
2021, arXiv 2104.04473, appendix "Floating-point operation counting"):
- a GEMM of (m x n) by (n x k) costs 2mnk FLOPs; training = forward + 2x backward (dgrad, wgrad),
  so every GEMM term is 3x its forward cost;
- causal attention counts half of the score (QK^T) and context (AV) products: 2 x 2 x s x d / 2
  forward FLOPs per token per head, d the head width;
- the MLA branch counts the low-rank norms as "+1" columns, router and element-wise ops are not
  counted, MTP layers are counted as extra layers (MoE if the last main layer is MoE), plus their
  eh projection (2h -> h) and three norms;
- the logit GEMM uses the padded vocabulary (``make_vocab_size_divisible_by`` 128 x TP).
Gated DeltaNet layers are counted as in Megatron-Core's hybrid (GDN) accounting: projections are
GEMMs; the chunked delta rule costs O(d_k x d_v) per head per token, independent of sequence length.
Sliding-window layers (gpt-oss) count a window of min(window, s) keys instead of s/2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, MoE, ModelSpec

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron-LM --make-vocab-size-divisible-by default
TRAIN_MULTIPLIER = 3  # forward + backward (dgrad + wgrad), each the forward GEMM cost


def padded_vocab(vocab: int, tp: int = 1) -> int:
    """megatron/training/tokenizer: _vocab_size_with_padding (multiple of 128 x TP)."""
    multiple = MAKE_VOCAB_SIZE_DIVISIBLE_BY * tp
    return int(math.ceil(vocab / multiple) * multiple)


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs per token of one layer, by kind of work (training cost is 3x each)."""

    attn_proj_flops: float = 0.0  # QKV / MLA down-up / output projections (GEMM)
    attn_core_flops: float = 0.0  # score + context products, causal (flash attention)
    gdn_proj_flops: float = 0.0  # Gated DeltaNet in/out projections (GEMM)
    gdn_core_flops: float = 0.0  # conv + chunked delta rule (linear in S overall, constant per token)
    dense_mlp_flops: float = 0.0
    expert_flops: float = 0.0  # routed experts, top-k of them (grouped GEMM)
    shared_expert_flops: float = 0.0

    @property
    def gemm_flops(self) -> float:
        return (
            self.attn_proj_flops + self.gdn_proj_flops + self.dense_mlp_flops + self.expert_flops
            + self.shared_expert_flops
        )

    @property
    def total_flops(self) -> float:
        return self.gemm_flops + self.attn_core_flops + self.gdn_core_flops


def _attention_fwd(a: Attention, hidden: int, seq_len: int) -> tuple[float, float]:
    """(projection, core) forward FLOPs per token."""
    keys = min(a.sliding_window, seq_len) if a.sliding_window else seq_len / 2  # causal half
    if a.is_mla:
        n = a.num_heads
        if a.q_lora_rank is None:
            q_term = hidden * n * a.head_dim
        else:
            q_term = a.q_lora_rank * (hidden + n * a.head_dim + 1)
        kv_term = a.kv_lora_rank * (hidden + n * (a.qk_nope_head_dim + a.v_head_dim) + 1)
        kv_term += hidden * a.qk_rope_head_dim
        proj = 2 * (q_term + kv_term + n * a.v_head_dim * hidden)
        core = 2 * keys * n * (a.head_dim + a.v_head_dim)
        return proj, core
    q = a.num_heads * a.head_dim
    kv = a.num_kv_heads * a.head_dim
    gate = q if a.output_gate else 0  # gated attention: q_proj also emits the gate
    proj = 2 * hidden * (q + gate + 2 * kv) + 2 * q * hidden
    core = 2 * keys * 2 * q  # QK^T and AV, 2 FLOPs per MAC
    return proj, core


def _gdn_fwd(g: GatedDeltaNet, hidden: int) -> tuple[float, float]:
    """(projection, core) forward FLOPs per token of a Gated DeltaNet layer.

    Core: depthwise causal conv (2 x channels x kernel) and the chunked delta rule, which Megatron
    counts as 4 state-sized products per value head per token (2 x 4 x n_v x d_k x d_v forward;
    megatron/training/training.py, gated-delta-net branch of ``num_floating_point_operations``,
    core_r0.16+). The state is d_k x d_v per head (Yang et al., arXiv 2412.06464), so the cost per
    token does not depend on sequence length.
    """
    proj = 2 * hidden * (2 * g.key_dim + 2 * g.value_dim + 2 * g.num_value_heads) + 2 * g.value_dim * hidden
    core = 2 * g.conv_dim * g.conv_kernel + 2 * 4 * g.num_value_heads * g.key_head_dim * g.value_head_dim
    return proj, core


def _ffn_fwd(hidden: int, ffn: int, gated: bool) -> float:
    return 2 * hidden * ffn * (3 if gated else 2)


@lru_cache(maxsize=4096)
def layer_flops(layer: Layer, hidden: int, seq_len: int) -> LayerFlops:
    """Forward FLOPs per token of one layer at sequence length ``seq_len``."""
    parts: dict[str, float] = {}
    if isinstance(layer.mixer, GatedDeltaNet):
        parts["gdn_proj_flops"], parts["gdn_core_flops"] = _gdn_fwd(layer.mixer, hidden)
    else:
        parts["attn_proj_flops"], parts["attn_core_flops"] = _attention_fwd(layer.mixer, hidden, seq_len)
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        parts["dense_mlp_flops"] = _ffn_fwd(hidden, mlp.ffn_hidden, mlp.gated)
    elif isinstance(mlp, MoE):
        parts["expert_flops"] = mlp.top_k * _ffn_fwd(hidden, mlp.expert_ffn_hidden, mlp.gated)
        parts["shared_expert_flops"] = _ffn_fwd(hidden, mlp.shared_ffn_hidden, mlp.gated)
    return LayerFlops(**parts)


def logits_fwd_flops(spec: ModelSpec, tp: int = 1) -> float:
    """Output layer GEMM, forward, per token (padded vocabulary)."""
    return 2.0 * spec.hidden * padded_vocab(spec.vocab, tp)


def mtp_extra_fwd_flops(spec: ModelSpec) -> float:
    """Per MTP module, besides its transformer layer and logits: eh_proj (2h -> h) and 3 norms, as
    Megatron counts them (2 x (3h + 2h^2))."""
    h = spec.hidden
    return 2.0 * (3 * h + 2 * h * h)


@dataclass(frozen=True)
class FlopsPerToken:
    """Training (fwd + bwd) FLOPs per token. ``gemm_flops`` holds every GEMM (projections, MLPs,
    experts, logits, MTP projections); ``attention_flops`` the causal score/context products;
    ``linear_attention_flops`` the Gated DeltaNet conv and recurrence."""

    seq_len: int
    gemm_flops: float
    attention_flops: float
    linear_attention_flops: float
    logits_flops: float

    @property
    def total_flops(self) -> float:
        return self.gemm_flops + self.attention_flops + self.linear_attention_flops

    @property
    def attention_share(self) -> float:
        return self.attention_flops / self.total_flops


def all_layers(spec: ModelSpec) -> list[tuple[Layer, int]]:
    """Main layers plus MTP layers, grouped."""
    groups = spec.layer_groups()
    if spec.mtp_layers and spec.mtp_layer is not None:
        groups = groups + [(spec.mtp_layer, spec.mtp_layers)]
    return groups


def flops_per_token(spec: ModelSpec, seq_len: int, tp: int = 1) -> FlopsPerToken:
    """Megatron-Core's training FLOPs per token at sequence length ``seq_len``."""
    gemm = attn = lin = 0.0
    for layer, count in all_layers(spec):
        f = layer_flops(layer, spec.hidden, seq_len)
        gemm += f.gemm_flops * count
        attn += f.attn_core_flops * count
        lin += f.gdn_core_flops * count
    logits = logits_fwd_flops(spec, tp) * (1 + spec.mtp_layers)
    gemm += logits + mtp_extra_fwd_flops(spec) * spec.mtp_layers
    m = TRAIN_MULTIPLIER
    return FlopsPerToken(seq_len, gemm * m, attn * m, lin * m, logits * m)
