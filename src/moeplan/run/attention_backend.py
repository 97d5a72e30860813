"""Which attention backend Transformer Engine trains a layer with on a GPU: the one predicate the timing
model (moeplan.engine.timing: kernel rates), the memory model (moeplan.engine.activations.unfused_attention_bytes: the
score matrices of the unfused path) and the layout rules (moeplan.run.parallel.check_layout: no context
parallelism on the unfused path) all key on."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from moeplan.base.te_release import DEFAULT_TE_VERSION, TE_RELEASES, hopper_attention

if TYPE_CHECKING:
    from moeplan.hardware.spec import GPUSpec
    from moeplan.models.spec import Attention

# Whether cuDNN fused attention trains d_qk = d_v = 256 on sm100..sm10x, per TE release: a view of the ONE table
# of TE releases, moeplan.base.te_release.TE_RELEASES (wide_head_cudnn; PR #3056, cuDNN 9.23, from TE 2.19). The fix
# also needs the container's cuDNN >= 9.23: moeplan assumes a TE 2.19 container ships one. TE then prefers
# FusedAttention over FlashAttention on Hopper+ (pytorch/attention/dot_product_attention/utils.py
# get_attention_backend), so cuDNN trains the layer.
TE_WIDE_HEAD_CUDNN: dict[str, bool] = {v: r.wide_head_cudnn for v, r in TE_RELEASES.items()}
TE_WIDE_HEAD_FIX_VERSION = next(v for v, fixed in TE_WIDE_HEAD_CUDNN.items() if fixed)
# What lifts the wide-head limits below, for the messages that hit them.
TE_WIDE_HEAD_FIX = (f"TE PR #3056 (cuDNN 9.23) trains it with cuDNN fused attention from TE {TE_WIDE_HEAD_FIX_VERSION}: "
                    f"pass --te-version {TE_WIDE_HEAD_FIX_VERSION} if you run it")

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
HOPPER_ARCH = 90  # sm90: the GPUs whose attention kernel class depends on the TE release (TERelease.hopper_attention)
FA2_MAX_HEAD_DIM = 256
CUDNN_WIDE_HEAD_DIM = 256  # PR #3056: exactly d_qk = d_v = 256, on sm_arch >= 100 and < 110
CUDNN_WIDE_HEAD_ARCH_END = 110
FA2_WIDE_HEAD_DIM = 192  # above it FlashAttention-2 needs one of FA2_WIDE_HEAD_ARCHS
FA2_WIDE_HEAD_ARCHS = (80, 90, 100, 120)
# Equal head dims above which FlashAttention-2 and cuDNN run their wide-head tile configurations (FA2: the hdim
# 160 / 192 / 224 / 256 instantiations of flash_fwd_launch_template.h / flash_bwd_launch_template.h, with smaller
# key / query blocks than hdim 128's), at the calibration's attn_wide_*_share; measured at 256, the one wide equal
# head dim in the catalog.
WIDE_HEAD_KERNEL_ABOVE = 128


# Attention sinks (gpt-oss: one learned logit per head, Megatron-Core ``softmax_type = "learnable"``, which Bridge's
# gpt_oss_bridge sets; TE DotProductAttention ``softmax_type``, TE >= 2.8). TE get_attention_backend (pytorch/
# attention/dot_product_attention/utils.py, "Filter: Softmax type", v2.14 .. v2.18): FlashAttention is disabled for
# any softmax_type but vanilla; FusedAttention and UnfusedDotProductAttention remain; under context parallelism only
# FusedAttention, and only with cp_comm_type a2a. cuDNN fused attention (F16_arbitrary_seqlen) takes off-by-one and
# learnable softmax from cuDNN 9.13.1 (common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend, "softmax type");
# every container of the recipes ships a newer one (26.02: 9.18, 26.04: 9.20, 26.06: 9.21.1; Bridge docs/releases/
# software-versions.md), so moeplan models no cuDNN version. TE PR #3056's d = 256 Blackwell kernel is vanilla only.
SINK_SOFTMAX_TYPE = "learnable"
SINK_CP_COMM_TYPE = "a2a"


def softmax_type(mixer: Attention) -> str:
    """Megatron-Core ``softmax_type`` of the layer: ``learnable`` with attention sinks, else ``vanilla``."""
    return SINK_SOFTMAX_TYPE if mixer.sink_logits else "vanilla"


def sink_cp_comm_ok(mixer: Attention, cp: int, comm_type: str) -> bool:
    """Whether TE has an attention backend for this layer under context parallelism ``cp`` with ``comm_type``:
    with sinks only FusedAttention runs under CP, and only with a2a (utils.py: "Disabling FusedAttention for context
    parallelism with softmax_type = %s and cp_comm_type = %s"; Bridge's gpt-oss recipe sets cp_comm_type a2a for it)."""
    return cp <= 1 or softmax_type(mixer) == "vanilla" or comm_type == SINK_CP_COMM_TYPE


def heads_split(mixer: Attention, tp: int, parts: int) -> bool:
    """Whether a2a (Ulysses) context parallelism over ``parts`` ranks can split this layer's heads after TP: the
    attention heads / TP and the KV heads / TP (MLA: its heads) must divide by ``parts`` (Megatron-Core cp_comm_type
    a2a, TransformerEngine attention/dot_product_attention/context_parallel.py AttnFuncWithCPAndQKVOA2A)."""
    kv = mixer.num_heads if mixer.is_mla else mixer.num_kv_heads
    return (mixer.num_heads // tp) % parts == 0 and max(1, kv // tp) % parts == 0


def attention_kernel(mixer: Attention, gpu: GPUSpec | None = None, te_version: str | None = None) -> str:
    """Which attention kernel family trains the layer on ``gpu``. Equal q/k and v head dims: FlashAttention-3
    on Hopper (``flash``; TE prefers cuDNN's equivalent where both run, same family of rates), and on
    Blackwell up to head dim 128 (cuDNN's Blackwell kernels, costed with the same constants); MLA's 192-wide
    q/k with 128-wide v: cuDNN fused attention (``cudnn_mla``: TE rules flash-attn out for head_dim_qk !=
    head_dim_v). Wider equal heads on Blackwell (Qwen3-Next's 256) have no cuDNN training kernel in the TE the
    recipes ran (see CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM): FlashAttention-2 where TE allows it (``flash2``, sm100),
    else TE's unfused attention (``unfused``: B300 / GB300 are sm103). At a ``te_version`` whose row in
    TE_WIDE_HEAD_CUDNN is True, cuDNN trains d = 256 on sm10x (``flash`` rates, as for d <= 128). With attention
    sinks (:func:`softmax_type` learnable) FlashAttention is out and PR #3056's kernel is vanilla only, so the
    wide heads that FlashAttention-2 or that kernel would train fall to ``unfused``; heads cuDNN trains (Hopper,
    Blackwell d <= 128: gpt-oss's 64) stay on cuDNN, sinks and sliding window in the kernel. On Hopper (sm90),
    equal heads up to 128 take the release's Hopper class (``flash2`` for TE 1.3, whose container's cuDNN kernel is
    costed at FlashAttention-2's Hopper rates: moeplan.base.te_release). ``gpu`` None or without a compute
    capability: the Hopper choice of the current releases; ``te_version`` None: DEFAULT_TE_VERSION."""
    d_qk, d_v = mixer.head_dims
    if d_qk != d_v or mixer.sparse is not None or mixer.compressed is not None:
        # DeepSeek sparse attention is not TE's DotProductAttention: Megatron-Core's DSAttention runs its own
        # absorbed-MLA kernels (dsa_kernel_backend cudnn / tilelang), costed at cuDNN's fused MLA rates (moeplan.engine.dsa);
        # DeepSeek-V4's dsv4_hybrid attention likewise runs its own sparse MLA kernels (cuDNN frontend / FlashMLA;
        # transformer_config.py: "dsv4_hybrid does not support dsa_kernel_backend='tilelang'"), at the same rates
        return "cudnn_mla"
    arch = gpu.sm_arch if gpu is not None else None
    if arch == HOPPER_ARCH and d_qk <= CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM:
        # the release's Hopper kernel class (moeplan.base.te_release.TERelease.hopper_attention: TE 1.3's is flash2)
        return hopper_attention(te_version)
    if arch is None or arch < 100 or d_qk <= CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM:
        return "flash"
    vanilla = softmax_type(mixer) == "vanilla"
    if (vanilla and d_qk == CUDNN_WIDE_HEAD_DIM and arch < CUDNN_WIDE_HEAD_ARCH_END
            and TE_WIDE_HEAD_CUDNN[te_version or DEFAULT_TE_VERSION]):
        return "flash"
    if vanilla and (d_qk <= FA2_WIDE_HEAD_DIM or (d_qk <= FA2_MAX_HEAD_DIM and arch in FA2_WIDE_HEAD_ARCHS)):
        return "flash2"
    return "unfused"


def attention_kernel_mixer(mixer: Attention, gpu: GPUSpec | None, te_version: str | None = None) -> Attention:
    """The layer as its kernel computes it: TE's UnfusedDotProductAttention turns a sliding window into an
    'arbitrary' [s, s] mask over the full score square (utils.py, "Filter: Sliding window attention": "converts
    window_size to an 'arbitrary' mask"; backends.py multiplies the whole square), so it costs the layer's FLOPs
    without the window; cuDNN and FlashAttention bound their key loops by the window (the block rate of
    moeplan.engine.timing.attention_block_tokens then prices the short blocks)."""
    if mixer.sliding_window and attention_kernel(mixer, gpu, te_version) == "unfused":
        return replace(mixer, sliding_window=None)
    return mixer


def unfused_attention(mixer: Attention, gpu: GPUSpec | None, te_version: str | None = None) -> bool:
    """Whether TE ``te_version`` runs this layer with UnfusedDotProductAttention on ``gpu`` (``attention_kernel``)."""
    return attention_kernel(mixer, gpu, te_version) == "unfused"


__all__ = ["CUDNN_BLACKWELL_TRAIN_MAX_HEAD_DIM", "CUDNN_WIDE_HEAD_ARCH_END", "CUDNN_WIDE_HEAD_DIM",
           "FA2_MAX_HEAD_DIM", "FA2_WIDE_HEAD_ARCHS", "heads_split", "FA2_WIDE_HEAD_DIM", "WIDE_HEAD_KERNEL_ABOVE", "SINK_CP_COMM_TYPE", "SINK_SOFTMAX_TYPE", "TE_WIDE_HEAD_CUDNN",
           "TE_WIDE_HEAD_FIX", "TE_WIDE_HEAD_FIX_VERSION", "attention_kernel", "attention_kernel_mixer", "sink_cp_comm_ok", "softmax_type", "unfused_attention"]
