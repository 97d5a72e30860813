"""Mamba-2 layers of hybrid stacks (Nemotron-H / Nemotron-3): parameters, FLOPs, saved activations, kernel
traffic, in one place (Megatron-Core's release and TP / CP rules for Mamba layers are layout rules, one layer
down: moeplan.run.hybrid).

Sources:
- the layer: Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured
  State Space Duality" (Mamba-2, arXiv 2405.21060), section 6 (the SSD chunked algorithm: intra-chunk quadratic
  blocks, chunk states, state passing, state-to-output); HF NemotronHMamba2Mixer (transformers
  models/nemotron_h/modeling_nemotron_h.py), whose tensors :func:`mamba_params` counts (it reproduces the
  Nemotron-3 checkpoints' tensor totals exactly: tests/validation/test_nemotron.py);
- Megatron-Core megatron/core/ssm/mamba_mixer.py (in_proj "z x B C dt", the memory-efficient training path
  mamba_split_conv1d_scan_combined of mamba_ssm) and mamba_context_parallel.py (the CP all-to-all);
- Megatron-LM megatron/training/training.py ``num_floating_point_operations``, hybrid branch
  ``mamba_layer_flops`` (the FLOPs Megatron-Core prints TFLOP/s from; Bridge's flop_utils.py is the same).
"""

from __future__ import annotations

from moeplan.models.spec import Mamba2

BF16 = 2
FP32 = 4

# Selective recompute labels that act on a Mamba layer: none. Its norm is fused into in_proj
# (hybrid_layer_specs.py: in_proj=TELayerNormColumnParallelLinear), so 'layernorm' does not apply, and no other
# recompute_modules label names a Mamba submodule (transformer_config.py). Only full recompute rebuilds it
# (hybrid_block.py: checkpointed_forward when recompute_granularity == 'full').
MAMBA_SELECTIVE_LABELS: frozenset[str] = frozenset()


def mamba_params(m: Mamba2, hidden: int) -> int:
    """One Mamba-2 mixer's weights (without the layer's pre-norm): in_proj (no bias), the depthwise conv1d with its
    bias (use_conv_bias), dt_bias, A_log and D (one per head), the gated RMSNorm (d_inner) and out_proj."""
    conv = m.conv_dim * m.conv_kernel + m.conv_dim
    return hidden * m.in_proj_dim + conv + 3 * m.num_heads + m.d_inner + m.d_inner * hidden


def megatron_mamba_fwd_flops(m: Mamba2, hidden: int) -> tuple[float, float]:
    """(projections, scan) forward FLOPs per token as Megatron counts a Mamba layer (training.py
    ``mamba_layer_flops``): in_proj 2h(2 d_in + 2 g N + heads), out_proj 2 d_in h and the scan 7 d_in N, with
    d_in = 2 x hidden (the formula's expand 2) whatever the heads x head_dim of the model. For Nemotron-3 Super
    (128 x 64 = 2 x 4096) that is the real width; for Nano (64 x 64 = 4096 < 2 x 2688) Megatron counts more than
    the GEMMs do, and moeplan reports Megatron's count (its TFLOP/s) while timing the real GEMMs."""
    d_in = 2 * hidden
    proj = 2.0 * hidden * (2 * d_in + 2 * m.num_groups * m.state_dim + m.num_heads) + 2.0 * d_in * hidden
    return proj, 7.0 * d_in * m.state_dim


def ssd_fwd_flops(m: Mamba2) -> float:
    """Forward FLOPs per token of the SSD chunked scan as the kernels compute it (Mamba-2 paper, section 6;
    mamba_ssm ssd_combined: _bmm_chunk_fwd, _chunk_state_fwd, _chunk_scan_fwd), chunk length Q = chunk_size:
    C B^T inside each chunk per group (2 Q N), the masked chunk block times X per head (2 Q P; the kernels
    compute whole Q x Q blocks), the chunk states B^T X (2 N P) and their output C h (2 N P) per head. The depthwise
    conv (2 x conv_dim x kernel) is added; state passing between chunks is O(1/Q) and left out."""
    q, n, p = m.chunk_size, m.state_dim, m.head_dim
    return 2.0 * m.num_groups * q * n + m.num_heads * (2.0 * q * p + 4.0 * n * p) + 2.0 * m.conv_dim * m.conv_kernel


# The SSD backward recomputes the conv output and the chunk states and runs the transposed products of each
# forward product (dC, dB, dX, ddt): about twice the forward's products plus one forward (mamba_ssm
# _mamba_chunk_scan_combined_bwd under MambaSplitConv1dScanCombinedFn, which saves only zxbcdt and the output).
SSD_BWD_OVER_FWD = 3.0


def ssd_bytes(m: Mamba2) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of the fused SSD kernels (mamba_split_conv1d_scan_combined):
    forward reads zxBCdt (bf16, in_proj_dim) and writes the output and the pre-gate output (d_inner each, bf16),
    with the fp32 chunk states written and read once per chunk (heads x P x N / Q per token); backward reads zxBCdt,
    the output and its gradient and writes dzxBCdt, with the chunk states and their gradients twice."""
    states = FP32 * m.num_heads * m.head_dim * m.state_dim / m.chunk_size
    fwd = BF16 * (m.in_proj_dim + 2 * m.d_inner) + 2 * states
    bwd = BF16 * (2 * m.in_proj_dim + 2 * m.d_inner) + 4 * states
    return fwd, bwd


def ssd_transient_bytes_per_token(m: Mamba2) -> float:
    """fp32 working buffers of the SSD kernels while one Mamba layer runs (mamba_ssm _mamba_chunk_scan_combined_fwd /
    _bwd), per token of the attention layout (TP splits heads and groups, CP's all-to-all hands each rank
    heads / CP of the whole sequence): the chunk states (heads x P x N per chunk: / Q per token), dt and its
    cumulative sum dA_cumsum (one each per head and token), and the chunk-local C B^T blocks (groups x Q per
    token). Freed when the layer's kernels return; training keeps no SSM or conv state across steps (the states
    an inference cache holds are not allocated)."""
    return FP32 * (m.num_heads * m.head_dim * m.state_dim / m.chunk_size + 2 * m.num_heads
                   + m.num_groups * m.chunk_size)


def cp_alltoall_elems(m: Mamba2) -> float:
    """Elements per token the Mamba context-parallel all-to-alls move (mamba_context_parallel.py pre_conv_ssm /
    post_conv_ssm: zxBCdt from sequence- to head-parallel before the conv and scan, the d_inner output back)."""
    return m.in_proj_dim + m.d_inner


def mamba_saved_elems(m: Mamba2) -> list[tuple[str, float, int, bool]]:
    """(name, elements per token, bytes per element, GEMM input) of what one Mamba-2 mixer keeps for backward on
    Megatron-Core's memory-efficient training path, after the layer's pre-norm (mamba_mixer.py _ssm_training):
    in_proj's output zxBCdt, the only activation mamba_split_conv1d_scan_combined saves besides its output (the
    conv output, dt and the chunk states are recomputed in its backward); the scan output (the gated RMSNorm's
    input) with the norm's fp32 reciprocal RMS per group; and the norm output, out_proj's input."""
    return [
        ("mamba_in_proj_out", m.in_proj_dim, BF16, False),
        ("mamba_scan_out", m.d_inner, BF16, False),
        ("mamba_norm_rstd", m.num_groups, FP32, False),
        ("mamba_norm_out", m.d_inner, BF16, True),
    ]


def mamba_layer_parts_s(m: Mamba2, tokens: float, fwd_rate: float, bwd_rate: float,
                        hbm_rate: float) -> tuple[float, float]:
    """(forward, backward) seconds of one Mamba-2 layer's SSD kernels for ``tokens`` tokens' share of the heads
    (mbs x seq / (TP x CP) per GPU: TP splits the heads, CP's all-to-all gives each rank heads / CP of the whole
    sequence): each direction is bound by its tensor-core work (:func:`ssd_fwd_flops`, x SSD_BWD_OVER_FWD
    backward) at ``fwd_rate`` / ``bwd_rate`` FLOP/s or by its HBM traffic (:func:`ssd_bytes`) at ``hbm_rate``,
    whichever is slower (a roofline). The rates are the caller's: moeplan has no Mamba kernel measurement, and
    the timing model runs these Triton chunked kernels at the rates measured for fla's chunked gated delta rule,
    the same kind of kernel (chunk-local matmuls plus a chunk-state pass)."""
    flops = ssd_fwd_flops(m) * tokens
    fwd_b, bwd_b = ssd_bytes(m)
    fwd = max(flops / fwd_rate, fwd_b * tokens / hbm_rate)
    bwd = max(SSD_BWD_OVER_FWD * flops / bwd_rate, bwd_b * tokens / hbm_rate)
    return fwd, bwd
