"""Attention time: the fused kernel's efficiency for the head shape and GPU, the unfused path's score traffic,
RoPE glue, and context-parallel communication (ring KV exchange, all-to-all) overlapped with attention."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.engine.activations import BF16_BYTES, unfused_score_square, unfused_square_softmax_is_fused
from moeplan.engine.dsa import cp_gathered_elems as dsa_cp_gathered_elems
from moeplan.engine.flops import attention_core_fwd_flops as _attention_core_flops_per_token
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.context import TRAIN, Ctx, gemm_rate, make_ctx
from moeplan.hardware import GPUSpec, load_gpu
from moeplan.models.spec import Attention
from moeplan.run.attention_backend import (WIDE_HEAD_KERNEL_ABOVE, attention_kernel, attention_kernel_mixer,
                                           heads_split, sink_cp_comm_ok)
from moeplan.run.config import RunConfig
from moeplan.run.dsa_rules import CP_COMM_TYPE as DSA_CP_COMM_TYPE
from moeplan.run.parallel import cp_ranks_per_domain, hierarchical_cp_inner


def cp_comm_allowed(mixer: Attention, tp: int, cp: int, comm_type: str, nvlink_domain: int) -> bool:
    """Whether a cp_comm_type works for this layer: a2a (Ulysses) splits heads over CP, so
    (heads / TP) and (KV heads / TP) must divide by CP; a2a+p2p does a2a inside the NVLink domain
    and p2p across (Megatron-Core cp_comm_type, TransformerEngine context parallel). Attention sinks leave
    a2a only (:func:`moeplan.run.attention_backend.sink_cp_comm_ok`)."""
    if not sink_cp_comm_ok(mixer, cp, comm_type):
        return False
    if comm_type in ("p2p", "allgather"):
        return True
    inner = cp if comm_type == "a2a" else hierarchical_cp_inner(tp, cp, nvlink_domain)
    if comm_type == "a2a+p2p" and (inner == cp or inner == 1):
        return False
    return heads_split(mixer, tp, inner)


def ring_ranks(cfg: RunConfig, nvlink_domain: int) -> int:
    """Ranks of the CP ring a sequence is split over (1: none; a2a / Ulysses keeps whole sequences; a2a+p2p rings
    across NVLink domains)."""
    par = cfg.parallel
    if par.cp <= 1 or cfg.cp_comm_type == "a2a":
        return 1
    return par.cp // hierarchical_cp_inner(par.tp, par.cp, nvlink_domain) if cfg.cp_comm_type == "a2a+p2p" else par.cp


def causal_part(cfg: RunConfig, mixer: Attention, nvlink_domain: int) -> tuple[float, float]:
    """(share of the layer's attention work, block length) run by causal kernel calls. Without a ring the whole
    sequence is one causal block. With ring CP (TE context_parallel.py AttnFuncWithCPAndKVP2P, load-balanced
    causal split: each rank holds 2 chunks of seq / (2 x ring) tokens) step 0 is one causal call over the rank's own
    seq / ring tokens, 1 / ring of its score elements; the ring - 1 other steps are non-causal calls (half the
    queries against all keys received, or all queries against half) on the seq / (2 x ring) blocks of
    :func:`attention_block_tokens`. A sliding window shorter than the block (a band mask, gpt-oss's and
    DeepSeek-V4's 128 tokens) is outside the causal measurement (full causal blocks of 1K-16K): its layers keep
    the non-causal ramp on window-long blocks, share 0."""
    ring = ring_ranks(cfg, nvlink_domain)
    length = float(cfg.batch.seq_len) / ring
    if mixer.sliding_window and mixer.sliding_window < length:
        return 0.0, float(mixer.sliding_window)
    return 1.0 / ring, length


def attention_block_tokens(cfg: RunConfig, mixer: Attention, nvlink_domain: int) -> float:
    """Length of the blocks one attention kernel call works on.

    Without CP (and with a2a/Ulysses CP, which splits heads and keeps whole sequences) a kernel sees
    the whole sequence. Ring CP (p2p, all-gather, and the across-domain part of a2a+p2p) splits each
    sequence into 2 x ring chunks (Megatron's load-balanced causal split) and runs one kernel per
    chunk pair. A sliding window caps how far a query block reaches."""
    seq = cfg.batch.seq_len
    ring = ring_ranks(cfg, nvlink_domain)
    length = seq / (2 * ring) if ring > 1 else float(seq)
    return min(length, mixer.sliding_window) if mixer.sliding_window else length


# HBM bytes per score element of UnfusedDotProductAttention (bf16 scores [b x heads, s, s]): forward, baddbmm
# writes QK^T, the causal softmax reads it and writes P, the PV bmm reads P; backward (autograd), the dP bmm
# writes dP, the softmax backward reads P and dP and writes dS, the dV bmm reads P, the dQ and dK bmms read dS
# (transformer_engine/pytorch/attention/dot_product_attention/backends.py UnfusedDotProductAttention). That is
# TE's fused masked-softmax kernel (softmax.py); from UNFUSED_FUSED_SOFTMAX_MAX_KEYS keys on (moeplan.engine.activations)
# the torch path runs instead, per score element: forward, baddbmm writes bf16 S (2), .float() reads it and writes
# fp32 (6), masked_fill_ in place (8), the fp32 softmax (8), the bf16 cast (6), the PV bmm reads P (2); backward,
# dP written (2), dV reads bf16 P (2), dP cast to fp32 (6), the fp32 softmax backward reads P and dP and writes dS
# (12), masked_fill's backward (8), the cast to bf16 (6), the dQ and dK bmms read dS (4).
UNFUSED_SCORE_BYTES = {"fwd": 4 * BF16_BYTES, "bwd": 7 * BF16_BYTES}
UNFUSED_FP32_SOFTMAX_SCORE_BYTES = {"fwd": 32, "bwd": 40}
# ... and per s x s mask element (divided over the batch x heads it masks): get_full_mask (TE 71bbefb
# dot_product_attention/utils.py, no_grad) builds it op by op: the int32 position differences arange - arange
# (write 4), swa_left and swa_right (read 4, write 4 each), their comparisons `<= 0` and `< 0` (read 4, write a
# bool each), `~` (read 1, write 1), `&` (read 2, write 1) and logical_not (read 1, write 1): 37 bytes. The fused
# masked softmax reads the bool mask (1); the torch path instead ORs it with the cached causal mask (read 2, write
# 1) and masked_fill_ reads it (1); masked_fill's backward reads it again (1).
_GET_FULL_MASK_BYTES = 4 + 2 * (4 + 4) + 2 * (4 + 1) + (1 + 1) + (2 + 1) + (1 + 1)
UNFUSED_MASK_BYTES = {"fused": {"fwd": _GET_FULL_MASK_BYTES + 1, "bwd": 0},
                      "fp32": {"fwd": _GET_FULL_MASK_BYTES + (2 + 1) + 1, "bwd": 1}}
# ... and with attention sinks (softmax_type != vanilla; backends.py UnfusedDotProductAttention.forward): the sink
# logit is torch.cat'ed to the scores as a last key column (read 2, write 2 per score), which takes the softmax to
# s + 1 keys and an 'arbitrary' mask (so to the fp32 torch path: s + 1 is no multiple of 8), and the probabilities
# are sliced back ([..., :-1]); backward, the slice's gradient is a zero-filled [.., s + 1] copy (write 2, read 2,
# write 2) and the cat's a narrow view.
UNFUSED_SINK_SCORE_BYTES = {"fwd": 4, "bwd": 6}


def attention_efficiency(mixer: Attention, cal: Calibration = DEFAULT_CALIBRATION,
                         gpu: GPUSpec | None = None, square: tuple[int, int] | None = None,
                         te_version: str | None = None, causal: bool = True,
                         fp8: bool = False) -> tuple[float, float, float]:
    """(forward, backward, fwd + bwd) share of the dense BF16 peak that attention reaches on long
    blocks on ``gpu`` (kernel family: :func:`attention_kernel` at ``te_version``), in the FLOPs Megatron counts (backward =
    2 x forward).

    Fused kernels: per causal score element the forward runs QK^T and PV (2 x (d_qk + d_v) FLOPs) and one
    softmax exponential; the backward recomputes S and P and runs dP, dV, dQ, dK (2 x (3 d_qk + 2 d_v) FLOPs)
    and one exponential (FlashAttention-2/3 algorithms: Dao 2023, arXiv 2307.08691; Shah et al. 2024,
    arXiv 2407.08608). The tensor-core work runs at ``attn_fwd_eff`` / ``attn_bwd_eff`` of peak per
    kernel family; each exponential costs ``attn_softmax_flops`` FLOP-equivalents of peak (H100: 989
    TFLOP/s of BF16 matmul against 3.9 T exponentials/s, FlashAttention-3 section 3.1), so wide heads
    amortise the softmax and run faster forward: FlashAttention-3 forward, H100, 16K, head dim 64 / 128 / 256:
    ~497 / 648 / 740 TFLOP/s (tests/data/fa3_forward_h100_headdim.csv; cuDNN's d = 256 forward measures 740 too).
    Their backward loses rate to smaller tiles (``attn_wide_bwd_share``, :func:`fused_attention_efficiency`).
    ``flash2`` is FlashAttention-2's
    mma.sync kernels, whose rate does not grow with Blackwell's tensor cores (B200: ~360 TFLOP/s forward,
    ~330 backward, tests/data/fa2_b200.csv).

    ``unfused``: TE's UnfusedDotProductAttention multiplies the whole s x s square (no causal skipping:
    two score elements per counted one) with batched bf16 GEMMs at the GPU's matmul rate (forward QK^T and
    PV, backward dP, dV, dQ, dK without recomputing S) and moves UNFUSED_SCORE_BYTES per score element
    through HBM at ``hbm_eff``; with ``square`` = (batch x heads per GPU, keys) also the masks' bytes, and from
    UNFUSED_FUSED_SOFTMAX_MAX_KEYS keys the torch fp32 softmax's UNFUSED_FP32_SOFTMAX_SCORE_BYTES.

    ``causal`` False: a fused kernel's non-causal calls (ring CP's off-diagonal steps), whose backward keeps
    ``attn_noncausal_bwd_share`` of its family's (:func:`fused_attention_efficiency`). ``fp8``: the run's FP8
    attention (:attr:`RunConfig.fp8_attention`), on the cuDNN families only (FP8_ATTENTION_FAMILIES)."""
    d_qk, d_v = mixer.head_dims
    kind = attention_kernel(mixer, gpu, te_version)
    if kind != "unfused":
        return fused_attention_efficiency(d_qk, d_v, kind, cal, gpu, causal, fp8)
    assert gpu is not None  # attention_kernel returns "unfused" only for a known compute capability
    fwd_mm = 2.0 * (d_qk + d_v)
    counted = fwd_mm  # Megatron's forward FLOPs per score; backward counts twice that
    peak = gpu.peak("bf16")
    mm_share = gemm_rate(gpu, "bf16") / peak
    byte = peak / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)  # FLOP-equivalents of peak per HBM byte
    moved = {"fwd": float(UNFUSED_SCORE_BYTES["fwd"]), "bwd": float(UNFUSED_SCORE_BYTES["bwd"])}
    if square is not None:
        batches = square[0]
        fused = unfused_square_softmax_is_fused(mixer, square)
        if not fused:
            moved = {k: float(v) for k, v in UNFUSED_FP32_SOFTMAX_SCORE_BYTES.items()}
        mask = UNFUSED_MASK_BYTES["fused" if fused else "fp32"]
        moved = {k: v + mask[k] / max(batches, 1) for k, v in moved.items()}
    if mixer.sink_logits:
        moved = {k: v + UNFUSED_SINK_SCORE_BYTES[k] for k, v in moved.items()}
    fwd_t = 2 * (fwd_mm / mm_share + moved["fwd"] * byte)
    bwd_t = 2 * (2 * fwd_mm / mm_share + moved["bwd"] * byte)
    return counted / fwd_t, 2 * counted / bwd_t, 3 * counted / (fwd_t + bwd_t)


# FlashAttention-2's mma.sync kernels reach about the same TFLOP/s on Hopper as on Blackwell (~320-360 forward at head
# dim 128: tests/data/attention_headdim_h200.csv, tests/data/fa2_b200.csv), so their share of the BF16 peak is
# ~2x higher on Hopper (989 TFLOP/s dense) than on B200 (2,250): the calibration keeps one pair of shares per
# architecture, ``flash2`` (sm100, from the B200 benchmarks) and this key (sm90, from the H200 table).
FLASH2_HOPPER_KEY = "flash2_sm90"


# cuDNN's fused-attention backward at equal heads <= 128 (the ``flash`` family) on Hopper has its own backward share,
# like FlashAttention-2 (FLASH2_HOPPER_KEY): Blackwell's BF16 peak is 2.25x Hopper's, and the runs on the two pin
# different shares of it (the H100 rows above 4K sit 7-16% faster than one share for both allows); the isolated
# kernel measures 0.65 of H200's peak causal at 8K-16K (tests/data/attention_headdim_h200.csv). Forward keeps one
# share (FlashAttention-3's, measured on H100).
FLASH_HOPPER_BWD_KEY = "flash_sm90"

# The one table of per-architecture keys: kernel family -> (forward key, backward key) of its rates on Hopper (sm90);
# a family not listed, or any other GPU, reads its own key both ways.
HOPPER_RATE_KEYS: dict[str, tuple[str, str]] = {"flash2": (FLASH2_HOPPER_KEY, FLASH2_HOPPER_KEY),
                                                "flash": ("flash", FLASH_HOPPER_BWD_KEY)}


def rate_keys(kind: str, gpu: GPUSpec | None) -> tuple[str, str]:
    """The calibration keys (forward, backward) of kernel family ``kind``'s rates on ``gpu`` (HOPPER_RATE_KEYS)."""
    if gpu is not None and gpu.sm_arch == 90:
        return HOPPER_RATE_KEYS.get(kind, (kind, kind))
    return kind, kind


def rate_key(kind: str, gpu: GPUSpec | None) -> str:
    """The forward key of :func:`rate_keys`: FLASH2_HOPPER_KEY for FlashAttention-2 on sm90 (see there), else
    ``kind``."""
    return rate_keys(kind, gpu)[0]


# The GPU attn_softmax_flops was measured on (FlashAttention-3's H100 sweep): its catalog per-clock rates are the
# reference of softmax_exp_share.
SOFTMAX_REF_GPU = "h100"


def _exp_cost(gpu: GPUSpec) -> float | None:
    """Tensor-core FLOPs per softmax exponential slot: the catalog's mma_bf16_flops_per_clk_sm / sfu_exp_per_clk_sm
    (None where the GPU's entry lacks either)."""
    if gpu.mma_bf16_flops_per_clk_sm is None or gpu.sfu_exp_per_clk_sm is None:
        return None
    return gpu.mma_bf16_flops_per_clk_sm / gpu.sfu_exp_per_clk_sm


@lru_cache(maxsize=1)
def _ref_exp_cost() -> float:
    ref = _exp_cost(load_gpu(SOFTMAX_REF_GPU))
    if ref is None:  # catalog data: the reference entry must carry both rates
        raise MoeplanError(f"hardware catalog: {SOFTMAX_REF_GPU} lacks mma_bf16_flops_per_clk_sm / sfu_exp_per_clk_sm")
    return ref


def softmax_exp_share(gpu: GPUSpec | None) -> float:
    """Cost of one softmax exponential in FLOP-equivalents of the GPU's BF16 peak, relative to Hopper's (where
    ``attn_softmax_flops`` was measured, SOFTMAX_REF_GPU): its tensor-core FLOPs per exponential slot (hardware
    catalog ``mma_bf16_flops_per_clk_sm`` / ``sfu_exp_per_clk_sm``) over the reference GPU's. Blackwell (B200 /
    GB200) doubled the tensor cores and kept the SFU: 2; Blackwell Ultra (B300 / GB300) doubled the SFU as well: 1.
    A GPU without those rates (loaded entries take their compute capability's from the catalog) keeps Hopper's ratio."""
    cost = _exp_cost(gpu) if gpu is not None else None
    return 1.0 if cost is None else cost / _ref_exp_cost()


# Kernel families that train in FP8 under Megatron's fp8_dot_product_attention: Transformer Engine runs FP8 attention
# only as cuDNN's FusedAttention (TE dot_product_attention/utils.py get_attention_backend: "Disabling FlashAttention
# 3 for FP8 training", FlashAttention 2 and UnfusedDotProductAttention "for FP8 attention"), which is what ``flash``
# (cuDNN's kernels on Blackwell, TE's preferred backend on Hopper) and ``cudnn_mla`` stand for. A layer whose shape
# only flash2 / unfused train (no cuDNN kernel for it in that TE) has no FP8 backend; moeplan keeps its BF16 rates.
FP8_ATTENTION_FAMILIES = frozenset({"flash", "cudnn_mla"})


def softmax_exp_flops(gpu: GPUSpec | None, cal: Calibration) -> float:
    """FLOP-equivalents of the GPU's BF16 peak that one softmax exponential costs per score element and pass:
    ``attn_softmax_flops`` (Hopper's) times :func:`softmax_exp_share`."""
    return cal.attn_softmax_flops * softmax_exp_share(gpu)


def fused_attention_efficiency(d_qk: int, d_v: int, kind: str, cal: Calibration = DEFAULT_CALIBRATION,
                               gpu: GPUSpec | None = None, causal: bool = True,
                               fp8: bool = False) -> tuple[float, float, float]:
    """:func:`attention_efficiency` of a fused kernel family ``kind`` (flash, cudnn_mla, flash2) at these head
    dims on ``gpu`` (its rates: :func:`rate_key`; None: the family's own key). Equal heads wider than
    WIDE_HEAD_KERNEL_ABOVE run the family's wide-head kernels at ``attn_wide_fwd_share`` / ``attn_wide_bwd_share``
    of its efficiency (measured on H200: tests/data/attention_headdim_h200.csv). ``causal`` False: a call without
    the causal mask, whose backward keeps ``attn_noncausal_bwd_share`` of the family's (1.0 where absent; measured
    on H200: tests/data/mla_attention_h200.csv, cuDNN's MLA-shaped backward ~305 TFLOP/s non-causal against ~500
    causal at 8K-16K).

    ``fp8`` (FP8 attention, a family of FP8_ATTENTION_FAMILIES on a GPU with FP8 tensor cores): cuDNN's FP8 kernels
    run QK^T, PV and the backward's dP, dV, dQ, dK on the FP8 tensor cores, at the family's shares of the FP8 peak
    (2x the BF16 one on Hopper and Blackwell; cuDNN FP8 fused attention keeps the scores and softmax in fp32), while
    the exponentials stay on the SFU at their own rate (:func:`softmax_exp_flops`): the softmax weighs twice as much,
    which is where Blackwell Ultra's doubled exponential rate shows (NVIDIA technical blog "Making Softmax More
    Efficient with NVIDIA Blackwell Ultra": ~35% more FP8 forward throughput on DeepSeek-V3's MLA on GB300 than on
    GB200)."""
    fwd_mm, bwd_mm = 2.0 * (d_qk + d_v), 2.0 * (3 * d_qk + 2 * d_v)
    counted = fwd_mm
    wide = d_qk == d_v > WIDE_HEAD_KERNEL_ABOVE
    key, bwd_key = rate_keys(kind, gpu)
    fwd_eff = cal.attn_fwd_eff[key] * (cal.attn_wide_fwd_share.get(kind, 1.0) if wide else 1.0)
    bwd_eff = cal.attn_bwd_eff[bwd_key] * (cal.attn_wide_bwd_share.get(kind, 1.0) if wide else 1.0)
    if not causal:
        bwd_eff *= cal.attn_noncausal_bwd_share.get(kind, 1.0)
    if fp8 and kind in FP8_ATTENTION_FAMILIES and gpu is not None and gpu.supports("fp8"):
        mm_speed = gpu.peak("fp8") / gpu.peak("bf16")
        fwd_eff, bwd_eff = fwd_eff * mm_speed, bwd_eff * mm_speed
    exp_flops = softmax_exp_flops(gpu, cal)
    fwd_t = fwd_mm / fwd_eff + exp_flops  # time per score, in 1 / peak
    bwd_t = bwd_mm / bwd_eff + exp_flops
    return counted / fwd_t, 2 * counted / bwd_t, 3 * counted / (fwd_t + bwd_t)


def attention_rate(cfg: RunConfig, gpu: GPUSpec, mixer: Attention, cal: Calibration = DEFAULT_CALIBRATION) -> float:
    """Achieved attention FLOP/s (fwd + bwd, Megatron's count) on this run's kernel blocks: the long-block rate times
    L / (L + h) per block, h = ``attn_half_tokens`` for non-causal blocks and ``attn_causal_half_tokens`` for the
    causal ones (:func:`causal_part`), time-weighted by their share of the work; the non-causal blocks (ring CP's
    off-diagonal steps) at the family's non-causal long-block rate (``attn_noncausal_bwd_share``). The unfused
    path multiplies the whole square (no causal skipping): its blocks take the non-causal ramp."""
    length = attention_block_tokens(cfg, mixer, gpu.nvlink_domain)
    par, batch = cfg.parallel, cfg.batch
    square = unfused_score_square(mixer, batch.mbs, batch.seq_len, par.tp, par.cp)
    fp8 = cfg.fp8_attention
    long_rate = gpu.peak("bf16") * attention_efficiency(mixer, cal, gpu, square, cfg.te_version, fp8=fp8)[2]
    if attention_kernel(mixer, gpu, cfg.te_version) == "unfused":
        return long_rate * length / (length + cal.attn_half_tokens)
    share, causal_len = causal_part(cfg, mixer, gpu.nvlink_domain)
    open_rate = gpu.peak("bf16") * attention_efficiency(mixer, cal, gpu, square, cfg.te_version, causal=False,
                                                        fp8=fp8)[2]
    slow = (share * (causal_len + cal.attn_causal_half_tokens) / causal_len
            + (1 - share) * (length + cal.attn_half_tokens) / length * long_rate / open_rate)  # per long-block time
    return long_rate / slow


def attention_s(ctx: Ctx, mixer: Attention) -> float:
    """Attention kernels of one layer, one micro-batch, fwd + bwd, at this run's block rate."""
    kernel = attention_kernel_mixer(mixer, ctx.gpu, ctx.cfg.te_version)
    flops = TRAIN * _attention_core_flops_per_token(kernel, ctx.cfg.batch.seq_len) * ctx.tokens
    return flops / attention_rate(ctx.cfg, ctx.gpu, kernel, ctx.cal)


def cp_comm(ctx: Ctx, mixer: Attention, attn_s: float) -> tuple[float, float]:
    """(exposed seconds fwd + bwd, forward share) of context-parallel attention for one layer.

    p2p (ring): CP - 1 steps, each sends this rank's K/V block (and dK/dV in backward) while
    computing attention on the block received, so a step costs max(comm, compute) (Liu et al.,
    "Ring Attention", arXiv 2310.01889). a2a (Ulysses, Jacobs et al. arXiv 2309.14509): all-to-all
    of q, k, v before and of the output after attention, not overlapped. a2a+p2p: a2a inside the
    NVLink domain, ring across domains on blocks that are a2a-group times larger.
    K/V of MLA are full per-head tensors after the up-projection."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    t = ctx.tokens
    if mixer.is_mla:
        kv_elems = mixer.num_heads * (mixer.head_dim + mixer.v_head_dim)
        q_elems = mixer.num_heads * mixer.head_dim
        o_elems = mixer.num_heads * mixer.v_head_dim
    else:
        kv_elems = 2 * mixer.num_kv_heads * mixer.head_dim
        q_elems = o_elems = mixer.num_heads * mixer.head_dim
    nvl = gpu.nvlink_bw_bytes_per_s * cal.nvlink_eff
    nic = gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff
    domain_cp = cp_ranks_per_domain(par.tp, par.cp, gpu.nvlink_domain)
    kind = cfg.cp_comm_type
    if mixer.sparse is not None:  # DSA: all-gather CP of the KV latent (+ indexer key) whatever the type (moeplan.engine.dsa)
        gathered = t * dsa_cp_gathered_elems(mixer) * BF16_BYTES * (par.cp - 1)
        link = nvl if par.cp <= domain_cp else nic
        return 3 * gathered / link, gathered / link

    def ring(steps: int, block_bytes: float, link: float, attn_total: float) -> tuple[float, float]:
        step_comm = 3 * block_bytes / link  # K/V forward; K/V + dK/dV backward
        step_attn = attn_total / (steps + 1)
        return steps * max(0.0, step_comm - step_attn), steps * max(0.0, block_bytes / link - step_attn / 3)

    def a2a(group: int) -> float:
        vol = (q_elems + kv_elems + o_elems) * t * BF16_BYTES * (group - 1) / group
        remote = max(0.0, 1.0 - domain_cp / group)
        return max(vol * (1 - remote) / nvl, vol * remote / nic)

    if kind == "p2p":
        return ring(par.cp - 1, t * kv_elems * BF16_BYTES, nvl if par.cp <= domain_cp else nic, attn_s)
    if kind == "a2a":
        one = a2a(par.cp)
        return 2 * one, one
    if kind == "a2a+p2p":
        inner = hierarchical_cp_inner(par.tp, par.cp, gpu.nvlink_domain)
        outer = par.cp // inner
        one = a2a(inner)
        r, r_fwd = ring(outer - 1, t * kv_elems * BF16_BYTES, nic, attn_s)
        return 2 * one + r, one + r_fwd
    # allgather: gather K/V of the whole sequence forward, reduce-scatter dK/dV backward
    gathered = t * kv_elems * BF16_BYTES * (par.cp - 1)
    link = nvl if par.cp <= domain_cp else nic
    return 3 * gathered / link, gathered / link


def best_cp_comm_type(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
                      layer_cache: dict[Any, dict[Any, Any]] | None = None) -> str:
    """The cp_comm_type with the least attention kernel time plus exposed CP communication over the
    model's attention layers (it changes nothing else), among those the heads allow. ``layer_cache``:
    the search's (:func:`estimate_time`); the choice reads layer costs only, so it is kept per shape."""
    par = cfg.parallel
    mixers = [m for m in cfg.model.distinct_mixers if isinstance(m, Attention)]
    if par.cp <= 1 or not mixers:
        return cfg.cp_comm_type
    if any(m.sparse is not None for m in mixers):  # DSA runs all-gather CP only (moeplan.run.dsa_rules)
        return DSA_CP_COMM_TYPE
    ctx = make_ctx(cfg, gpu, cal, layer_cache)
    hit = ctx.cache.get("best_cp_comm_type")
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    best, best_s = cfg.cp_comm_type, math.inf
    for kind in ("p2p", "a2a", "a2a+p2p"):
        if not all(cp_comm_allowed(m, par.tp, par.cp, kind, gpu.nvlink_domain) for m in mixers):
            continue
        c = replace(ctx, cfg=cfg.evolve(cp_comm_type=kind))  # one of the allowed values
        total = 0.0
        for m in mixers:
            attn_s = attention_s(c, m)
            total += attn_s + cp_comm(c, m, attn_s)[0]
        if total < best_s:
            best, best_s = kind, total
    ctx.cache["best_cp_comm_type"] = best
    return best


def rope_glue_bytes(mixer: Attention) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token (full q / k width: x attention-layout tokens per GPU, which TP
    divides) of Megatron-Core's eager RoPE beyond the fused kernel the generic element-wise term stands for.
    A YaRN concentration factor != 1 (``rope_mscale``: gpt-oss's 0.1 ln 32 + 1 = 1.35) takes apply_rotary_pos_emb
    off TE's fused RoPE ("mscale=... is not supported by TE's fused RoPE. Using unfused implementation.":
    megatron/core/models/common/embeddings/rope_utils.py, 0.17 .. 0.19) to _apply_rotary_pos_emb_bshd, op by op
    over E = (heads + KV heads) x head dim bf16 elements (q and k): forward _rotate_half (-x2: read and write
    E / 2; torch.cat: read and write E), t x cos, rot x sin (read and write E each), their sum (read 2E, write E)
    and the final torch.cat with the empty pass-through part (read and write E): 24E bytes; backward the two
    products' gradients (4E each), the negation's (2E) and the chunk's concatenation (4E) and the sum of the two
    gradients of t (6E): 20E (t[..., :rot_dim] spans the whole head, which torch indexing returns as is: no
    slice_backward); less the fused kernel's read and write of q, k each way (4E). MLA's RoPE (its own path)
    and mscale 1: 0."""
    if mixer.is_mla or mixer.rope_mscale == 1.0:
        return 0.0, 0.0
    e = (mixer.num_heads + mixer.num_kv_heads) * mixer.head_dim * BF16_BYTES  # bytes of q and k per token
    fused = 2 * e  # TE fused RoPE: read + write, each direction
    fwd = (1 + 2 + 2 + 2 + 3 + 2) * e  # rotate_half (neg 1, cat 2), x cos 2, x sin 2, add 3, cat 2
    bwd = (2 + 1 + 2 + 2 + 3) * e  # x sin 2, neg 1, chunk cat 2, x cos 2, grad sum 3
    return fwd - fused, bwd - fused
