"""Activation tensors saved for backward, per token, module by module.

The tally follows Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198, section 4 and Table 2; also megatron/training/theoretical_memory_usage.py), with
flash attention (no s x s matrix: q, k, v, output and fp32 softmax statistics are kept), no dropout,
sequence parallel (every tensor divided by TP), and Megatron-Core's memory-efficient token
permutation (routing probabilities applied inside the expert activation, so the expert FC2 output
is not kept; megatron/core/transformer/moe/README.md). Each tensor names the Megatron-Core
``recompute_modules`` labels that stop keeping it and the ``offload_modules`` label that moves it to
the host. Sizes are elements; ``scope`` says what they multiply:
- ``token``: per token of the attention layout (mbs x seq / (CP x TP) per GPU);
- ``row``: per routed (token, expert) row on the expert layout; ``ffn_split`` marks FFN-wide tensors
  that ETP divides.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from moeplan.base.router_dtype import ROUTER_LOGIT_BYTES
from moeplan.base.vocab import DISPATCHERS, FLEX_DISPATCHERS
from moeplan.engine import compressed_attention as v4attn, hyper_connections as mhc
from moeplan.engine.dsa import indexer_saved_elems
from moeplan.engine.latent_moe import expert_width
from moeplan.engine.mamba import mamba_saved_elems
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, Mamba2, ModelSpec, MoE
from moeplan.run.attention_backend import unfused_attention

if TYPE_CHECKING:
    from moeplan.hardware.spec import GPUSpec
    from moeplan.run.config import RunConfig

BF16_BYTES = 2
FP32_BYTES = 4
FP8_BYTES = 1
MXFP8_SCALE_BYTES_PER_ELEM = 1 / 32  # one e8m0 scale per 32 elements (OCP MX spec v1.0)
# NVFP4 (TE NVFP4BlockScaling): e2m1 values, two per byte, and one e4m3 scale per 16-element block (NVIDIA
# "Pretraining LLMs with NVFP4", arXiv 2509.25149, section 2; the per-tensor fp32 scale is negligible).
NVFP4_BYTES_PER_ELEM = 0.5 + 1 / 16
GDN_CHUNK_TOKENS = 64  # chunk size of the chunked gated delta rule kernels (fla-org, chunk_gated_delta_rule)


@dataclass(frozen=True)
class SavedTensor:
    name: str
    elems: float
    scope: Literal["token", "row"] = "token"
    elem_bytes: float = BF16_BYTES
    gemm_input: bool = False  # kept in FP8 (plus scales for MXFP8) when training in FP8
    dropped_by: frozenset[str] = frozenset()
    offload: str | None = None
    ffn_split: bool = False  # FFN-wide expert tensor: divided by ETP

    def nbytes(self, fp8: str | None) -> float:
        """Bytes per element-unit; ``fp8`` is None (bf16), 'fp8' or 'mxfp8'."""
        if self.gemm_input and fp8:
            per = (NVFP4_BYTES_PER_ELEM if fp8 == "nvfp4"
                   else FP8_BYTES + (MXFP8_SCALE_BYTES_PER_ELEM if fp8 == "mxfp8" else 0.0))
            return self.elems * per
        return self.elems * self.elem_bytes


def _f(*labels: str) -> frozenset[str]:
    return frozenset(labels)


def _norm(prefix: str, h: int, offload: str) -> list[SavedTensor]:
    """RMSNorm: keeps its input (the residual stream) and, unless 'layernorm' is recomputed (output
    discarded, rebuilt in backward), its output, which is the next GEMM's input."""
    return [
        SavedTensor(f"{prefix}_norm_in", h, offload=offload),
        SavedTensor(f"{prefix}_norm_out", h, gemm_input=True, dropped_by=_f("layernorm"),
                    offload="qkv_linear" if prefix == "attn" else None),
    ]


def attn_softmax_stats(a: Attention) -> SavedTensor:
    """The fused attention kernels' fp32 softmax statistics (log-sum-exp), one per head and token, kept for
    backward; core_attn recompute drops them (TE's UnfusedDotProductAttention keeps none)."""
    return SavedTensor("attn_softmax_stats", a.num_heads, elem_bytes=FP32_BYTES, dropped_by=_f("core_attn"))


def _attention(a: Attention, h: int) -> list[SavedTensor]:
    out = _norm("attn", h, "attn_norm")
    if a.compressed is not None:  # DeepSeek-V4 hybrid attention (moeplan.engine.compressed_attention)
        out += [SavedTensor(name, elems, elem_bytes=nb, gemm_input=gi, dropped_by=_f(drop) if drop else frozenset())
                for name, elems, nb, gi, drop in v4attn.saved_elems(a, h)]
        out.append(attn_softmax_stats(a))
        return out
    if a.is_mla:
        n = a.num_heads
        q_lat = a.q_lora_rank or 0
        # Down projections (latents) and their norms; q_b/kv_b (up) inputs.
        out.append(SavedTensor("mla_q_latent", 2 * q_lat, gemm_input=True))
        out.append(SavedTensor("mla_kv_latent", a.kv_lora_rank + a.qk_rope_head_dim + a.kv_lora_rank, gemm_input=True))
        # Up projections + RoPE outputs: q and k of width nope+rope per head. 'mla_up_proj' discards
        # them and rebuilds them in backward (MLA up projection and RoPE application).
        out.append(SavedTensor("mla_qk", 2 * n * a.head_dim, dropped_by=_f("mla_up_proj"), offload="core_attn"))
        out.append(SavedTensor("mla_v", n * a.v_head_dim, offload="core_attn"))
        out.append(attn_softmax_stats(a))
        out.append(SavedTensor("attn_out", n * a.v_head_dim, gemm_input=True, offload="attn_proj"))
        if a.sparse is not None:  # DSA lightning indexer's tensors (moeplan.engine.dsa)
            out += [SavedTensor(name, elems, elem_bytes=nb) for name, elems, nb in indexer_saved_elems(a.sparse)]
        return out
    q = a.num_heads * a.head_dim
    kv = a.num_kv_heads * a.head_dim
    if a.qk_norm:  # q_norm/k_norm keep their inputs (the q, k projections)
        out.append(SavedTensor("qk_norm_in", q + kv))
    out.append(SavedTensor("qkv", q + 2 * kv, offload="core_attn"))
    out.append(attn_softmax_stats(a))
    out.append(SavedTensor("attn_out", q, gemm_input=not a.output_gate, offload="attn_proj"))
    if a.output_gate:  # sigmoid gate input and the gated output (the o_proj input)
        out.append(SavedTensor("attn_gate", q))
        out.append(SavedTensor("attn_gated_out", q, gemm_input=True))
    return out


def _gdn(g: GatedDeltaNet, h: int) -> list[SavedTensor]:
    out = _norm("attn", h, "attn_norm")
    out.append(SavedTensor("gdn_in_proj_out", g.in_proj_dim))
    out.append(SavedTensor("gdn_conv_out", g.conv_dim))
    out.append(SavedTensor("gdn_qk_l2norm", 2 * g.key_dim))
    # fp32 chunk-local intra-chunk matrices (one GDN_CHUNK_TOKENS row per value head per token)
    out.append(SavedTensor("gdn_chunk_aux", g.num_value_heads * GDN_CHUNK_TOKENS, elem_bytes=FP32_BYTES))
    out.append(SavedTensor("gdn_core_out", g.value_dim))
    out.append(SavedTensor("gdn_norm_out", g.value_dim, gemm_input=True, dropped_by=_f("gdn_norm_out")))
    return out


def _dense_mlp(m: DenseMLP, h: int) -> list[SavedTensor]:
    out = _norm("mlp", h, "mlp_norm")
    fc1 = m.ffn_hidden * (2 if m.gated else 1)
    out.append(SavedTensor("mlp_fc1_out", fc1, dropped_by=_f("mlp")))
    out.append(SavedTensor("mlp_act_out", m.ffn_hidden, gemm_input=True, dropped_by=_f("mlp")))
    return out


# The dtype of the routed probabilities the experts see: DeepEP and HybridEP take fp32 only (Megatron-Core
# token_dispatcher.py: "HybridEP only supports float32 probs" / "DeepEP only supports float32 probs", cast with
# .float()); alltoall / allgather keep the router's dtype, bf16 for gpt-oss (router.py: the input dtype unless
# moe_router_dtype is set, which Bridge's gpt_oss_bridge leaves unset).
def expert_probs_bytes(dispatcher: str) -> int:
    """Bytes per element of the permuted probabilities under ``dispatcher``."""
    return FP32_BYTES if dispatcher in FLEX_DISPATCHERS else BF16_BYTES


# What the memory model saves per routed row for the probabilities: the activation layout does not depend on
# the dispatcher (its saved-tensor cache is shared across dispatchers), so it keeps the widest of expert_probs_bytes.
EXPERT_PROBS_SAVED_BYTES = max(expert_probs_bytes(d) for d in DISPATCHERS)


def _mamba(m: Mamba2, h: int) -> list[SavedTensor]:
    """The layer's pre-norm, fused into in_proj (TELayerNormColumnParallelLinear keeps its input and the normed
    GEMM input; the 'layernorm' label does not apply: moeplan.engine.mamba.MAMBA_SELECTIVE_LABELS), then the mixer's
    own tensors (moeplan.engine.mamba.mamba_saved_elems)."""
    out = [SavedTensor("mamba_norm_in", h), SavedTensor("mamba_ln_out", h, gemm_input=True)]
    out += [SavedTensor(name, elems, elem_bytes=b, gemm_input=g) for name, elems, b, g in mamba_saved_elems(m)]
    return out


def _moe(m: MoE, h: int, logit_bytes: int) -> list[SavedTensor]:
    out = _norm("mlp", h, "mlp_norm")
    moe = _f("moe")
    # Router: the logits in moe_router_dtype (moeplan.base.router_dtype) and the fp32 scores (sigmoid/softmax)
    # over all experts.
    out.append(SavedTensor("router_logits", m.num_experts, elem_bytes=logit_bytes, dropped_by=moe))
    out.append(SavedTensor("router_scores", m.num_experts, elem_bytes=FP32_BYTES, dropped_by=moe))
    fc1 = m.expert_ffn_hidden * (2 if m.gated else 1)
    if m.latent_size is not None:  # LatentMoE: fc2_latent_proj keeps its (combined, latent-wide) input per token;
        # fc1_latent_proj's input is the norm output above
        out.append(SavedTensor("latent_fc2_in", m.latent_size, gemm_input=True, dropped_by=moe))
    h = expert_width(m, h)  # what the experts take: the latent width under LatentMoE
    out.append(SavedTensor("expert_fc1_in", h, scope="row", gemm_input=True, dropped_by=moe, offload="expert_fc1"))
    out.append(SavedTensor("expert_probs", 1, scope="row", elem_bytes=EXPERT_PROBS_SAVED_BYTES, dropped_by=moe))
    out.append(SavedTensor("expert_fc1_out", fc1, scope="row", dropped_by=moe, offload="moe_act", ffn_split=True))
    out.append(SavedTensor("expert_act_out", m.expert_ffn_hidden, scope="row", gemm_input=True,
                           dropped_by=_f("moe", "moe_act"), ffn_split=True))
    if m.has_shared:
        drop = _f("moe", "shared_experts")
        sfc1 = m.shared_ffn_hidden * (2 if m.gated else 1)
        out.append(SavedTensor("shared_fc1_out", sfc1, dropped_by=drop))
        out.append(SavedTensor("shared_act_out", m.shared_ffn_hidden, gemm_input=True, dropped_by=drop))
    return out


@lru_cache(maxsize=256)
def layer_tensors(layer: Layer, hidden: int, router_logit_bytes: int = FP32_BYTES) -> tuple[SavedTensor, ...]:
    """Every tensor one layer keeps for backward when nothing is recomputed or offloaded; ``router_logit_bytes``:
    bytes per router logit (moeplan.base.router_dtype.ROUTER_LOGIT_BYTES; default fp32)."""
    m = layer.mixer
    mixer = ([] if m is None else _gdn(m, hidden) if isinstance(m, GatedDeltaNet)
             else _mamba(m, hidden) if isinstance(m, Mamba2) else _attention(m, hidden))
    mlp = ([] if layer.mlp is None else _dense_mlp(layer.mlp, hidden) if isinstance(layer.mlp, DenseMLP)
           else _moe(layer.mlp, hidden, router_logit_bytes))
    # mHC: each block's extra residual streams and coefficients (moeplan.engine.hyper_connections)
    hc = [SavedTensor(name, elems, elem_bytes=nb, dropped_by=_f(drop) if drop else frozenset())
          for _ in range(layer.blocks) for name, elems, nb, drop in mhc.saved_elems(layer.hc_mult, hidden)]
    return tuple(mixer + mlp + hc)


@dataclass(frozen=True)
class LayerActivation:
    """Saved bytes of one layer: per attention-layout token (already x 1, divide by TP x CP outside)
    and per routed row; plus what offloading moved to the host."""

    token_bytes: float
    row_bytes: float
    row_ffn_bytes: float  # part of row_bytes divided by ETP
    offloaded_token_bytes: float
    offloaded_row_bytes: float


# What the ``fused_group_mlp`` offload label moves (core_v0.19.0 megatron/core/transformer/moe/experts.py: the
# offload manager's saved-tensor hooks are on around the whole TE op-fuser grouped MLP, fc1 -> activation -> fc2,
# so every tensor it saves for backward goes to the host): fc1's input, the activation's input and fc2's input.
# The per-row probabilities (4 bytes a row) stay: below min_offloaded_tensor_size (1M elements) at the row
# counts of a micro-batch.
FUSED_GROUP_MLP_SAVED: frozenset[str] = frozenset({"expert_fc1_in", "expert_fc1_out", "expert_act_out"})


def _offloaded(t: SavedTensor, offload: frozenset[str]) -> bool:
    """Whether the offload labels ``offload`` move tensor ``t`` to the host."""
    return (t.offload is not None and t.offload in offload) or (
        "fused_group_mlp" in offload and t.name in FUSED_GROUP_MLP_SAVED)


@lru_cache(maxsize=8192)
def layer_activation(
    layer: Layer,
    hidden: int,
    recompute: frozenset[str],
    offload: frozenset[str],
    fp8: str | None,
    router_logit_bytes: int = FP32_BYTES,
) -> LayerActivation:
    """Bytes one layer keeps per token / per routed row under selective recompute ``recompute`` and
    fine-grained offloading ``offload``. Megatron-Core constraint: offloading moe_act/expert_fc1 is
    not done when 'moe' is recomputed (nothing of it is kept)."""
    tok = row = row_ffn = off_tok = off_row = 0.0
    for t in layer_tensors(layer, hidden, router_logit_bytes):
        if t.dropped_by & recompute:
            continue
        b = t.nbytes(fp8)
        if _offloaded(t, offload):
            if t.scope == "row":
                off_row += b
            else:
                off_tok += b
            continue
        if t.scope == "row":
            row += b
            if t.ffn_split:
                row_ffn += b
        else:
            tok += b
    return LayerActivation(tok, row, row_ffn, off_tok, off_row)


def fp8_kind(precision: str) -> str | None:
    """How a run's precision stores quantized GEMM inputs (SavedTensor.nbytes): None for BF16, else "mxfp8",
    "nvfp4" or "fp8" (per-tensor and blockwise scaling alike)."""
    if precision == "bf16":
        return None
    return precision if precision in ("mxfp8", "nvfp4") else "fp8"


def offloaded_layer_bytes(la: LayerActivation, layer: Layer, tokens: float, rows_factor: float, etp: int) -> float:
    """Bytes fine-grained offloading moves to the host for one layer and micro-batch on one GPU, before
    ``activation_offload_fraction``: the offloaded per-token bytes of ``la`` x ``tokens`` (attention-layout tokens
    per GPU) and, for an MoE layer, its offloaded per-row bytes x the routed rows (tokens x top-k x
    ``rows_factor`` x ETP, as the memory model counts them)."""
    off = la.offloaded_token_bytes * tokens
    if isinstance(layer.mlp, MoE):
        off += la.offloaded_row_bytes * tokens * layer.mlp.top_k * rows_factor * etp
    return off


def run_layer_activation(cfg: RunConfig, layer: Layer, modules: frozenset[str]) -> LayerActivation:
    """:func:`layer_activation` of ``layer`` in run ``cfg`` with ``modules`` recomputed (its hidden size, offload
    modules, quantized format and router-logit dtype)."""
    return layer_activation(layer, cfg.model.hidden, modules, cfg.offload_modules, fp8_kind(cfg.precision),
                            ROUTER_LOGIT_BYTES[cfg.mcore_router_dtype])


def offload_split_bytes(cfg: RunConfig, la: LayerActivation, layer: Layer, tokens: float) -> tuple[float, float]:
    """(stays on the GPU, leaves it) of the offload groups of one layer and micro-batch (:func:`offloaded_layer_bytes`
    of ``la``): activation_offload_fraction (core_v0.19.0) sends only that share of the groups to the host;
    Megatron-Core counts groups (fine_grained_activation_offload.py post-warmup), moeplan the bytes, so the rest
    stays kept. The one rule the memory model (what leaves the GPU) and the timing model's copies
    (moeplan.engine.timing.offload_act, through :func:`run_offloaded_layer_bytes`) read."""
    off = offloaded_layer_bytes(la, layer, tokens, cfg.rows_factor, cfg.parallel.etp)
    frac = cfg.activation_offload_fraction
    return (1.0 - frac) * off, frac * off


def run_offloaded_layer_bytes(cfg: RunConfig, layer: Layer, tokens: float) -> float:
    """The bytes of ``layer`` in run ``cfg`` that leave the GPU (:func:`offload_split_bytes`): what the memory model
    takes off the GPU and what the timing model's copies move (moeplan.engine.timing.offload_act). Nothing under
    full recompute, which keeps only the layer's input, or without ``offload_modules``."""
    rc = cfg.recompute
    if not cfg.offload_modules or rc.granularity == "full":
        return 0.0
    modules = rc.modules if rc.granularity == "selective" else frozenset()
    return offload_split_bytes(cfg, run_layer_activation(cfg, layer, modules), layer, tokens)[1]


def clamp_saved_row_bytes(m: MoE, etp: int = 1) -> float:
    """Bytes per routed row the clamped GLU (gpt-oss ``act_clamp``) keeps on Megatron-Core's unfused TEGroupedMLP
    path beyond ``expert_fc1_out``: weighted_bias_quick_geglu_impl (megatron/core/fusions/fused_bias_geglu.py)
    clamps views of the fc1 output in eager torch, so clamp's autograd keeps that output for clamp_backward while
    the fused activation saves the clamped torch.cat copy: a second bf16 [rows, 2F / ETP]. Discarded with it
    under selective ``moe`` / ``moe_act`` recompute; TE's op fuser (ScaledClampedQGeGLU) saves one input."""
    return 2 * m.expert_ffn_hidden / etp * BF16_BYTES if m.clamped_glu else 0.0


def gdn_saved_bytes(layer: Layer, hidden: int) -> float:
    """Bytes per token the Gated DeltaNet mixer keeps for backward (its ``gdn_*`` tensors, :func:`_gdn`): the part
    of the generic element-wise charge that moeplan.engine.timing.gdn_glue_bytes replaces op by op."""
    return sum(t.nbytes(None) for t in layer_tensors(layer, hidden) if t.name.startswith("gdn_"))


def layer_input_bytes(hidden: int) -> float:
    """What full recompute keeps per layer group: its bf16 input, per token."""
    return hidden * BF16_BYTES


# UnfusedDotProductAttention (Transformer Engine 71bbefb: transformer_engine/pytorch/attention/dot_product_attention/
# backends.py, softmax.py FusedScaleMaskSoftmax, utils.py get_full_mask) materialises the scores. Per layer and
# micro-batch on one GPU, with E = mbs x heads/TP x s x s score elements and M = s x s mask elements (s: the
# sequence a rank holds; TE runs this path only without CP):
# - get_full_mask (no_grad, first): int32 q-k position differences and the two int32 window bounds (12 M), then
#   three bool temporaries of the comparisons (3 M), leaving a bool [1, 1, s, s] mask (M);
# - baddbmm writes bf16 QK^T [b x np, s, s] (2 E); FusedScaleMaskSoftmax: below UNFUSED_FUSED_SOFTMAX_MAX_KEYS keys
#   (and 16 < sk, sk % 8 == 0, sq and b x np multiples of 4 and of the kernel's batches per block) TE's fused kernel
#   writes bf16 P (2 E), saved once by the softmax and the PV bmm (dropout p = 0 is the identity); otherwise the
#   torch path (softmax_in_fp32): an fp32 copy of the scores (4 E), masked in place (masked_fill_ keeps its own
#   logical_or of the mask with the process-wide cached causal mask: M saved, M cached), softmax saves its fp32
#   output (4 E) and the bf16 cast of it feeds the PV bmm, which saves it (2 E);
# - backward of the torch path peaks in the softmax backward: fp32 P, fp32 dP and fp32 dS (12 E; the bf16 P is
#   released after the PV bmm's backward); the fused path: bf16 P, dP and dS (6 E);
# - GQA: K and V are repeat_interleave'd to the query heads and the expanded copies are what baddbmm / bmm keep;
#   no softmax statistics (moeplan's attn_softmax_stats) are kept.
# An attention dropout > 0 (Qwen3-Next uses 0; moeplan models none) would add its mask and output.
UNFUSED_FUSED_SOFTMAX_MAX_KEYS = 16384  # softmax.py is_kernel_available: "16 < sk < 16384"
_SOFTMAX_THREADS_PER_WARP, _SOFTMAX_THREADS_PER_BLOCK = 32, 128  # softmax.py get_batch_per_block


@dataclass(frozen=True)
class UnfusedAttentionBytes:
    """One attention layer's UnfusedDotProductAttention memory for one micro-batch on one GPU."""

    saved_bytes: float  # kept for backward (scores, probabilities, mask, expanded K/V, less the softmax stats)
    peak_bytes: float  # the most the core attention holds at once, forward or backward, saved bytes included
    fused_softmax: bool  # TE's fused masked-softmax kernel ran (short keys), else the fp32 torch softmax


def unfused_softmax_is_fused(batches: int, sq: int, sk: int) -> bool:
    """FusedScaleMaskSoftmax.is_kernel_available for causal self-attention in bf16."""
    if not (16 < sk < UNFUSED_FUSED_SOFTMAX_MAX_KEYS) or sk % 8 or sq % 4 or batches % 4:
        return False
    pow2 = 1 << (sk - 1).bit_length()
    warp = min(pow2, _SOFTMAX_THREADS_PER_WARP)
    per_block = (_SOFTMAX_THREADS_PER_BLOCK // warp) * (2 if pow2 <= 128 else 1)
    return sq % per_block == 0


def unfused_softmax_keys(a: Attention, keys: int) -> int:
    """Keys the unfused path's softmax sees: the sink logit is one more column (TE backends.py torch.cat's it to
    the scores for softmax_type != vanilla), which also makes the mask 'arbitrary'."""
    return keys + 1 if a.sink_logits else keys


def unfused_square_softmax_is_fused(a: Attention, square: tuple[int, int]) -> bool:
    """Whether TE's fused masked-softmax kernel runs on layer ``a``'s unfused score square (batches, keys:
    :func:`unfused_score_square`), its sink column included (:func:`unfused_softmax_keys`)."""
    batches, keys = square
    return unfused_softmax_is_fused(batches, keys, unfused_softmax_keys(a, keys))


def unfused_score_square(a: Attention, mbs: int, seq_len: int, tp: int, cp: int = 1) -> tuple[int, int]:
    """(batches, keys) of the unfused path's score square on one GPU: micro-batch x heads per TP rank, and the
    sequence a CP rank holds (what :func:`unfused_square_softmax_is_fused` and the timing model's softmax bytes read)."""
    return mbs * a.num_heads // tp, seq_len // cp


@lru_cache(maxsize=256)
def first_unfused_attention(spec: ModelSpec, gpu: GPUSpec | None, te_version: str | None = None) -> Attention | None:
    """The first attention mixer of ``spec`` that Transformer Engine ``te_version`` trains on ``gpu`` with its
    UnfusedDotProductAttention (moeplan.run.attention_backend.unfused_attention), keeping s x s scores for
    backward; None where every layer runs a fused kernel, or without a GPU."""
    if gpu is None:
        return None
    return next((l.mixer for l in spec.distinct_layers
                 if isinstance(l.mixer, Attention) and unfused_attention(l.mixer, gpu, te_version)), None)


def keeps_unfused_scores(spec: ModelSpec, gpu: GPUSpec | None, te_version: str | None = None) -> bool:
    """Whether some layer keeps unfused-attention scores on ``gpu`` (:func:`first_unfused_attention`): then
    core_attn recompute is what frees them, at any length."""
    return first_unfused_attention(spec, gpu, te_version) is not None


def unfused_attention_bytes(a: Attention, mbs: int, seq_len: int, tp: int, cp: int = 1) -> UnfusedAttentionBytes:
    """What TE's UnfusedDotProductAttention keeps and peaks at for one layer and micro-batch on one GPU (see the
    comment above). ``cp`` > 1 is not a layout TE runs (moeplan.run.parallel.check_layout rejects it); the square
    is then the rank's local one."""
    s = seq_len / cp
    heads = a.num_heads / tp
    scores = mbs * heads * s * s  # E
    mask = s * s  # M
    kv_expanded = 2 * (a.num_heads - a.num_kv_heads) * a.head_dim * BF16_BYTES  # per token, beyond "qkv"
    per_token = kv_expanded - attn_softmax_stats(a).nbytes(None)  # ... and no softmax statistics
    token_bytes = per_token * mbs * s / tp
    mask_build = 15 * mask  # get_full_mask: 3 int32 + 3 bool temporaries, before K/V are expanded
    if unfused_square_softmax_is_fused(a, unfused_score_square(a, mbs, seq_len, tp, cp)):
        saved = 2 * scores
        # forward: bf16 S and P beside the mask; backward: bf16 P, dP, dS
        peak = max(mask_build, token_bytes + max(4 * scores + mask, 6 * scores))
        return UnfusedAttentionBytes(saved + token_bytes, peak, True)
    saved = 6 * scores + mask  # fp32 P + bf16 P + masked_fill_'s mask
    cached = mask  # the cached causal mask, live from the first call
    # forward at the bf16 cast: bf16 S, fp32 S, fp32 P, bf16 P and three masks; backward: fp32 P, dP, dS, two masks
    peak = max(mask_build + cached, token_bytes + 12 * scores + 3 * mask)
    return UnfusedAttentionBytes(saved + token_bytes, peak, False)
