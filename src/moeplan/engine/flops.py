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
Mamba-2 layers (hybrid stacks) are counted as Megatron's hybrid branch counts them (moeplan.engine.mamba
megatron_mamba_fwd_flops), LatentMoE experts at their latent width plus the two latent projections
(moeplan.engine.latent_moe), and a hybrid model's MTP modules without the eh projection and norms (the hybrid branch,
``hybrid_flops``, counts their layers and logits only).
Sliding-window layers (gpt-oss) count the keys each query sees inside its window (w - w^2/2s on
average once s > w) instead of s/2. DeepSeek sparse attention layers (GLM-5) count their top-k keys and the
lightning indexer as Megatron Bridge does (moeplan.engine.dsa).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from moeplan.engine.dsa import core_fwd_equiv_flops as dsa_core_fwd_equiv_flops, indexer_gemm_shapes, indexer_proj_fwd_correction
from moeplan.engine.latent_moe import expert_width, latent_proj_fwd_flops
from moeplan.engine.mamba import megatron_mamba_fwd_flops
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, Mamba2, ModelSpec, MoE

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron-LM --make-vocab-size-divisible-by default
TRAIN_MULTIPLIER = 3  # forward + backward (dgrad + wgrad), each the forward GEMM cost


def padded_vocab(vocab: int, tp: int = 1) -> int:
    """megatron/training/tokenizer: _vocab_size_with_padding (multiple of 128 x TP)."""
    multiple = MAKE_VOCAB_SIZE_DIVISIBLE_BY * tp
    return int(math.ceil(vocab / multiple) * multiple)


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM of a layer: per token (or per routed row) it multiplies a ``k``-vector by a
    ``k x n`` weight. ``split`` is the dimension tensor parallelism divides ('n' column-parallel,
    'k' row-parallel, '' replicated); expert GEMMs are divided by ETP, the others by TP."""

    name: str
    kind: Literal["attn", "gdn", "mamba", "mlp", "expert", "shared", "latent"]
    k: int
    n: int
    split: Literal["n", "k", ""] = "n"
    per_row: bool = False  # routed expert GEMM: once per (token, expert) row
    weights: int = 1  # weight matrices of this shape (experts of the layer)

    @property
    def fwd_flops(self) -> float:
        return 2.0 * self.k * self.n


def _attention_gemms(a: Attention, hidden: int) -> list[Gemm]:
    if a.is_mla:
        n = a.num_heads
        g = []
        if a.q_lora_rank is None:
            g.append(Gemm("q_proj", "attn", hidden, n * a.head_dim))
        else:
            g.append(Gemm("q_down", "attn", hidden, a.q_lora_rank, split=""))
            g.append(Gemm("q_up", "attn", a.q_lora_rank, n * a.head_dim))
        g.append(Gemm("kv_down", "attn", hidden, a.kv_lora_rank + a.qk_rope_head_dim, split=""))
        g.append(Gemm("kv_up", "attn", a.kv_lora_rank, n * (a.qk_nope_head_dim + a.v_head_dim)))
        g.append(Gemm("o_proj", "attn", n * a.v_head_dim, hidden, split="k"))
        # DSA lightning indexer (moeplan.engine.dsa), replicated across TP
        g += [Gemm(name, "attn", k, n_out, split="") for name, k, n_out in indexer_gemm_shapes(a, hidden)]
        return g
    q = a.num_heads * a.head_dim
    kv = a.num_kv_heads * a.head_dim
    gate = q if a.output_gate else 0  # gated attention: q_proj also emits the gate
    return [Gemm("qkv", "attn", hidden, q + gate + 2 * kv), Gemm("o_proj", "attn", q, hidden, split="k")]


def _gdn_gemms(g: GatedDeltaNet, hidden: int) -> list[Gemm]:
    return [
        Gemm("in_proj", "gdn", hidden, g.in_proj_dim),
        Gemm("out_proj", "gdn", g.value_dim, hidden, split="k"),
    ]


def _mamba_gemms(m: Mamba2, hidden: int) -> list[Gemm]:
    """in_proj (z, x, B, C, dt; column-parallel) and out_proj (row-parallel): megatron/core/ssm/mamba_mixer.py."""
    return [
        Gemm("mamba_in_proj", "mamba", hidden, m.in_proj_dim),
        Gemm("mamba_out_proj", "mamba", m.d_inner, hidden, split="k"),
    ]


def _ffn_gemms(name: str, kind: str, hidden: int, ffn: int, gated: bool, per_row: bool = False,
               weights: int = 1) -> list[Gemm]:
    fc1 = ffn * (2 if gated else 1)
    return [
        Gemm(f"{name}_fc1", kind, hidden, fc1, "n", per_row, weights),  # type: ignore[arg-type]
        Gemm(f"{name}_fc2", kind, ffn, hidden, "k", per_row, weights),  # type: ignore[arg-type]
    ]


@lru_cache(maxsize=1024)
def layer_gemms(layer: Layer, hidden: int) -> tuple[Gemm, ...]:
    """The weight GEMMs of one layer (shapes before any parallel split)."""
    mixer = layer.mixer
    if mixer is None:  # an MLP-only layer of a hybrid stack
        gemms = []
    elif isinstance(mixer, GatedDeltaNet):
        gemms = _gdn_gemms(mixer, hidden)
    elif isinstance(mixer, Mamba2):
        gemms = _mamba_gemms(mixer, hidden)
    else:
        gemms = _attention_gemms(mixer, hidden)
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        gemms += _ffn_gemms("mlp", "mlp", hidden, mlp.ffn_hidden, mlp.gated)
    elif isinstance(mlp, MoE):
        if mlp.latent_size is not None:  # LatentMoE: replicated ("duplicated") projections around the experts
            gemms += [Gemm("latent_fc1", "latent", hidden, mlp.latent_size, split=""),
                      Gemm("latent_fc2", "latent", mlp.latent_size, hidden, split="")]
        gemms += _ffn_gemms("expert", "expert", expert_width(mlp, hidden), mlp.expert_ffn_hidden, mlp.gated, True,
                            mlp.num_experts)
        if mlp.has_shared:
            gemms += _ffn_gemms("shared", "shared", hidden, mlp.shared_ffn_hidden, mlp.gated)
    return tuple(gemms)


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs per token of one layer, by kind of work (training cost is 3x each)."""

    attn_proj_flops: float = 0.0  # QKV / MLA down-up / output projections (GEMM)
    attn_core_flops: float = 0.0  # score + context products, causal (flash attention)
    gdn_proj_flops: float = 0.0  # Gated DeltaNet in/out projections (GEMM)
    gdn_core_flops: float = 0.0  # conv + chunked delta rule (constant per token)
    mamba_proj_flops: float = 0.0  # Mamba-2 in/out projections as Megatron counts them (moeplan.engine.mamba)
    mamba_core_flops: float = 0.0  # Mamba-2 SSD scan as Megatron counts it (7 d_in N)
    latent_proj_flops: float = 0.0  # LatentMoE fc1/fc2 latent projections (GEMM)
    dense_mlp_flops: float = 0.0
    expert_flops: float = 0.0  # routed experts, top-k of them (grouped GEMM)
    shared_expert_flops: float = 0.0

    @property
    def gemm_flops(self) -> float:
        return (
            self.attn_proj_flops + self.gdn_proj_flops + self.mamba_proj_flops + self.latent_proj_flops
            + self.dense_mlp_flops + self.expert_flops + self.shared_expert_flops
        )

    @property
    def total_flops(self) -> float:
        return self.gemm_flops + self.attn_core_flops + self.gdn_core_flops + self.mamba_core_flops


def attention_core_fwd_flops(a: Attention, seq_len: int) -> float:
    """Score + context forward FLOPs per token; causal counts half of the keys."""
    if a.sparse is not None:  # DSA: top-k attention plus the indexer's scoring (moeplan.engine.dsa)
        return dsa_core_fwd_equiv_flops(a, seq_len)
    keys = seq_len / 2  # causal: query i sees i keys, s/2 on average
    if a.sliding_window and seq_len > a.sliding_window:
        w = a.sliding_window  # the first w queries see i keys, the rest w: average w - w^2 / (2s)
        keys = w - w * w / (2 * seq_len)
    d_qk, d_v = a.head_dims
    return 2 * keys * a.num_heads * (d_qk + d_v)  # QK^T and AV, 2 FLOPs per MAC


def _mla_norm_fwd(a: Attention) -> float:
    """Megatron's MLA branch counts the q/kv low-rank norms as one extra column each ("+1")."""
    return 2.0 * ((a.q_lora_rank or 0) + a.kv_lora_rank) if a.is_mla else 0.0


def delta_rule_fwd_flops(value_heads: float, key_head_dim: int, value_head_dim: int) -> float:
    """Forward FLOPs per token of the chunked delta rule, as Megatron counts it: 4 state-sized products
    per value head (2 x 4 x n_v x d_k x d_v; megatron/training/training.py, gated-delta-net branch of
    ``num_floating_point_operations``, core_r0.16+). The state is d_k x d_v per head (Yang et al.,
    arXiv 2412.06464), so the cost per token does not depend on sequence length."""
    return 2 * 4 * value_heads * key_head_dim * value_head_dim


def _gdn_core_fwd(g: GatedDeltaNet) -> float:
    """Depthwise causal conv (2 x channels x kernel) and the chunked delta rule."""
    return 2 * g.conv_dim * g.conv_kernel + delta_rule_fwd_flops(g.num_value_heads, g.key_head_dim, g.value_head_dim)


@lru_cache(maxsize=4096)
def layer_flops(layer: Layer, hidden: int, seq_len: int) -> LayerFlops:
    """Forward FLOPs per token of one layer at sequence length ``seq_len``."""
    by_kind: dict[str, float] = {}
    top_k = layer.mlp.top_k if isinstance(layer.mlp, MoE) else 0
    for g in layer_gemms(layer, hidden):
        by_kind[g.kind] = by_kind.get(g.kind, 0.0) + g.fwd_flops * (top_k if g.per_row else 1)
    parts = {
        "attn_proj_flops": by_kind.get("attn", 0.0),
        "gdn_proj_flops": by_kind.get("gdn", 0.0),
        "dense_mlp_flops": by_kind.get("mlp", 0.0),
        "expert_flops": by_kind.get("expert", 0.0),
        "shared_expert_flops": by_kind.get("shared", 0.0),
    }
    if isinstance(layer.mlp, MoE) and layer.mlp.latent_size is not None:
        parts["latent_proj_flops"] = latent_proj_fwd_flops(layer.mlp, hidden)
    if layer.mixer is None:
        pass
    elif isinstance(layer.mixer, GatedDeltaNet):
        parts["gdn_core_flops"] = _gdn_core_fwd(layer.mixer)
    elif isinstance(layer.mixer, Mamba2):
        parts["mamba_proj_flops"], parts["mamba_core_flops"] = megatron_mamba_fwd_flops(layer.mixer, hidden)
    else:
        parts["attn_proj_flops"] += _mla_norm_fwd(layer.mixer) + indexer_proj_fwd_correction(layer.mixer, hidden)
        parts["attn_core_flops"] = attention_core_fwd_flops(layer.mixer, seq_len)
    return LayerFlops(**parts)


def logits_gemm(spec: ModelSpec, tp: int = 1) -> Gemm:
    """Output layer GEMM on the padded vocabulary (vocab-parallel over TP)."""
    return Gemm("logits", "mlp", spec.hidden, padded_vocab(spec.vocab, tp))


def mtp_eh_proj_gemm(spec: ModelSpec) -> Gemm:
    """MTP module projection of [embedding; hidden] (2h -> h)."""
    return Gemm("eh_proj", "mlp", 2 * spec.hidden, spec.hidden)


def logits_fwd_flops(spec: ModelSpec, tp: int = 1) -> float:
    """Output layer GEMM, forward, per token (padded vocabulary)."""
    return logits_gemm(spec, tp).fwd_flops


def mtp_extra_fwd_flops(spec: ModelSpec) -> float:
    """Per MTP module, besides its transformer layer and logits: eh_proj (2h -> h) and 3 norms, as
    Megatron counts them (2 x (3h + 2h^2))."""
    return mtp_eh_proj_gemm(spec).fwd_flops + 2.0 * 3 * spec.hidden


@dataclass(frozen=True)
class FlopsPerToken:
    """Training (fwd + bwd) FLOPs per token. ``gemm_flops`` holds every GEMM (projections, MLPs,
    experts, logits, MTP projections); ``attention_flops`` the causal score/context products;
    ``linear_attention_flops`` the Gated DeltaNet conv and recurrence and the Mamba-2 scan."""

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


@lru_cache(maxsize=1024)
def flops_per_token(spec: ModelSpec, seq_len: int, tp: int = 1) -> FlopsPerToken:
    """Megatron-Core's training FLOPs per token at sequence length ``seq_len``."""
    gemm = attn = lin = 0.0
    for layer, count in all_layers(spec):
        f = layer_flops(layer, spec.hidden, seq_len)
        gemm += f.gemm_flops * count
        attn += f.attn_core_flops * count
        lin += (f.gdn_core_flops + f.mamba_core_flops) * count
    logits = logits_fwd_flops(spec, tp) * (1 + spec.mtp_layers)
    # Megatron's hybrid branch (hybrid_flops) counts an MTP depth's layers and logits, not its eh_proj and norms
    gemm += logits + (0.0 if spec.hybrid_pattern else mtp_extra_fwd_flops(spec) * spec.mtp_layers)
    m = TRAIN_MULTIPLIER
    return FlopsPerToken(seq_len, gemm * m, attn * m, lin * m, logits * m)
