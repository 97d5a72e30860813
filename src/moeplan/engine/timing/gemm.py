"""GEMM time: the measured achievable matmul rate times a shape factor d / (d + d0) per small dimension (tile
quantisation and launch tails), grouped expert GEMMs, and the HBM-bound floor."""

from __future__ import annotations


from moeplan.engine.activations import BF16_BYTES, FP32_BYTES, NVFP4_BYTES_PER_ELEM
from moeplan.engine.flops import Gemm
from moeplan.engine.timing.calibration import Calibration
from moeplan.engine.timing.context import GROUPED_TILE_ROWS, Ctx, gemm_rate
from moeplan.engine.timing.quant_map import gemm_precision


# HBM bytes one quantize of a BF16 GEMM input moves per element, by recipe (Transformer Engine's quantize kernels; each
# FP8 GEMM input is written row-wise for fprop / dgrad and column-wise (transposed) for wgrad):
# - fp8 (Float8BlockScaling): one pass, per-block amax in the kernel (common/transpose/
#   quantize_transpose_vector_blockwise.cu): read 2, write 1 + 1, an fp32 scale per 128 elements each way;
# - fp8-cs (Float8CurrentScaling): a per-tensor amax pass first (nvte_compute_amax: read 2), then the fused
#   cast-transpose with that scale (read 2, write 1 + 1): the extra read TE's GEMM profiling guide measures as ~17% of
#   the autocast GEMM time on H200 (docs/examples/gemm_profiling: FP8Current 20.3 ms autocast vs 16.8 ms pre-quantized);
# - fp8-ds (DelayedScaling): the fused cast-transpose with last step's scale, amax recorded on the fly (read 2, write 2);
# - mxfp8: one pass (common/cast/mxfp8), a 1-byte E8M0 scale per 32 elements each way;
# - nvfp4 (NVFP4BlockScaling): activations and output gradients are quantized with a random Hadamard transform on
#   their column-wise (wgrad) copy (recipe/__init__.py: "RHT is currently only applied to column-wise usage so that
#   it can be used for wgrad GEMM"; fp4_quant_fwd_inp / fp4_quant_bwd_grad random_hadamard_transform=True). TE's
#   NVFP4Quantizer::quantize_impl (pytorch/csrc/quantizer.cpp) then runs three passes over the BF16 tensor: the
#   amax of the input and of its RHT (nvte_hadamard_transform_amax: read 2), the row-wise cast (nvte_quantize_v2:
#   read 2, write 0.5 + an e4m3 scale per 16) and the fused RHT + column-wise cast
#   (nvte_hadamard_transform_cast_fusion_columnwise: read 2, write 0.5 + 1/16). Stochastic rounding (gradients) is
#   in-register work of the cast kernels (Philox state per call), no extra bytes.
# The routed experts' NVFP4 inputs go through TE's grouped split quantize instead (TE >= 2.12, PR #2411: cast.cpp
# split_quantize_nvfp4_impl_with_rht_helper): one grouped amax pass (nvte_group_hadamard_transform_amax: read 2), then,
# where every expert's rows are a multiple of 128 (the router pads them so for NVFP4: moe_router_padding_for_quantization),
# one fused kernel writes the row-wise and the RHT column-wise copies (nvte_group_hadamard_transform_cast_fusion: read 2,
# write 2 x (0.5 + 1/16)).
NVFP4_GROUPED_QUANTIZE_BYTES_PER_ELEM = 2 * BF16_BYTES + 2 * NVFP4_BYTES_PER_ELEM
QUANTIZE_BYTES_PER_ELEM: dict[str, float] = {
    "fp8": BF16_BYTES + 2 * (1.0 + FP32_BYTES / 128),
    "fp8-cs": 2 * BF16_BYTES + 2 * 1.0,
    "fp8-ds": BF16_BYTES + 2 * 1.0,
    "mxfp8": BF16_BYTES + 2 * (1.0 + 1.0 / 32),
    "nvfp4": 3 * BF16_BYTES + 2 * NVFP4_BYTES_PER_ELEM,
}


def gemm_k_half(rate: float, sms: int, cal: Calibration) -> float:
    """Reduction depth at which a GEMM runs at half its best-shape rate on a GPU of ``sms`` SMs reaching
    ``rate`` matmul FLOP/s: per output element, the main loop's 2K FLOPs at the per-SM rate take as long
    as the fixed epilogue ``cal.gemm_epilogue_s`` when K = rate / sms x gemm_epilogue_s / 2. The tensor cores
    speed up the main loop, not the epilogue: Blackwell's per-SM MMA rate is ~2x Hopper's (tcgen05 vs wgmma) and
    FP8 doubles it again, so the same K is shallower there (k_half ~160 on H100 BF16, ~650 on GB200 MXFP8 at the
    fitted constant)."""
    return rate / max(1, sms) * cal.gemm_epilogue_s / 2


def gemm_time(ctx: Ctx, g: Gemm, rows: float, local_experts: float) -> tuple[float, float, float]:
    """:func:`_gemm_time_uncached`, memoised in ``ctx.gemms`` (a search's shared cache) by what it reads:
    the GEMM, its rows and local experts (routed expert GEMMs only), the tokens per GPU and per CP rank, TP
    and ETP; the dict itself is one per GPU, precision and gradient dtype (:func:`make_ctx`), and the
    shared cache one per calibration. Layer shapes that differ only in what no GEMM reads (EP for the
    attention and dense GEMMs, the dispatcher, EP overlap, CP communication type, recompute, CUDA graphs)
    share their GEMM times (tests/unit/test_layer_cache.py: memoised = fresh, exactly)."""
    memo = ctx.gemms
    if memo is None or not ctx.wgrad_accumulate:  # the shared cache holds training runs' GEMMs only
        return _gemm_time_uncached(ctx, g, rows, local_experts)
    par = ctx.cfg.parallel
    prec = gemm_precision(ctx.cfg, g)  # a TE quantization config may move the module out of the run's recipe
    key = (g, rows, local_experts, ctx.tokens, ctx.seq_tokens, par.tp, par.etp, prec) if g.per_row else (
        g, ctx.tokens, ctx.seq_tokens, par.tp, par.etp, prec)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _gemm_time_uncached(ctx, g, rows, local_experts)
    return hit


def _gemm_time_uncached(ctx: Ctx, g: Gemm, rows: float, local_experts: float) -> tuple[float, float, float]:
    """(fwd + dgrad + wgrad seconds, FP8 cast seconds, the wgrad's part of the first) of one weight GEMM on one
    GPU.

    Each of the three GEMMs costs its FLOPs at the achievable matmul rate plus its operands' HBM traffic
    (inputs, weights) at the achievable bandwidth, and its output's traffic beyond the compute it runs beside (the
    epilogue, :func:`gemm_call_s`): an additive roofline for the operands, which
    charges the small expert GEMMs (K or N of a few hundred) more than they take in isolation (docs/
    calibration.md, known gaps: "GEMMs against kernel measurements").
    The weight-gradient GEMM accumulates into the main gradient in place, every micro-batch
    (Megatron-Core gradient_accumulation_fusion: wgrad_gemm_accum_fp32 into ``main_grad``, fp32
    unless grads are reduced in bf16): it reads and writes the whole local gradient in its epilogue, which is
    what makes many local experts (narrow EP, few rows each: shallow wgrad GEMMs) cost HBM time per micro-batch.
    FP8 runs also quantize each GEMM input (forward) and output gradient (backward): read bf16,
    write FP8 row- and column-wise, the bytes of the recipe's kernels (QUANTIZE_BYTES_PER_ELEM). The recipe is the
    GEMM's own (:func:`moeplan.engine.timing.quant_map.gemm_precision`): the run's unless its TE quantization config
    keeps the module in BF16 or moves it to MXFP8."""
    cfg, cal = ctx.cfg, ctx.cal
    par = cfg.parallel
    div = par.etp if g.kind == "expert" else par.tp
    k = g.k / div if g.split == "k" else g.k
    n = g.n / div if g.split == "n" else g.n
    if g.per_row:
        m = rows
    else:
        m = ctx.seq_tokens if g.split else ctx.tokens  # SP: TP-split GEMMs see the gathered sequence
    prec = gemm_precision(cfg, g)
    fp8 = prec != "bf16"
    b_in = NVFP4_BYTES_PER_ELEM if prec == "nvfp4" else 1.0 if fp8 else BF16_BYTES
    weights = local_experts if g.per_row else 1.0
    flops = 2.0 * m * k * n
    w = k * n * weights
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    fwd_bytes = gemm_moved_bytes(m * k, w, m * n, b_in, BF16_BYTES)  # forward: x, W -> y
    dgrad_bytes = gemm_moved_bytes(m * n, w, m * k, b_in, BF16_BYTES)  # dgrad: dy, W -> dx
    # wgrad: x, dy -> main_grad += dW (read + write), or dW written once where nothing accumulates (Ctx.wgrad_accumulate)
    wgrad_bytes = gemm_moved_bytes(m * k, m * n, w, b_in, (2 if ctx.wgrad_accumulate else 1) * grad_b)
    hbm = ctx.gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    rate = base_rate = ctx.gemm_rate if prec == cfg.precision else gemm_rate(ctx.gpu, prec)
    if g.per_row:
        per_expert = m / max(1.0, weights)
        rate = grouped_gemm_rate(rate, per_expert, cal)
    else:
        per_expert = m
    # Forward reduces over k, dgrad over n, wgrad over the rows (per expert): the weight gradient of narrow EP
    # (many local experts, few rows) is the shallow one; small-hidden models (K or N of 512-2,048) lose the most
    # (gemm_k_half).
    kh = gemm_k_half(base_rate, ctx.gpu.sms, cal)
    # each call's output (y, dx, the main_grad read-modify-write) is its epilogue's traffic (gemm_call_s)
    wgrad = gemm_call_s(flops, per_expert, wgrad_bytes, rate, hbm, kh,
                        epilogue_bytes=w * (2 if ctx.wgrad_accumulate else 1) * grad_b)
    t = (gemm_call_s(flops, k, fwd_bytes, rate, hbm, kh, epilogue_bytes=m * n * BF16_BYTES)
         + gemm_call_s(flops, n, dgrad_bytes, rate, hbm, kh, epilogue_bytes=m * k * BF16_BYTES) + wgrad)
    q_bytes = NVFP4_GROUPED_QUANTIZE_BYTES_PER_ELEM if prec == "nvfp4" and g.per_row else \
        QUANTIZE_BYTES_PER_ELEM.get(prec, 0.0)
    cast = (m * k + m * n) * q_bytes / hbm if fp8 else 0.0
    return t, cast, wgrad


def gemm_moved_bytes(a_elems: float, b_elems: float, out_elems: float, operand_bytes: float, out_bytes: float) -> float:
    """HBM bytes one GEMM (or one pass over the local experts) moves: both operands read at ``operand_bytes`` per
    element (FP8: 1, BF16: 2) and the output at ``out_bytes`` per element (an fp32 main_grad read and written: 8)."""
    return (a_elems + b_elems) * operand_bytes + out_elems * out_bytes


def grouped_gemm_rate(rate: float, rows_per_expert: float, cal: Calibration, tile_aligned: bool = False) -> float:
    """Matmul FLOP/s of routed-expert GEMMs with ``rows_per_expert`` rows each, from the best-shape ``rate``: each
    local expert's rows are cut into GROUPED_TILE_ROWS-row tiles, the last one partly empty (TE / cuBLASLt grouped
    GEMM; CUTLASS tile M = 128): with dropless routing's row counts on average half a tile per expert is padding,
    which costs narrow EP (many local experts, few rows each) the most; ``tile_aligned`` row counts (a benchmark's
    multiples of the tile) have none. The rest at ``grouped_gemm_eff`` of the rate."""
    pad = 0.0 if tile_aligned else GROUPED_TILE_ROWS / 2
    return rate * cal.grouped_gemm_eff * rows_per_expert / (rows_per_expert + pad)


def gemm_call_s(flops: float, depth: float, moved_bytes: float, rate: float, hbm_bytes_per_s: float, k_half: float,
                overlapped: bool = False, epilogue_bytes: float = 0.0) -> float:
    """Seconds of one GEMM (or one pass over a layer's local experts): its FLOPs at ``rate`` slowed by its reduction
    ``depth`` to depth / (depth + ``k_half``) (:func:`gemm_k_half`: each output element pays a fixed prologue /
    epilogue on its SM beside its depth-deep main loop, and faster tensor cores speed up only the main loop), plus
    its HBM bytes (operands, output, an fp32 main_grad read and written) at ``hbm_bytes_per_s``: an additive
    roofline, as the run fit calibrates it. ``overlapped`` takes the longer of the two instead, which is how the
    kernels measure in isolation (tests/data/expert_gemms_h200.csv, benchmarks/fit_gemm.py); the run fit does worse
    with it (docs/calibration.md, known gaps: "GEMMs against kernel measurements").

    ``epilogue_bytes`` (part of ``moved_bytes``): the output's traffic, which the epilogue moves (the D store, and
    the C load where the GEMM accumulates into an fp32 main_grad). In the persistent warp-specialized kernels cuBLAS
    and CUTLASS run on Hopper and Blackwell, the epilogue of one output tile runs beside the main loop of the next
    (CUTLASS sm90 "Pingpong": two consumer warp groups alternate, one in its epilogue while the other issues MMAs;
    sm100: double-buffered tensor-memory accumulators, the epilogue warps draining one while the MMA fills the
    other; NVIDIA/cutlass media/docs efficient_gemm.md, "Warp-Specialized Persistent Ping-Pong kernel"), so those
    bytes cost only what they take beyond the main loop they run beside (its FLOPs at ``rate``: the depth term's
    fixed per-tile work is the epilogue's own, which the stores do not hide under). What the main grad's
    read-modify-write adds every micro-batch (Megatron-Core gradient_accumulation_fusion) then shows where the GEMM
    is shallow in rows, not in a deep one (N41's 4K point: 4,096 rows a micro-batch, 256 micro-batches a step, ran
    -10% with it additive)."""
    compute_s = flops / (rate * depth / (depth + k_half))
    traffic_s = moved_bytes / hbm_bytes_per_s
    if overlapped:
        return max(compute_s, traffic_s)
    epilogue_s = epilogue_bytes / hbm_bytes_per_s
    return compute_s + (traffic_s - epilogue_s) + max(0.0, epilogue_s - flops / rate)
