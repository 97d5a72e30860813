"""Gated DeltaNet time: fla's chunked kernels (launches, sequential passes, value tiles) and the mixer's glue
traffic op by op."""

from __future__ import annotations

import math

from moeplan.engine.activations import BF16_BYTES, FP32_BYTES
from moeplan.engine.timing.calibration import Calibration
from moeplan.engine.timing.context import TRAIN
from moeplan.hardware import GPUSpec
from moeplan.models.spec import GatedDeltaNet
from moeplan.run.config import RunConfig


GDN_CHUNK_TOKENS = 64  # fla chunk_gated_delta_rule chunk size (fla-org/flash-linear-attention, BT = 64)
# Sequential passes over the chunks (fla/ops/gated_delta_rule/chunk.py): forward runs
# chunk_gated_delta_rule_fwd_h once; backward recomputes it and then runs chunk_gated_delta_rule_bwd_dhu.
GDN_SEQUENTIAL_PASSES = {"fwd": 1, "bwd": 2}
# Value-dim tile per program of those kernels (fla/ops/common/chunk_delta_h.py: grid = V / BV x N x HV, BV
# autotuned over 32 and 64): the smaller tile, the one that fills more SMs when heads are few.
GDN_V_TILE = 32
# The GPU families whose fla kernel rates were measured (calibration gdn_eff keys "<family>_fwd|bwd"): fla's
# Triton kernels do not follow the BF16 peak from Hopper to Blackwell as one factor (the chunk-parallel forward
# runs 2.8x faster on GB200 than on H200, about the 2.5x of the peak, the backward 0.95x), so each family keeps
# its own; and the hosts whose Python launch time was measured (gdn_launch_s keys "<host>_fwd|bwd": Grace beside
# GB200, x86 beside H200).
GDN_KERNEL_FAMILIES = ("hopper", "blackwell")
GDN_HOSTS = ("x86", "grace")
GDN_DIRECTIONS = ("fwd", "bwd")


def gdn_kernel_family(gpu: GPUSpec) -> str | None:
    """Which measured fla kernel rates serve ``gpu``: Blackwell from sm_100 on, Hopper below; None for a GPU whose
    compute capability is not given (:func:`gdn_eff` then takes the slower family per direction)."""
    if gpu.sm_arch is None:
        return None
    return "blackwell" if gpu.sm_arch >= 100 else "hopper"


def gdn_eff(gpu: GPUSpec, cal: Calibration, direction: str) -> float:
    """Share of ``gpu``'s BF16 peak the chunk-parallel fla kernels reach in ``direction`` (fwd / bwd): its family's
    measured share, or, family unknown, the smaller of the families' (err slow, as ASSUMED_SM_COUNT does)."""
    family = gdn_kernel_family(gpu)
    if family is None:
        return min(cal.gdn_eff[f"{f}_{direction}"] for f in GDN_KERNEL_FAMILIES)
    return cal.gdn_eff[f"{family}_{direction}"]


def gdn_host(gpu: GPUSpec) -> str:
    """Which measured host launch time serves ``gpu``: Grace behind NVLink-C2C, else an x86 host."""
    return "grace" if gpu.host_link == "c2c" else "x86"


def gdn_launch_s(gpu: GPUSpec, cal: Calibration) -> tuple[float, float]:
    """(forward, backward) host seconds of one fla chunk_gated_delta_rule call outside CUDA graphs."""
    host = gdn_host(gpu)
    return cal.gdn_launch_s[f"{host}_fwd"], cal.gdn_launch_s[f"{host}_bwd"]


def gdn_chunk_kernels_s(batch: int, seq_len: int, heads: float, value_head_dim: int, flops: float, gpu: GPUSpec,
                        cal: Calibration) -> tuple[float, float]:
    """(forward, backward) GPU seconds of one fla chunk_gated_delta_rule call over ``batch`` sequences of
    ``seq_len`` tokens and ``heads`` value heads; ``flops`` is Megatron's forward + backward count.

    fla launches the kernels one after another (fla/ops/gated_delta_rule/chunk.py), so their times add. The
    chunk-parallel kernels (kkt, solve_tril, w/u, output, dq/dk/dv) have one program per chunk and head and
    run at :func:`gdn_eff` of the BF16 peak (per GPU family, :func:`gdn_kernel_family`); the state recurrence
    (chunk_gated_delta_rule_fwd_h, bwd_dhu: fla/ops/common/chunk_delta_h.py, grid V / BV x B x HV) has one
    program per value tile per head that walks the chunks one after another: passes x seq / 64 chunks x
    ``gdn_chunk_step_s`` x waves of programs over the GPU's SMs. Constants: least squares on fla's GB200
    benchmark and the H200 measurement (benchmarks/fit_gdn.py; tests/data/fla_gdn_gb200.csv, fla_gdn_h200.csv)."""
    sms = gpu.sms
    chunks = math.ceil(seq_len / GDN_CHUNK_TOKENS)
    programs = batch * heads * math.ceil(value_head_dim / GDN_V_TILE)
    waves = math.ceil(programs / max(1, sms))
    step = chunks * cal.gdn_chunk_step_s * waves
    # the chunk-parallel kernels' grids are chunks x B x HV (x tiles; fla/ops/common/chunk_o.py,
    # gated_delta_rule/chunk_fwd.py): fewer programs than SMs leave SMs idle (short shards, few heads)
    occupancy = min(1.0, chunks * batch * heads / max(1, sms))
    rate = gpu.peak("bf16") * occupancy
    fwd = flops / TRAIN / (rate * gdn_eff(gpu, cal, "fwd")) + GDN_SEQUENTIAL_PASSES["fwd"] * step
    bwd = flops * (TRAIN - 1) / TRAIN / (rate * gdn_eff(gpu, cal, "bwd")) + GDN_SEQUENTIAL_PASSES["bwd"] * step
    return fwd, bwd


def gdn_kernel_parts_s(cfg: RunConfig, mixer: GatedDeltaNet, flops: float, gpu: GPUSpec,
                       cal: Calibration) -> tuple[float, float]:
    """(forward, backward) seconds of the Gated DeltaNet kernels of one layer and micro-batch on one GPU.

    Megatron-Core runs Gated DeltaNet under CP head-parallel: an all-to-all gives each CP rank the
    WHOLE sequence for num_value_heads / (TP x CP) heads (megatron/core/ssm/gated_delta_net/gdn.py,
    ``a2a_cp_to_hp`` before the kernels), so the recurrence walks all seq / 64 chunks with few
    programs: at CP 16 Qwen3-Next has 2 heads per rank, 8 programs on 148 SMs walking 1,024 chunks."""
    par = cfg.parallel
    heads = max(1.0, mixer.num_value_heads / (par.tp * par.cp))
    return gdn_chunk_kernels_s(cfg.batch.mbs, cfg.batch.seq_len, heads, mixer.value_head_dim, flops, gpu, cal)


# HBM bytes per value head and token of Gated DeltaNet's gating, `g = -A_log.exp() * F.softplus(alpha.float() +
# dt_bias)` and `beta = beta.sigmoid()` (megatron/core/ssm/gated_delta_net.py at Megatron-LM 17a67b9; the [H]
# parameters' own ops are negligible). Forward: alpha.float() (read 2, write 4), + dt_bias (read 4, write 4),
# softplus (read 4, write 4), the product (read 4, write 4), sigmoid (read 2, write 2). Backward (autograd): the
# product's gradient to softplus (read 4, write 4) and its A_log-side grad * input then sum (read 4 + 4, write 4,
# read 4), softplus backward (read the gradient and its input, write 4), dt_bias's sum (read 4), the cast back to
# bf16 (read 4, write 2), sigmoid backward (read 2 + 2, write 2).
GDN_GATING_BYTES = {"fwd": (2 + FP32_BYTES) + 3 * 2 * FP32_BYTES + 2 * BF16_BYTES,
                    "bwd": 2 * FP32_BYTES + 4 * FP32_BYTES + 3 * FP32_BYTES + FP32_BYTES + (FP32_BYTES + BF16_BYTES)
                    + 3 * BF16_BYTES}


def gdn_glue_bytes(mixer: GatedDeltaNet, mbs: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of one Gated DeltaNet layer's layout copies and element-wise
    ops outside its projections and the fla chunk kernel, at the model's full widths (per GPU: x tokens /
    (TP x CP), as the widths split over TP). Op by op as Megatron-Core runs them (megatron/core/ssm/
    gated_delta_net.py at Megatron-LM 17a67b9, 2026-04-02, Bridge PR #3168's submodule; bf16 unless noted),
    with K = key_dim (q and k each), V = value_dim, C = 2K + V (the conv channels), H = value heads:
    forward: qkv.transpose(1, 2).contiguous() for the conv (2C); causal_conv1d_fn with fused SiLU (2C); q, k
    .contiguous() out of the transposed conv output before fla's l2norm (4K); l2norm (4K); repeat_interleave
    of q, k to the value heads (2K + 2 x K x value/key heads); value and gate .contiguous() (4V); the gated
    RMSNorm (out_norm 2V, then y x silu(gate.float()) fused by jit_fuser, 3V); g = -exp(A_log) x
    softplus(a + dt_bias) and sigmoid(b) (GDN_GATING_BYTES per value head); the output's transpose(0, 1)
    .contiguous() to [s, b, h] (2V, a copy only when MBS > 1: a size-1 batch dim keeps it contiguous).
    Backward, each op's gradient in reverse: the output transpose (2V if MBS > 1); gate multiply (reads
    dy, y, gate, writes both gradients, 5V) and RMSNorm (3V); the repeat_interleave sum (2 x K x ratio + 2K);
    l2norm (6K); the q/k/v split's concatenation (2C); the conv backward's contiguous gradient (2C) and
    the kernel (3C); the qkv/gate/beta/alpha split's concatenation (2 x the in_proj width C + V + 2H,
    ``in_proj_dim``) and, MBS > 1, the copy of that gradient back to [s, b, .] for in_proj's dgrad (the same).
    Qwen3-Next (K 2,048, V 4,096):
    213 / 345 KB per token at MBS 2, 197 / 279 KB at MBS 1, where the generic element-wise term charged
    2 x the 74 KB its tensors save."""
    k, v, h = mixer.key_dim, mixer.value_dim, mixer.num_value_heads
    c = mixer.conv_dim
    ratio = mixer.num_value_heads / mixer.num_key_heads
    batched = 1.0 if mbs > 1 else 0.0
    fwd = 2 * c + 2 * c + 4 * k + 4 * k + (2 * k + 2 * ratio * k if ratio > 1 else 0.0) + 4 * v + 5 * v + batched * 2 * v
    bwd = (batched * 2 * v + 8 * v + ((2 * ratio * k + 2 * k) if ratio > 1 else 0.0) + 6 * k + 2 * c + 2 * c + 3 * c
           + (1 + batched) * 2 * mixer.in_proj_dim)
    return fwd * BF16_BYTES + h * GDN_GATING_BYTES["fwd"], bwd * BF16_BYTES + h * GDN_GATING_BYTES["bwd"]


def gdn_transpose_bytes(mixer: GatedDeltaNet) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of the copies in :func:`gdn_glue_bytes` that transpose the last
    dimension, which run at ``transpose_copy_eff`` of HBM bandwidth rather than ``hbm_eff``: causal_conv1d_fn
    takes channel-first [b, C, s], so forward qkv.transpose(1, 2).contiguous() (2C) and, out of the conv's
    channel-first output, q / k / value .contiguous() (2K each, 2V); backward the conv's contiguous gradient (2C)
    (megatron/core/ssm/gated_delta_net.py, at 17a67b9 and with CP since 20ba03f alike). The other copies (gate,
    beta, alpha, the [b, s] <-> [s, b] row moves at MBS > 1, the split concatenations) keep rows contiguous."""
    k, v, c = mixer.key_dim, mixer.value_dim, mixer.conv_dim
    return (2 * c + 4 * k + 2 * v) * BF16_BYTES, 2 * c * BF16_BYTES


def gdn_glue_s(mixer: GatedDeltaNet, mbs: int, tokens: float, gpu: GPUSpec, cal: Calibration) -> tuple[float, float]:
    """(forward, backward) seconds of one Gated DeltaNet layer's glue (:func:`gdn_glue_bytes`) for ``tokens``
    tokens: the last-dimension transposes (:func:`gdn_transpose_bytes`) at ``transpose_copy_eff`` of HBM bandwidth,
    the rest at ``hbm_eff``."""
    out = []
    for total, transposed in zip(gdn_glue_bytes(mixer, mbs), gdn_transpose_bytes(mixer)):
        out.append(tokens * ((total - transposed) / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
                             + transposed / (gpu.hbm_bw_bytes_per_s * cal.transpose_copy_eff)))
    return out[0], out[1]


def gdn_graph_captured(scopes: frozenset[str] | set[str]) -> bool:
    """Whether CUDA graphs capture the Gated DeltaNet mixer: the ``attn`` scope captures a layer's
    input norm and ``self_attention`` submodule, which is the GDN module in GDN layers
    (megatron/core/transformer/transformer_layer.py ``_get_submodules_under_cudagraphs``)."""
    return "attn" in scopes or "full_iteration" in scopes
