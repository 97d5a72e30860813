"""The run context of the timing model (:class:`Ctx`: a run, its GPU and the constants, with the rates derived
once), the per-layer time record, the achievable GEMM rate and the bus bandwidths of the collectives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from moeplan.engine.flops import TRAIN_MULTIPLIER
from moeplan.engine.timing.calibration import Calibration
from moeplan.hardware import GPUSpec
from moeplan.run.config import RunConfig
from moeplan.run.parallel import Batch, Parallel

TRAIN = TRAIN_MULTIPLIER  # forward + backward = 3 x forward FLOPs (Megatron convention)
# CUDA graph scopes and the share of per-layer launch overhead each removes: roughly each scope's share of
# a layer's kernels (attention block ~40%, dense MLP / MoE experts ~30%, router and token preprocessing
# ~15% each; full_iteration captures everything). An estimate, not a measurement.
GRAPH_LAUNCH_SHARE = {"attn": 0.4, "mlp": 0.3, "moe": 0.3, "moe_router": 0.15, "moe_preprocess": 0.15,
                      "mamba": 0.4, "full_iteration": 1.0}
# Share of the router + EP preprocess launches the flex dispatchers' fused layout kernel removes
# (31 -> 17 kernels, Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, 2.2.1).
FLEX_PREPROCESS_FUSED = 14 / 31
# Host launches per LOCAL expert and MoE layer of Megatron-Core's TEGroupedMLP under a quantized recipe
# (Transformer Engine GroupedLinear fc1 and fc2 on its legacy path: every release, the only one through TE 2.16,
# what the 2025-2026 recipes' containers ship):
# general_grouped_gemm -> nvte_multi_tensor_gemm -> multi_stream_cublas_gemm issues one cuBLASLt matmul per
# expert (common/gemm/cublaslt_gemm.cu; the CUTLASS grouped kernel is Hopper + BF16 behind
# NVTE_USE_CUTLASS_GROUPED_GEMM only): forward one GEMM per linear, backward dgrad + wgrad; tex.split_quantize of
# the input (forward) and of the output gradient (backward) runs one quantize kernel per split (pytorch/csrc/
# extensions/cast.cpp multi_tensor_quantize_impl: only FP8 delayed scaling has a fused multi-tensor cast). The
# MXFP8 scale swizzle is one multi-tensor kernel per operand list, not per expert. TE's grouped-tensor flows issue
# the same calls ONCE per linear, whatever the local expert count: one group_quantize, one grouped GEMM (setup
# kernel + cuBLASLt grouped matmul) per fprop / dgrad / wgrad; GroupedLinear's from TE 2.17, opt-in
# (moeplan.base.te_release.GroupedTensorPath), the op fuser's by default from TE 2.16 (OpFuserGrouped); which one a
# run gets: RunConfig.experts_grouped_tensor.
EXPERT_LAUNCHES = {"fwd": {"gemm": 2, "quantize": 2}, "bwd": {"gemm": 4, "quantize": 2}}
# How TE's tex.split_quantize (pytorch/csrc/extensions/cast.cpp: ONE call for all of a linear's expert splits)
# quantizes the splits, per quantized precision; what each split costs the host (timing.moe.split_quantize_host_s):
# - "fused": one fused cast serves every split: FP8 delayed scaling (multi_tensor_quantize_impl's
#   nvte_multi_cast_transpose) and NVFP4 (TE >= 2.12, PR #2411: the FUSED_NVFP4 path, one grouped amax and one grouped
#   RHT cast kernel for every expert, split_quantize_nvfp4_impl; all releases moeplan lists are later): nothing;
# - "bulk": every split's data and scales in one bulk_allocate, then the splits quantized in a C++ loop
#   (multi_tensor_quantize_impl: one nvte_quantize_v2 kernel per split): MXFP8 (AllocationMethod::BULK_MXFP8, TE PR
#   #1934, from v2.6) and FP8 block scaling (BULK_FP8_BLOCKWISE, PR #1793): a bare kernel launch a split;
# - "per_split": the UNFUSED allocation (Quantizer::create_tensor per split) and an amax, a scale and a cast per
#   split: FP8 current scaling, whose splits keep the per-expert round trip (cal.expert_launch_host_s).
SPLIT_QUANTIZE_PATH: dict[str, str] = {"fp8-ds": "fused", "nvfp4": "fused", "mxfp8": "bulk", "fp8": "bulk",
                                       "fp8-cs": "per_split"}
# Host seconds of one kernel launched from C++ (cudaLaunchKernel, ~5 us: the launch latency Megatron-Core's CUDA graph
# docs quote, as calibration.yaml launch_overhead_per_layer_s). A source value, not fitted.
SPLIT_QUANTIZE_LAUNCH_S = 5e-6
GROUPED_TILE_ROWS = 128  # M tile of the grouped expert GEMMs (CUTLASS / cuBLASLt Hopper and Blackwell kernels)
TIME_ITEMS = ("gemm", "grouped_gemm", "attention", "linear_attention", "elementwise", "recompute",
              "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble", "dp_comm", "optimizer", "offload",
              "launch_overhead", "act_offload")


# Where the catalog has no measured matmul rate (GB300): the share of peak the measured Blackwell and
# Hopper parts reach (catalog.yaml MAMF: 0.71-0.80 of dense peak).
UNMEASURED_GEMM_SHARE = 0.75


# Share of the per-tensor FP8 GEMM rate that blockwise-scaled FP8 GEMMs (Float8BlockScaling, 1x128 activations /
# 128x128 weights) reach on GPUs without MXFP8 tensor cores (Hopper): cuBLASLt applies the per-128-deep-K scales inside
# the main loop (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F), where per-tensor scales cost one epilogue
# multiply. From Transformer Engine's GEMM profiling guide on H200 (docs/examples/gemm_profiling, 5B config, per
# layer): FP8 per-tensor GEMMs pre-quantized 16.79 ms, delayed scaling with its one-pass quantize 18.98 ms, block
# scaling (also a one-pass quantize, QUANTIZE_BYTES_PER_ELEM) 22.88 ms: block GEMMs 22.88 - (18.98 - 16.79) = 20.69 ms,
# 16.79 / 20.69 = 0.81 of the per-tensor rate. On Blackwell TE runs the recipe on the MXFP8 tensor cores.
BLOCKWISE_FP8_GEMM_SHARE = 0.81


def gemm_rate(gpu: GPUSpec, precision: str) -> float:
    """Achievable large-GEMM FLOP/s for the run's precision (measured MAMF, else peak x 0.75); blockwise FP8 ("fp8")
    on a GPU without MXFP8 tensor cores at BLOCKWISE_FP8_GEMM_SHARE of it."""
    if precision == "fp8" and not gpu.supports("mxfp8"):
        return _gemm_rate(gpu, precision) * BLOCKWISE_FP8_GEMM_SHARE
    return _gemm_rate(gpu, precision)


def _gemm_rate(gpu: GPUSpec, precision: str) -> float:
    if precision == "bf16":
        measured, peak = gpu.gemm_bf16_achieved_flops, gpu.peak("bf16")
    elif precision == "nvfp4":
        # the catalog's dense FP4 peak (datasheets); no NVFP4 GEMM benchmark in the catalog: the FP8 benchmark's
        # share of the FP8 peak, else the unmeasured share (TE's NVFP4 recipe runs fprop, dgrad and wgrad in FP4)
        peak = gpu.peak("nvfp4")
        measured = gpu.gemm_fp8_achieved_flops and gpu.gemm_fp8_achieved_flops / gpu.peak("fp8") * peak
    else:
        measured, peak = gpu.gemm_fp8_achieved_flops, gpu.peak(precision)
    return measured if measured else UNMEASURED_GEMM_SHARE * peak


def busbw(gpu: GPUSpec, group: int, stride: int, cal: Calibration) -> float:
    """Ring bus bandwidth of a collective over ``group`` GPUs spaced ``stride`` ranks apart.

    Inside one NVLink domain: the measured NCCL ring bus bandwidth. Across domains every member
    GPU drives its own NIC, so NCCL's rings (one channel per NIC) reach the per-NIC rate times the
    members per domain, capped by NVLink (nccl-tests multi-node H100: ~320 GB/s with 8 NICs)."""
    nvl = gpu.nvlink_busbw_bytes_per_s or gpu.nvlink_bw_bytes_per_s * cal.nvlink_eff
    if group * stride <= gpu.nvlink_domain:
        return nvl
    per_nic = gpu.scaleout_busbw_bytes_per_s or gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff
    members_per_domain = max(1, min(group, gpu.nvlink_domain // stride))
    return min(nvl, per_nic * members_per_domain)


def ring_time(bytes_per_rank: float, n: int, bw: float) -> float:
    """All-gather or reduce-scatter of a tensor of ``bytes_per_rank x n``: (n-1)/n x size / busbw."""
    return 0.0 if n <= 1 else bytes_per_rank * (n - 1) / bw


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one micro-batch, forward + backward, on one GPU."""

    gemm: float = 0.0
    grouped_gemm: float = 0.0
    attention: float = 0.0
    linear_attention: float = 0.0
    elementwise: float = 0.0
    recompute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    ep_comm: float = 0.0
    launch_overhead: float = 0.0
    act_offload: float = 0.0  # exposed activation offload copies (moeplan.engine.timing.offload_act)

    def total(self) -> float:
        return (self.gemm + self.grouped_gemm + self.attention + self.linear_attention + self.elementwise
                + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm + self.launch_overhead
                + self.act_offload)


@dataclass(frozen=True)
class Ctx:
    """Per-run constants shared by every layer."""

    cfg: RunConfig
    gpu: GPUSpec
    cal: Calibration
    tokens: float  # attention-layout tokens per GPU per micro-batch (mbs x seq / (CP x TP))
    seq_tokens: float  # tokens per CP rank (mbs x seq / CP): the GEMM M dimension
    gemm_rate: float
    # this run's layer and head times: its own, or its shape's dict in the search's shared cache
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, hash=False)
    # layer times shared by the runs of one search (same GPU and constants): layer_shape -> its cache
    shared: dict[Any, dict[Any, Any]] | None = field(default=None, compare=False, hash=False)
    shape: object = field(default=None, compare=False, hash=False)
    # GEMM times shared by the shapes of one search (None: each GEMM costed afresh): gemm_time
    gemms: dict[Any, tuple[float, float]] | None = field(default=None, compare=False, hash=False)
    # Whether weight-gradient GEMMs accumulate into the fp32 main_grad in place (Megatron-Core
    # gradient_accumulation_fusion, what every training run does) or write a fresh gradient once (a module called
    # outside Megatron's DDP wrapper, as the MoE-layer benchmark N38 / N39 does: params' .grad in their own dtype)
    wgrad_accumulate: bool = True
    # Whether the router pads each expert's token count to the quantized GEMMs' alignment (the quantized recipes'
    # moe_router_padding_for_quantization; timing.moe.expert_quant_padded), as moeplan assumes; the MoE-layer
    # benchmark (N38 / N39) leaves it off, and its experts copy their rows into a padded buffer
    router_pads_experts: bool = True
    # (both set where the Ctx is made, before any layer time: ``cache`` and the shared caches do not key on them;
    # make_ctx's keywords, and a context derived for another configuration of the run keeps them: derived_ctx)


def layer_shape(cfg: RunConfig) -> RunConfig:
    """What a layer's time depends on: the run with PP, VPP, the GPU count (hence DP), GBS and the
    optimizer offload blanked out, and EP A2A overlap as it runs (on only where asked for and allowed,
    which depends on them: layer times read it only so). Every other field, present or added later, is
    kept. Runs with the same shape share their layer times (:func:`estimate_time` ``layer_cache``); a
    layer cost that starts to read PP, VPP, DP or GBS must be reflected here (tests compare shared and
    fresh estimates)."""
    par = cfg.parallel
    return cfg.evolve(parallel=Parallel(0, par.tp, 1, 1, par.cp, par.ep, par.etp, None),
                      batch=Batch(cfg.batch.seq_len, 0, cfg.batch.mbs), optimizer_offload=0.0,
                      ep_overlap=cfg.ep_overlap and cfg.ep_overlap_allowed)


def make_ctx(cfg: RunConfig, gpu: GPUSpec, cal: Calibration,
              shared: dict[Any, dict[Any, Any]] | None = None, *, wgrad_accumulate: bool = True,
              router_pads_experts: bool = True) -> Ctx:
    """``shared``: the search's layer cache, one dict of layer (and head) times per :func:`layer_shape`;
    the run's own cache is its shape's dict. ``wgrad_accumulate`` / ``router_pads_experts``: the settings of a
    module timed outside a training step (:class:`Ctx`; the MoE-layer benchmark N38 / N39 turns both off)."""
    par, batch = cfg.parallel, cfg.batch
    shape = layer_shape(cfg) if shared is not None else None
    cache: dict[Any, Any] = {} if shared is None else shared.setdefault(shape, {})
    # GEMM times in the shared cache, one dict per GPU and what gemm_time reads of the run's numerics
    gemms = None if shared is None else shared.setdefault(("gemm_times", gpu, cfg.precision, cfg.grad_fp32), {})
    return Ctx(cfg, gpu, cal, batch.mbs * batch.seq_len / (par.cp * par.tp), batch.mbs * batch.seq_len / par.cp,
                gemm_rate(gpu, cfg.precision), cache, shared=shared, shape=shape, gemms=gemms,
                wgrad_accumulate=wgrad_accumulate, router_pads_experts=router_pads_experts)


def derived_ctx(ctx: Ctx, cfg: RunConfig) -> Ctx:
    """The context of another configuration of ``ctx``'s run (its BF16 layers: timing.step._bf16_ctx): the same GPU,
    constants and shared caches, and the same settings of how the module is timed (``wgrad_accumulate``,
    ``router_pads_experts``), which no copy may drop."""
    return make_ctx(cfg, ctx.gpu, ctx.cal, ctx.shared, wgrad_accumulate=ctx.wgrad_accumulate,
                    router_pads_experts=ctx.router_pads_experts)
