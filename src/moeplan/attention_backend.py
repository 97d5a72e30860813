"""Which attention backend Transformer Engine trains a layer with on a GPU: the one predicate the timing
model (moeplan.timing: kernel rates), the memory model (moeplan.activations.unfused_attention_bytes: the
score matrices of the unfused path) and the layout rules (moeplan.parallel.check_layout: no context
parallelism on the unfused path) all key on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moeplan.models.spec import Attention

if TYPE_CHECKING:
    from moeplan.hardware.spec import GPUSpec

TE_COMMIT = "71bbefb"  # the Transformer Engine the recipes ran (Bridge PR #3168's container, 2026-03-24)
# What lifts the wide-head limits below: TE PR #3056 (2026-07-31, cuDNN 9.23) trains head dim 256 on Blackwell
# with cuDNN fused attention. moeplan does not model that TE yet; messages that hit the limit say so.
TE_WIDE_HEAD_FIX = "TE PR #3056 (2026-07-31, cuDNN 9.23) trains it with cuDNN fused attention; moeplan models the older TE"

# Which fused-attention kernels Transformer Engine can TRAIN a head shape with on Blackwell, in the TE the
# shared runs' containers ship (Bridge PR #3168 pins TE 71bbefb, 2026-03-24; nothing newer ran a shared row):
# - cuDNN fused attention (F16_arbitrary_seqlen): on sm_arch >= 100 backward only for d_qk, d_v <= 128 or MLA's
#   192/128 (transformer_engine/common/fused_attn/fused_attn.cpp, nvte_get_fused_attn_backend); d = 256 backward
#   on Blackwell came with TE PR #3056 (2026-07-31, cuDNN 9.23);
# - FlashAttention-3 only on sm90, no FlashAttention-4 in that TE; FlashAttention-2 (Ampere mma.sync kernels)
#   up to head dim 256, above 192 only on these compute capabilities (pytorch/attention/dot_product_attention/
#   utils.py get_attention_backend: "head_dim_qk <= 256 (>192 requires sm80/90/100+)");
# - otherwise UnfusedDotProductAttention (full-square bmm and a fused causal softmax over materialised scores).
CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM = 128
FA2_MAX_HEAD_DIM = 256
FA2_WIDE_HEAD_DIM = 192  # above it FlashAttention-2 needs one of FA2_WIDE_HEAD_ARCHS
FA2_WIDE_HEAD_ARCHS = (80, 90, 100, 120)


def attention_kernel(mixer: Attention, gpu: GPUSpec | None = None) -> str:
    """Which attention kernel family trains the layer on ``gpu``. Equal q/k and v head dims: FlashAttention-3
    on Hopper (``flash``; TE prefers cuDNN's equivalent where both run, same family of rates), and on
    Blackwell up to head dim 128 (cuDNN's Blackwell kernels, costed with the same constants); MLA's 192-wide
    q/k with 128-wide v: cuDNN fused attention (``cudnn_mla``: TE rules flash-attn out for head_dim_qk !=
    head_dim_v). Wider equal heads on Blackwell (Qwen3-Next's 256) have no cuDNN training kernel in the TE the
    recipes ran (see CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM): FlashAttention-2 where TE allows it (``flash2``, sm100),
    else TE's unfused attention (``unfused``: B300 / GB300 are sm103). ``gpu`` None or without a compute
    capability: the Hopper choice."""
    d_qk, d_v = (mixer.head_dim, mixer.v_head_dim) if mixer.is_mla else (mixer.head_dim, mixer.head_dim)
    if d_qk != d_v:
        return "cudnn_mla"
    arch = gpu.sm_arch if gpu is not None else None
    if arch is None or arch < 100 or d_qk <= CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM:
        return "flash"
    if d_qk <= FA2_WIDE_HEAD_DIM or (d_qk <= FA2_MAX_HEAD_DIM and arch in FA2_WIDE_HEAD_ARCHS):
        return "flash2"
    return "unfused"



def unfused_attention(mixer: Attention, gpu: GPUSpec | None) -> bool:
    """Whether TE runs this layer with UnfusedDotProductAttention on ``gpu`` (``attention_kernel`` says so)."""
    return attention_kernel(mixer, gpu) == "unfused"


__all__ = ["CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM", "FA2_MAX_HEAD_DIM", "FA2_WIDE_HEAD_ARCHS", "FA2_WIDE_HEAD_DIM",
           "TE_COMMIT", "TE_WIDE_HEAD_FIX", "attention_kernel", "unfused_attention"]
