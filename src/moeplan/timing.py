"""Step time, TFLOP/s per GPU, MFU and tokens/s, with the time broken down by item.

The model costs one micro-batch on each pipeline rank (forward + backward, layer by layer), takes the
slowest rank, multiplies by the micro-batches, and adds the pipeline bubble, the exposed data-parallel
communication and the optimizer step:

    step = M x t_mb + (PP - 1) / VPP x t_mb + exposed DP comm + optimizer (+ offload)

(interleaved 1F1B bubble: Narayanan et al. 2021, arXiv 2104.04473, section 2.2). Per layer:
- GEMMs at the GPU's measured achievable matmul rate (hardware catalog ``gemm_*_achieved_flops``)
  times a shape factor d / (d + d0) per small dimension (tile quantisation and launch tails);
- fused attention (the kernel family Transformer Engine picks for the head shape and GPU) and Gated
  DeltaNet kernels at fractions of the dense BF16 peak;
- element-wise work (norms, activations, permutation, RoPE) as HBM traffic proportional to the
  bytes the layer saves for backward (moeplan.activations); the Gated DeltaNet mixer's op by op;
- TP all-gather / reduce-scatter with sequence parallel, CP ring KV exchange overlapped with
  attention, EP dispatch/combine (4 all-to-alls per MoE layer) split into NVLink and scale-out
  parts, PP send/recv; recompute adds the forward cost of what it recomputes.
FLOPs are Megatron-Core's (moeplan.flops) so TFLOP/s/GPU is comparable with Megatron's log line.
The calibration constants (class Calibration) are few and global (not per model or per run); their
values are data (moeplan/hardware/calibration.yaml), each with what it stands for and its source.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from moeplan import fsdp, muon
from moeplan.activations import (BF16_BYTES, FP32_BYTES, expert_probs_bytes, gdn_saved_bytes, layer_activation, unfused_score_square,
                                unfused_square_softmax_is_fused)
from moeplan.attention_backend import (WIDE_HEAD_KERNEL_ABOVE, attention_kernel, attention_kernel_mixer, heads_split,
                                       sink_cp_comm_ok)
from moeplan.flops import (
    TRAIN_MULTIPLIER,
    Gemm,
    flops_per_token,
    layer_flops,
    layer_gemms,
    logits_gemm,
    mtp_eh_proj_gemm,
)
from moeplan.flops import attention_core_fwd_flops as _attention_core_flops_per_token
from moeplan.errors import MoeplanError
from moeplan.hardware import GPUSpec
from moeplan.megatron.fields import gdn_backward_dw, muon_dp_overlap
from moeplan.memory import rank_params, average_params_per_gpu
from moeplan.models.spec import MODEL_FEATURES, Attention, DenseMLP, GatedDeltaNet, Layer, ModelSpec, MoE
from moeplan.parallel import (
    Batch,
    Parallel,
    Pipeline,
    Stage,
    build_pipeline,
    cp_ranks_per_domain,
    hierarchical_cp_inner,
    stage_groups,
    validate,
)
from moeplan.run import Recompute, RunConfig
from moeplan.vocab import FLEX_DISPATCHERS

TRAIN = TRAIN_MULTIPLIER  # forward + backward = 3 x forward FLOPs (Megatron convention)


CALIBRATION_FILE = "calibration.yaml"  # package data beside the hardware catalog (moeplan/hardware)


@lru_cache(maxsize=1)
def _file_constants() -> dict[str, Any]:
    """The default constants, read once from ``moeplan/hardware/calibration.yaml``."""
    import yaml

    text = resources.files("moeplan.hardware").joinpath(CALIBRATION_FILE).read_text(encoding="utf-8")
    origin = f"moeplan/hardware/{CALIBRATION_FILE}"
    # YAML 1.1 reads "28.0e6" as a string: every leaf goes through the same positive-number check
    return {k: ({kk: _positive(origin, f"{k}.{kk}", vv) for kk, vv in v.items()} if isinstance(v, dict)
                else _positive(origin, k, v)) for k, v in yaml.load(  # noqa: S506 - safe loaders; libyaml's parser if present
                    text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["constants"].items()}


def _from_file(name: str) -> Any:
    return field(default_factory=lambda: copy.deepcopy(_file_constants()[name]))


# Old names of renamed constants, still read from user profiles (--calibration FILE): old -> new.
RENAMED_CONSTANTS = {"ep_sm_bw": "ep_sm_bw_bytes_per_s"}  # renamed for its unit (moeplan 2026-12)


@dataclass(frozen=True, eq=False)
class Calibration:
    """Global efficiency constants of the timing model. The defaults are the values in
    ``moeplan/hardware/calibration.yaml`` (what each stands for and its source are documented there
    and in docs/calibration.md; benchmarks/calibrate.py writes the fitted ones)."""

    attn_fwd_eff: dict[str, float] = _from_file("attn_fwd_eff")
    attn_bwd_eff: dict[str, float] = _from_file("attn_bwd_eff")
    attn_wide_fwd_share: dict[str, float] = _from_file("attn_wide_fwd_share")
    attn_wide_bwd_share: dict[str, float] = _from_file("attn_wide_bwd_share")
    attn_softmax_flops: float = _from_file("attn_softmax_flops")
    attn_half_tokens: float = _from_file("attn_half_tokens")
    gdn_eff: dict[str, float] = _from_file("gdn_eff")
    gdn_chunk_step_s: float = _from_file("gdn_chunk_step_s")
    gdn_launch_s: dict[str, float] = _from_file("gdn_launch_s")
    grouped_gemm_eff: float = _from_file("grouped_gemm_eff")
    gemm_epilogue_s: float = _from_file("gemm_epilogue_s")
    elementwise_traffic: float = _from_file("elementwise_traffic")
    hbm_eff: float = _from_file("hbm_eff")
    transpose_copy_eff: float = _from_file("transpose_copy_eff")
    nvlink_eff: float = _from_file("nvlink_eff")
    scaleout_eff: float = _from_file("scaleout_eff")
    a2a_eff: dict[str, float] = _from_file("a2a_eff")
    ep_link_share: dict[str, float] = _from_file("ep_link_share")
    ep_sm_bw_bytes_per_s: dict[str, float] = _from_file("ep_sm_bw_bytes_per_s")
    ep_sms: dict[str, float] = _from_file("ep_sms")
    a2a_scaleout_eff: dict[str, float] = _from_file("a2a_scaleout_eff")
    ep_overlap_eff: float = _from_file("ep_overlap_eff")
    ep_overlap_layer_s: float = _from_file("ep_overlap_layer_s")
    tp_hidden: float = _from_file("tp_hidden")
    launch_overhead_per_layer_s: float = _from_file("launch_overhead_per_layer_s")
    expert_launch_host_s: float = _from_file("expert_launch_host_s")
    optimizer_bytes_per_param: float = _from_file("optimizer_bytes_per_param")
    cpu_adam_mem_eff: float = _from_file("cpu_adam_mem_eff")
    # Not a timing constant: the fit's leave-one-group-out error (RMS of held-out log residuals),
    # the band every estimate carries (benchmarks/calibrate.py writes it)
    error_band_log: float = _from_file("error_band_log")
    # Not a timing constant either: per architectural feature no fitted run has (models.spec.MODEL_FEATURES),
    # the largest shortfall (log of measured / estimated step time) of the measured runs of models with it, which
    # the band below their estimates covers (benchmarks/calibrate.py)
    out_of_fit_shortfall_log: dict[str, float] = _from_file("out_of_fit_shortfall_log")

    def as_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}

    def with_overrides(self, overrides: Mapping[str, Any], origin: str = "calibration") -> Calibration:
        """A copy with some constants replaced (a user profile); dict constants merge key by key.
        Unknown names, non-positive values and shares (SHARE_CONSTANTS) above 1 raise MoeplanError naming
        ``origin``."""
        known = {f.name: f for f in fields(self)}
        values: dict[str, Any] = {}
        for key, value in overrides.items():
            key = RENAMED_CONSTANTS.get(key, key)
            if key in values:
                raise MoeplanError(f"{origin}: '{key}' is given twice (once under its old name)")
            if key not in known:
                raise MoeplanError(f"{origin}: unknown calibration constant '{key}' "
                                   f"(known: {', '.join(sorted(known))})")
            current = getattr(self, key)
            if isinstance(current, dict):
                if not isinstance(value, Mapping):
                    raise MoeplanError(f"{origin}: '{key}' must be a mapping like {current}")
                merged = dict(current)
                for k, v in value.items():
                    if k not in current:
                        raise MoeplanError(f"{origin}: '{key}.{k}' is not one of {', '.join(current)}")
                    merged[k] = _constant(origin, key, f"{key}.{k}", v)
                values[key] = merged
            else:
                values[key] = _constant(origin, key, key, value)
        return replace(self, **values)


# Constants that are shares of a peak rate, in (0, 1]: every ``*_eff`` and ``*_share`` field, and the hidden
# share of TP communication. Named by the fields themselves, so a new efficiency is covered without a list.
SHARE_CONSTANTS = tuple(f.name for f in fields(Calibration) if f.name.endswith(("_eff", "_share"))) + ("tp_hidden",)
# The Calibration fields that are not timing constants (no step time depends on them): the fit's error band
# and the bands outside it. A user's calibration fit leaves them alone (moeplan.calibrate.constant_names).
NON_TIMING_CONSTANTS = ("error_band_log", "out_of_fit_shortfall_log")


def _constant(origin: str, name: str, key: str, value: Any) -> float:
    """``value`` of constant ``name`` (entry ``key``): a positive number, in (0, 1] for a share."""
    v = _positive(origin, key, value)
    if name in SHARE_CONSTANTS and v > 1.0:
        raise MoeplanError(f"{origin}: constant '{key}' is a share of a peak rate and must be in (0, 1], got {v:g}")
    return v


def _positive(origin: str, key: str, value: Any) -> float:
    """``value`` as a finite positive float (MoeplanError naming ``origin`` and ``key`` otherwise)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise MoeplanError(f"{origin}: '{key}' must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise MoeplanError(f"{origin}: '{key}' must be a positive number, got {value!r}")
    return v


DEFAULT_CALIBRATION = Calibration()
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
# (moeplan.te_release.GroupedTensorPath), the op fuser's by default from TE 2.16 (OpFuserGrouped); which one a
# run gets: RunConfig.experts_grouped_tensor.
EXPERT_LAUNCHES = {"fwd": {"gemm": 2, "quantize": 2}, "bwd": {"gemm": 4, "quantize": 2}}
GROUPED_TILE_ROWS = 128  # M tile of the grouped expert GEMMs (CUTLASS / cuBLASLt Hopper and Blackwell kernels)
TIME_ITEMS = ("gemm", "grouped_gemm", "attention", "linear_attention", "elementwise", "recompute",
              "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble", "dp_comm", "optimizer", "offload",
              "launch_overhead")


# Where the catalog has no measured matmul rate (GB300): the share of peak the measured Blackwell and
# Hopper parts reach (catalog.yaml MAMF: 0.71-0.80 of dense peak).
UNMEASURED_GEMM_SHARE = 0.75


def _gemm_rate(gpu: GPUSpec, precision: str) -> float:
    """Achievable large-GEMM FLOP/s for the run's precision (measured MAMF, else peak x 0.75)."""
    if precision == "bf16":
        measured, peak = gpu.gemm_bf16_achieved_flops, gpu.peak("bf16")
    else:
        measured, peak = gpu.gemm_fp8_achieved_flops, gpu.peak(precision)
    return measured if measured else UNMEASURED_GEMM_SHARE * peak


def _busbw(gpu: GPUSpec, group: int, stride: int, cal: Calibration) -> float:
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


def _ring_time(bytes_per_rank: float, n: int, bw: float) -> float:
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

    def total(self) -> float:
        return (self.gemm + self.grouped_gemm + self.attention + self.linear_attention + self.elementwise
                + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm + self.launch_overhead)


@dataclass(frozen=True)
class _Ctx:
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
    # GEMM times shared by the shapes of one search (None: each GEMM costed afresh): _gemm_time
    gemms: dict[Any, tuple[float, float]] | None = field(default=None, compare=False, hash=False)


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
              shared: dict[Any, dict[Any, Any]] | None = None) -> _Ctx:
    """``shared``: the search's layer cache, one dict of layer (and head) times per :func:`layer_shape`;
    the run's own cache is its shape's dict."""
    par, batch = cfg.parallel, cfg.batch
    shape = layer_shape(cfg) if shared is not None else None
    cache: dict[Any, Any] = {} if shared is None else shared.setdefault(shape, {})
    # GEMM times in the shared cache, one dict per GPU and what _gemm_time reads of the run's numerics
    gemms = None if shared is None else shared.setdefault(("gemm_times", gpu, cfg.precision, cfg.grad_fp32), {})
    return _Ctx(cfg, gpu, cal, batch.mbs * batch.seq_len / (par.cp * par.tp), batch.mbs * batch.seq_len / par.cp,
                _gemm_rate(gpu, cfg.precision), cache, shared=shared, shape=shape, gemms=gemms)


def gemm_k_half(rate: float, sms: int, cal: Calibration) -> float:
    """Reduction depth at which a GEMM runs at half its best-shape rate on a GPU of ``sms`` SMs reaching
    ``rate`` matmul FLOP/s: per output element, the main loop's 2K FLOPs at the per-SM rate take as long
    as the fixed epilogue ``cal.gemm_epilogue_s`` when K = rate / sms x gemm_epilogue_s / 2. The tensor cores
    speed up the main loop, not the epilogue: Blackwell's per-SM MMA rate is ~2x Hopper's (tcgen05 vs wgmma) and
    FP8 doubles it again, so the same K is shallower there (k_half ~160 on H100 BF16, ~650 on GB200 MXFP8 at the
    fitted constant)."""
    return rate / max(1, sms) * cal.gemm_epilogue_s / 2


def _gemm_time(ctx: _Ctx, g: Gemm, rows: float, local_experts: float) -> tuple[float, float, float]:
    """:func:`_gemm_time_uncached`, memoised in ``ctx.gemms`` (a search's shared cache) by what it reads:
    the GEMM, its rows and local experts (routed expert GEMMs only), the tokens per GPU and per CP rank, TP
    and ETP; the dict itself is one per GPU, precision and gradient dtype (:func:`make_ctx`), and the
    shared cache one per calibration. Layer shapes that differ only in what no GEMM reads (EP for the
    attention and dense GEMMs, the dispatcher, EP overlap, CP communication type, recompute, CUDA graphs)
    share their GEMM times (tests/unit/test_layer_cache.py: memoised = fresh, exactly)."""
    memo = ctx.gemms
    if memo is None:
        return _gemm_time_uncached(ctx, g, rows, local_experts)
    par = ctx.cfg.parallel
    key = (g, rows, local_experts, ctx.tokens, ctx.seq_tokens, par.tp, par.etp) if g.per_row else (
        g, ctx.tokens, ctx.seq_tokens, par.tp, par.etp)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _gemm_time_uncached(ctx, g, rows, local_experts)
    return hit


def _gemm_time_uncached(ctx: _Ctx, g: Gemm, rows: float, local_experts: float) -> tuple[float, float, float]:
    """(fwd + dgrad + wgrad seconds, FP8 cast seconds, the wgrad's part of the first) of one weight GEMM on one
    GPU.

    Each of the three GEMMs costs its FLOPs at the achievable matmul rate plus its HBM traffic
    (inputs, weights, outputs) at the achievable bandwidth (:func:`gemm_call_s`): an additive roofline, which
    charges the small expert GEMMs (K or N of a few hundred) more than they take in isolation (docs/
    calibration.md, known gaps: "GEMMs against kernel measurements").
    The weight-gradient GEMM accumulates into the main gradient in place, every micro-batch
    (Megatron-Core gradient_accumulation_fusion: wgrad_gemm_accum_fp32 into ``main_grad``, fp32
    unless grads are reduced in bf16): it reads and writes the whole local gradient, which is what
    makes many local experts (narrow EP) cost HBM time per micro-batch.
    FP8 runs also quantize each GEMM input (forward) and output gradient (backward): read bf16,
    write FP8 row- and column-wise."""
    cfg, cal = ctx.cfg, ctx.cal
    par = cfg.parallel
    div = par.etp if g.kind == "expert" else par.tp
    k = g.k / div if g.split == "k" else g.k
    n = g.n / div if g.split == "n" else g.n
    if g.per_row:
        m = rows
    else:
        m = ctx.seq_tokens if g.split else ctx.tokens  # SP: TP-split GEMMs see the gathered sequence
    fp8 = cfg.fp8
    b_in = 1.0 if fp8 else BF16_BYTES
    weights = local_experts if g.per_row else 1.0
    flops = 2.0 * m * k * n
    w = k * n * weights
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    fwd_bytes = gemm_moved_bytes(m * k, w, m * n, b_in, BF16_BYTES)  # forward: x, W -> y
    dgrad_bytes = gemm_moved_bytes(m * n, w, m * k, b_in, BF16_BYTES)  # dgrad: dy, W -> dx
    wgrad_bytes = gemm_moved_bytes(m * k, m * n, w, b_in, 2 * grad_b)  # wgrad: x, dy -> main_grad += dW (read + write)
    hbm = ctx.gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    rate = ctx.gemm_rate
    if g.per_row:
        per_expert = m / max(1.0, weights)
        rate = grouped_gemm_rate(rate, per_expert, cal)
    else:
        per_expert = m
    # Forward reduces over k, dgrad over n, wgrad over the rows (per expert): the weight gradient of narrow EP
    # (many local experts, few rows) is the shallow one; small-hidden models (K or N of 512-2,048) lose the most
    # (gemm_k_half).
    kh = gemm_k_half(ctx.gemm_rate, ctx.gpu.sms, cal)
    wgrad = gemm_call_s(flops, per_expert, wgrad_bytes, rate, hbm, kh)
    t = gemm_call_s(flops, k, fwd_bytes, rate, hbm, kh) + gemm_call_s(flops, n, dgrad_bytes, rate, hbm, kh) + wgrad
    cast = (m * k + m * n) * (BF16_BYTES + 2 * 1.0) / hbm if fp8 else 0.0
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
                overlapped: bool = False) -> float:
    """Seconds of one GEMM (or one pass over a layer's local experts): its FLOPs at ``rate`` slowed by its reduction
    ``depth`` to depth / (depth + ``k_half``) (:func:`gemm_k_half`: each output element pays a fixed prologue /
    epilogue on its SM beside its depth-deep main loop, and faster tensor cores speed up only the main loop), plus
    its HBM bytes (operands, output, an fp32 main_grad read and written) at ``hbm_bytes_per_s``: an additive
    roofline, as the run fit calibrates it. ``overlapped`` takes the longer of the two instead, which is how the
    kernels measure in isolation (tests/data/expert_gemms_h200.csv, benchmarks/fit_gemm.py); the run fit does worse
    with it (docs/calibration.md, known gaps: "GEMMs against kernel measurements")."""
    compute_s = flops / (rate * depth / (depth + k_half))
    traffic_s = moved_bytes / hbm_bytes_per_s
    return max(compute_s, traffic_s) if overlapped else compute_s + traffic_s


def cp_comm_allowed(mixer: Attention, tp: int, cp: int, comm_type: str, nvlink_domain: int) -> bool:
    """Whether a cp_comm_type works for this layer: a2a (Ulysses) splits heads over CP, so
    (heads / TP) and (KV heads / TP) must divide by CP; a2a+p2p does a2a inside the NVLink domain
    and p2p across (Megatron-Core cp_comm_type, TransformerEngine context parallel). Attention sinks leave
    a2a only (:func:`moeplan.attention_backend.sink_cp_comm_ok`)."""
    if not sink_cp_comm_ok(mixer, cp, comm_type):
        return False
    if comm_type in ("p2p", "allgather"):
        return True
    inner = cp if comm_type == "a2a" else hierarchical_cp_inner(tp, cp, nvlink_domain)
    if comm_type == "a2a+p2p" and (inner == cp or inner == 1):
        return False
    return heads_split(mixer, tp, inner)


def attention_block_tokens(cfg: RunConfig, mixer: Attention, nvlink_domain: int) -> float:
    """Length of the blocks one attention kernel call works on.

    Without CP (and with a2a/Ulysses CP, which splits heads and keeps whole sequences) a kernel sees
    the whole sequence. Ring CP (p2p, all-gather, and the across-domain part of a2a+p2p) splits each
    sequence into 2 x ring chunks (Megatron's load-balanced causal split) and runs one kernel per
    chunk pair. A sliding window caps how far a query block reaches."""
    par, seq = cfg.parallel, cfg.batch.seq_len
    ring = 1
    if par.cp > 1 and cfg.cp_comm_type != "a2a":
        ring = par.cp // hierarchical_cp_inner(par.tp, par.cp, nvlink_domain) if cfg.cp_comm_type == "a2a+p2p" else par.cp
    length = seq / (2 * ring) if ring > 1 else float(seq)
    return min(length, mixer.sliding_window) if mixer.sliding_window else length


# HBM bytes per score element of UnfusedDotProductAttention (bf16 scores [b x heads, s, s]): forward, baddbmm
# writes QK^T, the causal softmax reads it and writes P, the PV bmm reads P; backward (autograd), the dP bmm
# writes dP, the softmax backward reads P and dP and writes dS, the dV bmm reads P, the dQ and dK bmms read dS
# (transformer_engine/pytorch/attention/dot_product_attention/backends.py UnfusedDotProductAttention). That is
# TE's fused masked-softmax kernel (softmax.py); from UNFUSED_FUSED_SOFTMAX_MAX_KEYS keys on (moeplan.activations)
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
                         te_version: str | None = None) -> tuple[float, float, float]:
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
    UNFUSED_FUSED_SOFTMAX_MAX_KEYS keys the torch fp32 softmax's UNFUSED_FP32_SOFTMAX_SCORE_BYTES."""
    d_qk, d_v = mixer.head_dims
    kind = attention_kernel(mixer, gpu, te_version)
    if kind != "unfused":
        return fused_attention_efficiency(d_qk, d_v, kind, cal)
    assert gpu is not None  # attention_kernel returns "unfused" only for a known compute capability
    fwd_mm = 2.0 * (d_qk + d_v)
    counted = fwd_mm  # Megatron's forward FLOPs per score; backward counts twice that
    peak = gpu.peak("bf16")
    mm_share = _gemm_rate(gpu, "bf16") / peak
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


def fused_attention_efficiency(d_qk: int, d_v: int, kind: str, cal: Calibration = DEFAULT_CALIBRATION
                               ) -> tuple[float, float, float]:
    """:func:`attention_efficiency` of a fused kernel family ``kind`` (flash, cudnn_mla, flash2) at these head
    dims, whichever GPU would pick it. Equal heads wider than WIDE_HEAD_KERNEL_ABOVE run the family's wide-head
    kernels at ``attn_wide_fwd_share`` / ``attn_wide_bwd_share`` of its efficiency (measured on H200:
    tests/data/attention_headdim_h200.csv)."""
    fwd_mm, bwd_mm = 2.0 * (d_qk + d_v), 2.0 * (3 * d_qk + 2 * d_v)
    counted = fwd_mm
    wide = d_qk == d_v > WIDE_HEAD_KERNEL_ABOVE
    fwd_eff = cal.attn_fwd_eff[kind] * (cal.attn_wide_fwd_share.get(kind, 1.0) if wide else 1.0)
    bwd_eff = cal.attn_bwd_eff[kind] * (cal.attn_wide_bwd_share.get(kind, 1.0) if wide else 1.0)
    fwd_t = fwd_mm / fwd_eff + cal.attn_softmax_flops  # time per score, in 1 / peak
    bwd_t = bwd_mm / bwd_eff + cal.attn_softmax_flops
    return counted / fwd_t, 2 * counted / bwd_t, 3 * counted / (fwd_t + bwd_t)


def attention_rate(cfg: RunConfig, gpu: GPUSpec, mixer: Attention, cal: Calibration = DEFAULT_CALIBRATION) -> float:
    """Achieved attention FLOP/s (fwd + bwd, Megatron's count) on this run's kernel blocks."""
    length = attention_block_tokens(cfg, mixer, gpu.nvlink_domain)
    par, batch = cfg.parallel, cfg.batch
    square = unfused_score_square(mixer, batch.mbs, batch.seq_len, par.tp, par.cp)
    return gpu.peak("bf16") * attention_efficiency(mixer, cal, gpu, square, cfg.te_version)[2] * length / (length + cal.attn_half_tokens)


def _attention_s(ctx: _Ctx, mixer: Attention) -> float:
    """Attention kernels of one layer, one micro-batch, fwd + bwd, at this run's block rate."""
    kernel = attention_kernel_mixer(mixer, ctx.gpu, ctx.cfg.te_version)
    flops = TRAIN * _attention_core_flops_per_token(kernel, ctx.cfg.batch.seq_len) * ctx.tokens
    return flops / attention_rate(ctx.cfg, ctx.gpu, kernel, ctx.cal)


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


def _cp_comm(ctx: _Ctx, mixer: Attention, attn_s: float) -> tuple[float, float]:
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
            attn_s = _attention_s(c, m)
            total += attn_s + _cp_comm(c, m, attn_s)[0]
        if total < best_s:
            best, best_s = kind, total
    ctx.cache["best_cp_comm_type"] = best
    return best


def expected_ranks_hit(moe: MoE, ep: int) -> float:
    """Expected number of distinct EP ranks that hold at least one of a token's top-k experts (its own
    included), with the model's group-limited routing: the flex dispatchers send a token ONCE per such
    rank (DeepEP ``get_dispatch_layout`` -> ``is_token_in_rank``; HybridEP "no redundant communication",
    Megatron-LM docs/discussions/deepseek-v3-gb200-optimization), then permute it to its local experts.
    The top-k experts are distinct and uniform among those the token may reach (force-balanced routing):
    a rank with ``e`` of the ``n`` reachable experts is missed with probability C(n - e, k) / C(n, k)."""
    k = moe.top_k
    local = moe.num_experts // ep if moe.num_experts % ep == 0 else moe.num_experts / ep
    ranks, reach = float(ep), float(moe.num_experts)
    g, tg = moe.n_group, moe.topk_group
    if g > 1 and ep % g == 0:  # each group spans ep / g ranks: only the topk_group chosen groups' ranks
        ranks, reach = ep * tg / g, moe.num_experts * tg / g
    elif g > 1 and g % ep == 0:  # each rank holds g / ep whole groups: hit if one of them is chosen
        per = g // ep
        return ep * (1.0 - math.comb(g - per, tg) / math.comb(g, tg)) if g - per >= tg else float(ep)
    n, e = int(round(reach)), int(round(local))
    if n - e < k:
        return ranks
    return ranks * (1.0 - math.comb(n - e, k) / math.comb(n, k))


def ep_kernel_bw_bytes_per_s(gpu: GPUSpec, cal: Calibration, backend: str, kernel: str, peers_in_domain: int,
                             across_domains: bool = False) -> float:
    """Algorithm bandwidth (bytes each rank receives per second, BF16 payload) of a flex-dispatcher kernel
    (``kernel`` dispatch or combine) over NVLink: the smaller of a share of the link rate and the SMs it
    runs on times their copy rate (calibration ``ep_link_share`` / ``ep_sm_bw_bytes_per_s`` / ``ep_sms``, from the
    kernels' own benchmarks). DeepEP's normal kernels are written for at most 8 NVLink peers
    (``NUM_MAX_NVL_PEERS``); beyond (MNNVL, NVL72) its measured rates are those of that regime
    ("_mnnvl": Megatron-LM deepseek-v3-gb200-optimization, 2.2.1, EP32: ~400 GB/s dispatch, ~190 GB/s
    combine with 24 SMs).

    ``across_domains``: EP spans NVLink domains, so DeepEP runs its internode kernels, whose NVLink leg
    (RDMA -> NVLink forwarding in dispatch, NVLink -> forwarder in combine) has its own per-SM rate
    ("deepep_internode"): each channel (2 SMs) runs one NVLink-sender warp per NVL peer (deepseek-ai/DeepEP
    csrc/kernels/internode.cu, combine ``kNVLSender``: 8 warps on a channel's even SM) where the intranode
    combine runs 24 sender warps per SM (intranode.cu, kNumThreads 768), so it stays near 140-145 GB/s with
    24 SMs whatever the link: H800 (200 GB/s per direction; DeepEP issue #285, the maintainers: at EP16 "the
    NVLink bandwidth will exceed 140 GB/s, making NVLink the bottleneck"), H200 (450 GB/s; issue #493) and
    H20 (issue #361) all measure 140-145. The link share stays the intranode one."""
    regime = "mnnvl" if peers_in_domain > 8 else "nvl8"
    key = f"{backend}_{regime}_{kernel}"
    internode = f"{backend}_internode_{kernel}"  # a backend with its own internode rate (calibration data: DeepEP)
    sm_key = internode if across_domains and regime == "nvl8" and internode in cal.ep_sm_bw_bytes_per_s else key
    return min(gpu.nvlink_bw_bytes_per_s * cal.ep_link_share[key], cal.ep_sms[backend] * cal.ep_sm_bw_bytes_per_s[sm_key])


def ep_comm_sms(cfg: RunConfig, gpu: GPUSpec, cal: Calibration) -> float:
    """SMs the EP dispatch/combine kernels occupy while they run: the flex backends' SM budget
    (Megatron-Core moe_flex_dispatcher_num_sms; unset: DeepEP 20, token_dispatcher.py, HybridEP its
    buffer's 32), NCCL all-to-all its channels (fsdp.COMM_SMS_*)."""
    if cfg.dispatcher in FLEX_DISPATCHERS:
        return cal.ep_sms[cfg.dispatcher]
    across = cfg.parallel.ep * cfg.parallel.etp > gpu.nvlink_domain
    return float(fsdp.COMM_SMS_SCALEOUT if across else fsdp.COMM_SMS_NVLINK)


def _ep_comm(ctx: _Ctx, moe: MoE) -> tuple[float, float]:
    """(seconds, forward-only seconds) of dispatch + combine for one MoE layer, fwd + bwd, none hidden."""
    total, fwd, _ = _ep_totals(*_ep_kernels(ctx, moe), routing_map_allgather_s(ctx, moe))
    return total, fwd


def _ep_totals(dispatch_s: float, combine_s: float, permute_s: float,
               routing_map_s: float) -> tuple[float, float, float]:
    """(fwd + bwd, forward-only, one direction's kernels) seconds of one MoE layer's EP traffic from its parts:
    dispatch, combine and permutation run once in each direction, the routing-map all-gather only in the
    forward."""
    once = dispatch_s + combine_s + permute_s
    return 2 * once + routing_map_s, once + routing_map_s, once


def routing_map_allgather_s(ctx: _Ctx, moe: MoE) -> float:
    """Seconds of HybridEP's routing-map all-gather in one MoE layer's forward (its backward reuses the handle).

    Before each dispatch HybridEP gathers every EP rank's boolean routing map, [tokens x num_experts] at one
    byte per entry, into the global map its metadata scan reads (deepseek-ai/DeepEP hybrid-ep
    ``HybridEPBuffer::metadata_preprocessing`` -> ``Executor::allgather_routing_map``); without a token budget
    (moe_expert_rank_capacity_factor) the host then waits for the received-token count (Megatron-Core
    fused_a2a.py: ``non_blocking = num_permuted_tokens is not None``), so the gather is on the critical path.
    Its size grows with experts x EP: 512 experts at EP 32 gather 31 x 512 bytes per local token, more than
    a third of the 2 x 2,048-byte row each token sends."""
    cfg, gpu = ctx.cfg, ctx.gpu
    par = cfg.parallel
    if cfg.dispatcher != "hybridep" or par.ep <= 1:
        return 0.0
    tokens = ctx.tokens * cfg.rows_factor
    return _ring_time(tokens * moe.num_experts, par.ep, _busbw(gpu, par.ep, par.etp, ctx.cal))


def _ep_kernels(ctx: _Ctx, moe: MoE) -> tuple[float, float, float]:
    """(dispatch, combine, permute) seconds of one MoE layer's forward; the backward runs the same
    kernels with the roles swapped (the gradient of a dispatch is a combine and vice versa).

    Megatron-Core dispatches the BF16 hidden states with every backend (fused_a2a.py: HybridEP asserts
    ``not fp8_dispatch``; DeepEP's ``fused_dispatch`` is handed the bf16 tensor), and the gradients
    travel back in BF16 too."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    if par.ep <= 1:
        return 0.0, 0.0, 0.0
    tokens = ctx.tokens * cfg.rows_factor
    row_bytes = cfg.model.hidden * BF16_BYTES
    # EP peers sit ETP ranks apart (expert rank order: ETP, EP, EDP, PP); count peers, not GPUs
    span = par.ep * par.etp
    peers_in_domain = max(1, min(par.ep, gpu.nvlink_domain // par.etp))
    nodes = math.ceil(span / gpu.nvlink_domain)
    so_bw = gpu.scaleout_bw_bytes_per_s * cal.a2a_scaleout_eff[cfg.dispatcher]
    if cfg.dispatcher in ("alltoall", "allgather"):
        # NCCL all-to-all sends every (token, expert) row to its rank (top-k copies, no de-duplication);
        # the routes run one after the other. The allgather dispatcher (token_dispatcher.py
        # MoEAllGatherTokenDispatcher) all-gathers every token of the EP x ETP group (its tp_ep group) to every rank
        # and reduce-scatters the outputs back: each rank receives EP x ETP copies of its token count, whatever the
        # routing (memory._moe_dispatch_transient holds the gathered copy)
        rows_b = tokens * (par.ep * par.etp if cfg.dispatcher == "allgather" else moe.top_k) * row_bytes
        nv_bw = gpu.nvlink_bw_bytes_per_s * cal.a2a_eff[cfg.dispatcher]
        remote = (par.ep - peers_in_domain) / par.ep
        local = (peers_in_domain - 1) / par.ep
        one_d = one_c = rows_b * local / nv_bw + rows_b * remote / so_bw
    else:
        # DeepEP / HybridEP send a token once to each rank holding one of its experts, and across NVLink
        # domains once per remote domain, forwarded over NVLink inside it (DeepSeek-V3 report, 3.2.2;
        # deepseek-ai/DeepEP README): every copy a rank receives crosses NVLink once, the remote-domain
        # sends cross the NIC, pipelined. Expected remote domains hit by top-k uniform routing:
        # (N - 1) x (1 - (1 - 1/N)^k).
        remote_domains = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** moe.top_k) if nodes > 1 else 0.0
        if nodes > 1 and moe.n_group > 1 and moe.n_group % nodes == 0:
            # group-limited routing with groups laid over the domains: a domain holding g groups is
            # reached only if one of its groups is among the token's topk_group
            g = moe.n_group // nodes
            p_hit = 1.0 - math.comb(moe.n_group - g, moe.topk_group) / math.comb(moe.n_group, moe.topk_group)
            remote_domains = min(remote_domains, (nodes - 1) * p_hit)
        recv_b = tokens * expected_ranks_hit(moe, par.ep) * row_bytes
        rdma = tokens * remote_domains * row_bytes / so_bw
        across = nodes > 1
        one_d = max(recv_b / ep_kernel_bw_bytes_per_s(gpu, cal, cfg.dispatcher, "dispatch", peers_in_domain, across), rdma)
        one_c = max(recv_b / ep_kernel_bw_bytes_per_s(gpu, cal, cfg.dispatcher, "combine", peers_in_domain, across), rdma)

    # Permutes on the compute stream, read + write of the routed (token, expert) rows: the alltoall
    # dispatcher permutes globally before the all-to-all and sorts by local expert after it (twice per
    # direction); DeepEP fuses the global permute into its dispatch kernel but the received tokens are
    # still permuted to their local experts (once); HybridEP's dispatch_with_permute writes them out of
    # its buffer already permuted, the copy its benchmarked (Torch API) rate includes (Megatron-LM
    # docs/discussions/deepseek-v3-gb200-optimization, 2.1.1 and 2.5; token_dispatcher.py, fused_a2a.py)
    passes = {"alltoall": 2, "allgather": 2, "deepep": 1}.get(cfg.dispatcher, 0)
    perm = 2 * passes * tokens * moe.top_k * row_bytes / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
    return one_d, one_c, perm


EP_CHUNK_EDGE = "ep_chunk_edge"  # layer-cache key: a model chunk's first-layer EP exposure beyond steady state
# Steady state of the merged schedule: layers simulated, and the later half of them measured (the first
# layers of a chain start with both streams idle; the per-layer increment settles within a few layers).
MERGED_LAYERS = 8


def merged_layer_s(d: float, c: float, attn_s: float, experts_s: float, attn_wgrad_s: float = 0.0,
                   experts_wgrad_s: float = 0.0, carry: bool = True) -> float:
    """Seconds per MoE layer of Megatron-Core's merged 1F1B under EP A2A overlap (one forward and one backward
    micro-batch, layer by layer), node by node as it runs.

    model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run issues, per layer: combine_bwd (comm stream),
    attn_fwd (comp), mlp_bwd (comp), dispatch_fwd (comm), mlp backward_dw (comp), dispatch_bwd (comm), mlp_fwd
    (comp), combine_fwd (comm), attn_bwd (comp), attn backward_dw (comp). Two CUDA streams (pipeline_parallel/
    utils.py set_streams: comp = the current stream, comm a new one); each node waits on and then records its
    model chunk's CUDA event (ScheduleNode.stream_acquire_context), so the forward and the backward micro-batch
    are one chain each, and a node starts when its stream and its chain are free. ``backward_dw`` runs outside
    that context on the compute stream: with ``delay_wgrad_compute`` the TE linears keep their weight-gradient
    GEMMs out of the node's backward (extensions/transformer_engine.py, delay_wgrad_compute; TE
    GroupedLinear / Linear backward_dw), so dispatch_bwd waits for the experts' dgrad only and runs beside
    their wgrad (``experts_wgrad_s``), and the next layer's combine_bwd waits for attention's dgrad only and
    runs beside attention's and the shared experts' wgrad (``attn_wgrad_s``, fine_grained_callables.py
    _BackwardDWWrapper). Without it both wgrad arguments are 0 and the wgrad stays inside mlp_bwd / attn_bwd.
    Forward is 1/TRAIN of each part; the backward of dispatch moves what combine moves and back. ``carry``:
    the layers follow each other inside a model chunk (steady state); False: one layer from idle streams, as
    a chunk's first layer starts (the chunk run ends by waiting on both events; its last attention
    backward_dw goes beside the PP send / recv instead)."""
    fwd = 1 / TRAIN
    # the wgrad part comes from its own roofline (_gemm_time), the backward from the 1/TRAIN split: where few rows
    # per expert make the wgrad shallower than 2/3 of the whole, the backward node would go negative, so the
    # delayed part is at most the backward (review 2026-12-03)
    experts_wgrad_s = min(experts_wgrad_s, experts_s * (1 - fwd))
    attn_wgrad_s = min(attn_wgrad_s, attn_s * (1 - fwd))
    nodes = ((0, 1, d), (1, 2, attn_s * fwd), (1, 1, experts_s * (1 - fwd) - experts_wgrad_s), (0, 2, d),
             (1, 0, experts_wgrad_s), (0, 1, c), (1, 2, experts_s * fwd), (0, 2, c),
             (1, 1, attn_s * (1 - fwd) - attn_wgrad_s), (1, 0, attn_wgrad_s))
    free = [0.0, 0.0]  # comm, comp stream
    event = [0.0, 0.0, 0.0]  # chain 0: none (backward_dw), 1: backward micro-batch, 2: forward micro-batch
    layers = MERGED_LAYERS if carry else 1
    mark = 0.0
    for i in range(layers):
        if i == layers // 2:
            mark = max(free)
        for stream, chain, dur in nodes:
            start = free[stream] if free[stream] > event[chain] else event[chain]
            free[stream] = start + dur
            if chain:
                event[chain] = free[stream]
    return (max(free) - mark) / (layers - layers // 2)


def ep_overlap_exposed_s(d: float, c: float, perm: float, attn_s: float, experts_s: float,
                         stolen: float, eff: float, attn_wgrad_s: float = 0.0, experts_wgrad_s: float = 0.0,
                         carry: bool = True) -> float:
    """Exposed seconds of one MoE layer's dispatch / combine (fwd + bwd) under EP A2A overlap: the merged
    schedule (:func:`merged_layer_s`, the attention block ``attn_s`` and the expert MLP ``experts_s`` fwd +
    bwd, their delayed weight-gradient GEMMs where ``delay_wgrad_compute`` runs) less the compute. Compute
    hides at most ``eff`` of its time; while a kernel runs behind compute it holds ``stolen`` of the GPU's
    SMs, which that compute loses. Permutes run on the compute stream and stay exposed."""
    layer = merged_layer_s(d, c, eff * attn_s, eff * experts_s, eff * attn_wgrad_s, eff * experts_wgrad_s, carry)
    exposed = max(0.0, layer - eff * (attn_s + experts_s))
    hidden = max(0.0, 2 * (d + c) - exposed)
    return exposed + hidden * stolen + 2 * perm


def expert_host_s(local_experts: float, rows: float, precision: str, scopes: frozenset[str] | set[str],
                  cal: Calibration, grouped: bool = False) -> tuple[float, float]:
    """(forward, backward) host seconds of one MoE layer's per-expert launches (EXPERT_LAUNCHES) for one
    micro-batch: launches x ``cal.expert_launch_host_s``, per local expert with rows, or once with ``grouped``
    (TE's grouped-tensor path, :attr:`RunConfig.experts_grouped_tensor`: one call per linear for all experts).

    Under a quantized recipe each per-expert GEMM or quantize is a host round trip through TE's Python,
    pybind and cuBLASLt set-up (the quantize allocates four tensors per split, {row, column}-wise x {data,
    scales}; each block-scaled GEMM sets up its layouts, scale pointers and heuristic query): TE PR #3134
    ran 8 experts' multi-stream cuBLASLt GEMMs in 0.267 ms on SM100 against 0.069 ms for one kernel of the
    same work, ~30 us each (the source value; the fit pins it near there). Megatron-LM's GB200 DeepSeek-V3
    notes (docs/discussions/deepseek-v3-gb200-optimization, 2.3) find the routed experts the one part still
    host-bound after CUDA graphs, and a larger EP (fewer local experts) cutting "quantization and other
    overheads". BF16 experts pass plain tensor views to the GEMMs; their few-us launches stay in
    ``launch_overhead_per_layer_s`` (G09: 32 local BF16 experts on H100 leave no room for ~30 us each).
    Experts without rows launch nothing (te_general_grouped_gemm skips empty splits); a CUDA graph of the
    experts (scopes ``moe`` or ``full_iteration``, which need static shapes) launches none."""
    if precision == "bf16" or "moe" in scopes or "full_iteration" in scopes or local_experts <= 0:
        return 0.0, 0.0
    active = min(1.0, rows) if grouped else min(local_experts, rows)
    fused_cast = precision == "fp8-ds"  # delayed scaling: one multi-tensor cast for all splits
    per = {p: n["gemm"] + (0 if fused_cast else n["quantize"]) for p, n in EXPERT_LAUNCHES.items()}
    return active * per["fwd"] * cal.expert_launch_host_s, active * per["bwd"] * cal.expert_launch_host_s


def experts_recomputed(rc: Recompute) -> bool:
    """Whether the routed experts' forward runs again in backward: full recompute, or selective ``moe``
    (the whole MoE block; ``moe_act`` recomputes only the activation, no GEMM)."""
    return rc.granularity == "full" or (rc.granularity == "selective" and "moe" in rc.modules)


# Bytes per element of the autograd ops of the clamp in weighted_bias_quick_geglu_impl (below), backward:
# clamp_backward (torch derivatives.yaml) is where(self <= max, grad, 0) for the gate's one-sided clamp (compare:
# read 2, write a 1-byte mask; where: read mask, grad, write 2) and where((self >= min).logical_and_(self <= max),
# grad, 0) for the linear half's two-sided one (two compares, the in-place and, the where).
CLAMP_BWD_BYTES = {"one_sided": 2 + 1 + 1 + 2 + 2, "two_sided": 2 * (2 + 1) + 3 + (1 + 2 + 2)}


def expert_glue_bytes(moe: MoE, hidden: int, etp: int = 1, probs_bytes: int = BF16_BYTES) -> tuple[float, float]:
    """(forward, backward) HBM bytes per routed row of the eager ops Megatron-Core's unfused TEGroupedMLP runs
    around its two grouped GEMMs for a clamped GLU and expert biases (gpt-oss), beside the fused activation
    the generic element-wise term already charges. Source: megatron/core/transformer/moe/experts.py and
    megatron/core/fusions/fused_bias_geglu.py (Megatron-Core 0.17 2edffad .. 0.19 cd4afff, the pins of the
    recipes that ran gpt-oss); activations bf16, the probabilities ``probs_bytes`` (:func:`expert_probs_bytes`).
    F = expert FFN width / ETP, H = hidden:
    - clamp (``act_clamp``; bias_activation_fusion on: weighted_bias_quick_geglu_impl): outside the fused
      jit kernel it chunks the fc1 output, clamps the gate half (max) and the linear half (+-limit) and
      torch.cat's them back: forward 2 x (read F, write F) + (read 2F, write 2F) = 16F bytes; backward each
      clamp's clamp_backward (CLAMP_BWD_BYTES per element) and the chunk's gradient concatenation (8F);
    - expert biases (``expert_bias``): linear_fc1 adds its bias inside TE GroupedLinear (GEMM epilogue; dbias
      fused with the wgrad GEMM in BF16, with the quantize in bgrad_quantize under FP8), no extra pass;
      linear_fc2 is built with skip_bias_add=True and TEGroupedMLP._apply_bias adds p x b per expert in eager
      torch: torch.cat([t + b * p ...]).to(dtype), in the probabilities' dtype s (type promotion): forward b x p
      (write sH), the add (read 2H + sH, write sH), the cat (read sH, write sH) and, s = 4, the cast back to
      bf16 (read 4H, write 2H): 12H bf16, 28H fp32; backward the bias's and the prob's gradients, each a product
      over [rows, H] (read sH, write sH) and its reduction (read sH), and, s = 4, the cast's gradient (read 2H,
      write 4H) and fc2 output's (read 4H, write 2H): 12H bf16, 36H fp32.
    Under the op fuser (``RunConfig.experts_op_fused``) none of these run."""
    fwd = bwd = 0.0
    if moe.clamped_glu:
        f = moe.expert_ffn_hidden / etp
        fwd += expert_glue_clamp_fwd_bytes(moe, etp)
        bwd += f * (CLAMP_BWD_BYTES["one_sided"] + CLAMP_BWD_BYTES["two_sided"]) + (2 * f + 2 * f) * BF16_BYTES
    if moe.expert_bias:
        sb = float(probs_bytes)
        cast = probs_bytes != BF16_BYTES
        fwd += hidden * (sb + (BF16_BYTES + 2 * sb) + 2 * sb + ((sb + BF16_BYTES) if cast else 0.0))
        bwd += hidden * (2 * 3 * sb + (2 * (sb + BF16_BYTES) if cast else 0.0))
    return fwd, bwd


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


def expert_glue_clamp_fwd_bytes(moe: MoE, etp: int = 1) -> float:
    """Forward bytes per routed row of :func:`expert_glue_bytes`'s clamp alone: what selective ``moe_act``
    recompute runs again (its checkpoint wraps bias_act_func, clamp included; fc2's bias is outside it)."""
    # the clamp's two outputs (read and write the 2f-wide fc1 output: 2 x (f + f)) and their cat (read and write 2f)
    return (8 * moe.expert_ffn_hidden / etp) * BF16_BYTES if moe.clamped_glu else 0.0


def expert_launch_exposed_s(host_fwd_s: float, host_bwd_s: float, gpu_fwd_s: float, gpu_bwd_s: float) -> float:
    """Seconds the per-expert launches add to one MoE layer and micro-batch: the host time beyond the GPU
    work it can run ahead of. Forward: the dropless dispatch waits on the host for the received-token counts
    (tokens per expert, D2H: HybridEP metadata_preprocessing, DeepEP's dispatch, alltoall's splits), which
    drains the launch queue, so the expert launches can only overlap the GPU work issued after that sync
    and before the experts' results are needed (``gpu_fwd_s``: the dispatch kernel and the experts' forward
    GEMMs). Backward: no host sync (m_splits and the dispatch handle are saved from the forward), so the host
    runs ahead of the layer's whole backward (``gpu_bwd_s``)."""
    return max(0.0, host_fwd_s - gpu_fwd_s) + max(0.0, host_bwd_s - gpu_bwd_s)


def layer_time(ctx: _Ctx, layer: Layer) -> LayerTime:
    """One layer, one micro-batch (memoised in ``ctx.cache``: per run, or per shape in a search)."""
    hit = ctx.cache.get(layer)
    if hit is None:
        hit = ctx.cache[layer] = _layer_time_uncached(ctx, layer)
    return hit


def _layer_time_uncached(ctx: _Ctx, layer: Layer) -> LayerTime:
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    h = cfg.model.hidden
    f = layer_flops(layer, h, cfg.batch.seq_len)
    t = ctx.tokens
    out: dict[str, float] = {}
    mixer = layer.mixer
    # --- GEMMs (weight matmuls), attention and Gated DeltaNet kernels
    mlp = layer.mlp
    imb = cfg.rows_factor
    rows = t * mlp.top_k * imb * par.etp if isinstance(mlp, MoE) else 0.0
    gemm = grouped = cast = 0.0
    # weight-gradient seconds that delay_wgrad_compute moves out of the backward nodes (merged_layer_s): the
    # routed experts' (TEGroupedMLP.backward_dw) and the attention block's TE linears with the shared
    # experts' (_BackwardDWWrapper), which is Gated DeltaNet's in_proj / out_proj from 0.17 (its backward_dw,
    # megatron.fields.gdn_backward_dw; before, EP overlap does not run with it); the router is not a TE linear
    wgrad_attn = wgrad_experts = 0.0
    gdn_dw = gdn_backward_dw(cfg.mcore_version)
    for g in layer_gemms(layer, h):
        g_time, g_cast, g_wgrad = _gemm_time(ctx, g, rows, mlp.num_experts / par.ep if isinstance(mlp, MoE) else 1)
        if g.kind == "expert":
            grouped += g_time
            wgrad_experts += g_wgrad
        else:
            gemm += g_time
            if g.kind in ("attn", "shared") or (g.kind == "gdn" and gdn_dw):
                wgrad_attn += g_wgrad
        cast += g_cast
    out["gemm"], out["grouped_gemm"] = gemm, grouped
    mixer_norm = f.attn_proj_flops - sum(g.fwd_flops for g in layer_gemms(layer, h) if g.kind == "attn")
    out["gemm"] += TRAIN * mixer_norm * t / ctx.gemm_rate  # MLA low-rank norms (Megatron counts them)
    gdn_fwd = 0.0
    if isinstance(mixer, GatedDeltaNet):
        gdn_fwd, gdn_bwd = gdn_kernel_parts_s(cfg, mixer, TRAIN * f.gdn_core_flops * t, gpu, cal)
        out["linear_attention"] = gdn_fwd + gdn_bwd
    else:
        out["attention"] = _attention_s(ctx, mixer)
    # --- element-wise work: proportional to what the layer saves for backward
    la = layer_activation(layer, h, frozenset(), frozenset(), None)
    saved = la.token_bytes * t + la.row_bytes * rows / par.etp
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    glue = glue_s = 0.0
    if isinstance(mixer, GatedDeltaNet):  # the GDN mixer's traffic op by op (gdn_glue_s), not per saved byte
        saved -= gdn_saved_bytes(layer, h) * t
        glue_s = sum(gdn_glue_s(mixer, cfg.batch.mbs, t, gpu, cal))
    glue_fwd_bytes = glue_bwd_bytes = 0.0
    if isinstance(mixer, Attention):  # eager RoPE under a YaRN concentration factor (gpt-oss)
        glue += sum(rope_glue_bytes(mixer)) * t
    if isinstance(mlp, MoE) and not cfg.experts_op_fused:  # clamped GLU / expert bias glue (gpt-oss)
        glue_fwd_bytes, glue_bwd_bytes = (b * rows for b in expert_glue_bytes(mlp, h, par.etp, expert_probs_bytes(cfg.dispatcher)))
        glue += glue_fwd_bytes + glue_bwd_bytes
    out["elementwise"] = (cal.elementwise_traffic * saved + glue) / hbm + glue_s + cast
    # --- TP collectives (sequence parallel): AG + RS forward, RS + AG backward, per TP block
    if par.tp > 1:
        msg = t * h * BF16_BYTES
        bw = _busbw(gpu, par.tp, 1, cal)
        blocks = 1 + (1 if isinstance(mlp, DenseMLP) or (isinstance(mlp, MoE) and mlp.has_shared) else 0)
        out["tp_comm"] = 4 * blocks * _ring_time(msg, par.tp, bw) * (1 - (cal.tp_hidden if cfg.tp_comm_overlap else 0.0))
    # --- CP (context parallel): exposed communication of the attention layer
    cp_fwd = 0.0
    if par.cp > 1 and isinstance(mixer, Attention):
        out["cp_comm"], cp_fwd = _cp_comm(ctx, mixer, out["attention"])
    elif par.cp > 1 and isinstance(mixer, GatedDeltaNet):
        # Megatron-Core runs Gated DeltaNet head-parallel inside the CP group: an all-to-all of the
        # projected q, k, v, z, b, a (in_proj_dim) before the recurrence and of the output after it (the
        # "HP-to-CP all-to-all" of recompute label gdn_norm_out), forward and backward.
        vol = (mixer.in_proj_dim + mixer.value_dim) * t * BF16_BYTES
        vol *= (par.cp - 1) / par.cp
        remote = max(0.0, 1.0 - cp_ranks_per_domain(par.tp, par.cp, gpu.nvlink_domain) / par.cp)
        one = max(vol * (1 - remote) / (gpu.nvlink_bw_bytes_per_s * cal.nvlink_eff),
                  vol * remote / (gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff))
        out["cp_comm"], cp_fwd = 2 * one, one
    # --- EP dispatch / combine
    ep_fwd_s = ep_dispatch_fwd_s = ep_once_s = 0.0
    if isinstance(mlp, MoE):
        d, c, perm = _ep_kernels(ctx, mlp)
        ep_dispatch_fwd_s = d
        rmap = routing_map_allgather_s(ctx, mlp)  # exposed: the host syncs on the dispatch metadata after it
        ep_raw, ep_fwd_s, ep_once_s = _ep_totals(d, c, perm, rmap)
        if cfg.ep_overlap and cfg.ep_overlap_allowed:
            # the merged forward/backward schedule splits each layer into sub-modules on two streams,
            # scheduled from the host with events per sub-module (Megatron-Core combined 1F1B for EP
            # A2A overlap): a fixed host cost per layer and micro-batch, which small layers cannot
            # amortise and which a CUDA graph of the captured scopes removes
            share = min(1.0, sum(GRAPH_LAUNCH_SHARE.get(s, 0.0) for s in sorted(cfg.cuda_graph_scopes)))
            stolen = ep_comm_sms(cfg, gpu, cal) / gpu.sms
            attn_block = sum(out.get(k, 0.0) for k in ("gemm", "attention", "linear_attention"))
            overlap = (d, c, perm, attn_block, out.get("grouped_gemm", 0.0), stolen, cal.ep_overlap_eff,
                       *((wgrad_attn, wgrad_experts) if cfg.delay_wgrad_on else (0.0, 0.0)))
            steady = ep_overlap_exposed_s(*overlap)
            # what a model chunk's first layer exposes beyond the steady state (step_parts adds it per chunk)
            ctx.cache[(EP_CHUNK_EDGE, layer)] = max(0.0, ep_overlap_exposed_s(*overlap, carry=False) - steady)
            out["ep_comm"] = (steady
                              + rmap + cal.ep_overlap_layer_s * (1 - share))
        else:
            out["ep_comm"] = ep_raw
    # --- recompute: forward cost of what is rebuilt
    rc = cfg.recompute
    fwd = 1 / TRAIN
    if rc.granularity == "full":
        compute = sum(out.get(k, 0.0) for k in ("gemm", "grouped_gemm", "attention", "linear_attention", "elementwise"))
        # the GDN kernels' forward share is their own (gdn_kernel_parts_s), not a third
        compute += gdn_fwd / fwd - out.get("linear_attention", 0.0) if gdn_fwd else 0.0
        out["recompute"] = compute * fwd + ep_fwd_s + cp_fwd + out.get("tp_comm", 0.0) / 2
    elif rc.granularity == "selective":
        r = 0.0
        mods = rc.modules
        if "core_attn" in mods:
            r += out.get("attention", 0.0) * fwd
        if "mla_up_proj" in mods and isinstance(mixer, Attention) and mixer.is_mla:
            r += sum(_gemm_time(ctx, g, 0.0, 1)[0] for g in layer_gemms(layer, h) if g.name in ("q_up", "kv_up")) * fwd
        if "layernorm" in mods:
            r += 2 * 2 * h * BF16_BYTES * t / hbm
        if isinstance(mlp, MoE):
            if "moe" in mods:
                r += out.get("grouped_gemm", 0.0) * fwd + ep_fwd_s + glue_fwd_bytes / hbm
                if mlp.has_shared:
                    r += TRAIN * f.shared_expert_flops * t * fwd / ctx.gemm_rate
            else:
                if "moe_act" in mods:
                    r += 3 * mlp.expert_ffn_hidden / par.etp * rows * BF16_BYTES / hbm
                    if not cfg.experts_op_fused:
                        r += expert_glue_clamp_fwd_bytes(mlp, par.etp) * rows / hbm
                if "shared_experts" in mods and mlp.has_shared:
                    r += f.shared_expert_flops * t / ctx.gemm_rate
        if "mlp" in mods and isinstance(mlp, DenseMLP):
            r += f.dense_mlp_flops * t / ctx.gemm_rate
        if "gdn_norm_out" in mods and isinstance(mixer, GatedDeltaNet):
            r += 2 * mixer.value_dim * BF16_BYTES * t / hbm
        out["recompute"] = r
    # --- host launch overhead, reduced by CUDA graphs. Dropless MoE syncs the host every layer (tokens
    # per expert, D2H), which drains the launch queue, so the launches after it show in the step
    # rather than hiding behind GPU work; graph-captured scopes launch as one graph (Megatron-Core
    # CUDA graph docs). Fitted (the G09 graphs on/off pair), per layer per micro-batch.
    share = min(1.0, sum(GRAPH_LAUNCH_SHARE.get(s, 0.0) for s in sorted(cfg.cuda_graph_scopes)))
    if isinstance(mlp, MoE) and cfg.dispatcher in FLEX_DISPATCHERS and par.ep > 1:
        # the flex dispatchers compute the dispatch layout in one fused kernel: router + EP preprocess
        # launch 17 kernels instead of 31 (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization,
        # 2.2.1), i.e. 14/31 of those scopes' share, where they are not graph-captured
        uncaptured = sum(GRAPH_LAUNCH_SHARE[s] for s in ("moe_router", "moe_preprocess") if s not in cfg.cuda_graph_scopes)
        share = min(1.0, share + FLEX_PREPROCESS_FUSED * uncaptured)
    out["launch_overhead"] = cal.launch_overhead_per_layer_s * (1 - share)
    if isinstance(mlp, MoE):
        # per-expert launches of the routed experts (expert_host_s), after the same host sync: forward they
        # can run ahead of the dispatch and the experts' forward GEMMs, backward of the layer's whole backward
        host_fwd_s, host_bwd_s = expert_host_s(mlp.num_experts / par.ep, rows, cfg.precision, cfg.cuda_graph_scopes, cal,
                                       cfg.experts_grouped_tensor)
        compute = sum(out.get(k, 0.0) for k in ("gemm", "grouped_gemm", "attention", "elementwise"))
        gpu_fwd_s = ep_dispatch_fwd_s + out["grouped_gemm"] / TRAIN
        gpu_bwd_s = compute * (TRAIN - 1) / TRAIN + out.get("linear_attention", 0.0) - gdn_fwd + ep_once_s
        if experts_recomputed(rc):
            # the recomputed forward (moe or full recompute: megatron/core/transformer/moe/moe_layer.py
            # checkpoints the whole MoE block, dispatch included) syncs the host again and launches the
            # experts' forward again, with the same window as the first forward; the layer's backward
            # launches follow it, so the recompute is not GPU work they can run ahead of
            out["launch_overhead"] += expert_launch_exposed_s(host_fwd_s, 0.0, gpu_fwd_s, 0.0)
        else:
            gpu_bwd_s += out.get("recompute", 0.0)
        out["launch_overhead"] += expert_launch_exposed_s(host_fwd_s, host_bwd_s, gpu_fwd_s, gpu_bwd_s)
    if isinstance(mixer, GatedDeltaNet) and not gdn_graph_captured(cfg.cuda_graph_scopes):
        # the fla chunk kernels are ~20 Triton launches from Python per call (fwd + bwd), after the
        # same host sync: gdn_launch_s, the fixed part of fla's benchmarks (Grace or x86 host)
        out["launch_overhead"] += sum(gdn_launch_s(gpu, cal))
    return LayerTime(**out)


# Host memory bandwidth per GPU where a hardware entry gives none, by host link class: x86 DGX hosts
# (2 sockets x 8 channels DDR5-4800 = 614 GB/s over 8 GPUs) and Grace (512 GB/s LPDDR5X per Grace over
# its 2 GPUs); the catalog entries carry their own figures and sources.
HOST_MEM_BW_DEFAULT = {"pcie4": 76.8e9, "pcie5": 76.8e9, "pcie6": 76.8e9, "c2c": 256.0e9}


def cpu_adam_params_per_s(gpu: GPUSpec, cal: Calibration, bf16_moments: bool) -> float:
    """Parameters per second one GPU process updates with the CPU Adam of optimizer offload.

    The fused CPU AdamW streams each parameter's fp32 master (read + write), its gradient (read) and
    both moments (read + write) through host memory, with the host's memory bandwidth shared by the
    GPUs of the node (``host_mem_bw_bytes_per_s`` per GPU); ``cpu_adam_mem_eff`` is the share of that
    bandwidth it reaches (fitted to the offload curve, measured_variants.csv G08)."""
    moment_b = BF16_BYTES if bf16_moments else FP32_BYTES
    bytes_per_param = 2 * FP32_BYTES + FP32_BYTES + 2 * 2 * moment_b
    bw = gpu.host_mem_bw_bytes_per_s or HOST_MEM_BW_DEFAULT.get(gpu.host_link, HOST_MEM_BW_DEFAULT["pcie5"])
    return bw * cal.cpu_adam_mem_eff / bytes_per_param


def offload_s(cfg: RunConfig, gpu: GPUSpec, cal: Calibration, params: float) -> float:
    """Seconds per step of the CPU share (``params`` per GPU) of the optimizer step.

    Megatron's HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)
    copies the offloaded gradients to the host (D2H), runs the CPU fused AdamW synchronously and copies
    the updated parameters back (H2D); nothing of it overlaps forward/backward. With
    ``overlap_cpu_optimizer_d2h_h2d`` the copies of one parameter group run while the CPU updates
    another, so the step costs the longer of the two (plus one group's copies, neglected)."""
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    link = gpu.host_link_achieved_bytes_per_s or gpu.host_link_bw_bytes_per_s
    # params H2D: the GPU copy is the fp32 master without the precision-aware optimizer, else bf16
    param_b = BF16_BYTES if cfg.precision_aware else FP32_BYTES
    copy_s = params * (grad_b + param_b) / link
    cpu_s = params / cpu_adam_params_per_s(gpu, cal, cfg.bf16_moments)
    return max(cpu_s, copy_s) if cfg.offload_overlap else cpu_s + copy_s


# MFU is taken against the dense BF16 peak at every precision, as Megatron-LM's reports and most papers give it
# (DeepSeek-V3's, Llama 3's): against the FP8 peak an FP8 plan would read half as efficient as a BF16 plan at the same
# speed. Said beside the number ("MFU (vs BF16 peak)", JSON mfu_peak).
MFU_PEAK = "bf16"


@dataclass(frozen=True)
class TimeEstimate:
    step_time_s: float
    breakdown_s: dict[str, float]
    tflops_per_gpu: float
    mfu: float
    tokens_per_s_per_gpu: float
    flops_per_token: float
    microbatches: int
    slowest_rank: int
    peak_flops: float
    band_log: float = 0.0  # the calibration's cross-validated error (log units): the estimate's band
    # below the estimate, where the model has features no fitted run has (outside_fit): wider, from the
    # measured runs of such models (Calibration.out_of_fit_shortfall_log); else band_log
    band_low_log: float = 0.0
    outside_fit: tuple[str, ...] = ()  # those features (models.spec.MODEL_FEATURES names)
    # the largest shortfall (log of measured / estimated step time) of the measured runs of models with those
    # features (Calibration.out_of_fit_shortfall_log)
    outside_fit_shortfall_log: float = 0.0

    @property
    def band_below_log(self) -> float:
        """The band below the estimate (log units): the fit's, or wider outside it."""
        return max(self.band_low_log, self.band_log)

    def band(self, value: float) -> tuple[float, float]:
        """(low, high) of a throughput figure: value x exp(-band_low_log), value x exp(band_log)."""
        return value * math.exp(-self.band_below_log), value * math.exp(self.band_log)

    @property
    def tflops_range(self) -> tuple[float, float]:
        return self.band(self.tflops_per_gpu)

    @property
    def outside_fit_note(self) -> str | None:
        """One sentence where the model has features no fitted run has (:attr:`outside_fit`), else None."""
        if not self.outside_fit:
            return None
        what = " or ".join(MODEL_FEATURES[f] for f in self.outside_fit)
        lo, hi = self.tflops_range
        return (f"outside the fit: no fitted run has {what}; measured runs of such models took up to "
                f"{math.exp(self.outside_fit_shortfall_log):.2f}x the estimated step time (docs/calibration.md, "
                f"'Outside the fit'), so the band reaches {-math.expm1(-self.band_below_log):.0%} "
                f"below the estimate: {lo:,.0f}-{hi:,.0f} TFLOP/s per GPU")

    @property
    def tokens_per_s_range(self) -> tuple[float, float]:
        return self.band(self.tokens_per_s_per_gpu)

    def as_dict(self) -> dict[str, object]:
        return {
            "step_time_s": self.step_time_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "tflops_range": list(self.tflops_range),
            "mfu": self.mfu,
            "mfu_peak": MFU_PEAK,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s_range": list(self.tokens_per_s_range),
            "error_band": math.expm1(self.band_log),  # above the estimate (the fit's; ties use it)
            "error_band_below": -math.expm1(-self.band_below_log),
            "outside_fit": list(self.outside_fit),
            "outside_fit_note": self.outside_fit_note,
            "flops_per_token": self.flops_per_token,
            "microbatches": self.microbatches,
            "time_breakdown_s": dict(self.breakdown_s),
        }


def head_time(ctx: _Ctx, loss: bool, mtp: int) -> dict[str, float]:
    """:func:`_edge_time` of a stage's (loss, MTP) heads, memoised like layer times (read only)."""
    key = ("head", loss, mtp)
    hit = ctx.cache.get(key)
    if hit is None:
        hit = ctx.cache[key] = _edge_time(ctx, Stage((), False, mtp, loss))
    return hit


def _edge_time(ctx: _Ctx, stage: Stage) -> dict[str, float]:
    """Embedding, output layer + cross-entropy and MTP extras on a stage, one micro-batch."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    spec = cfg.model
    out: dict[str, float] = {}
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    heads = (1 if stage.loss else 0) + stage.mtp
    if heads:
        logits = logits_gemm(spec, cfg.parallel.tp)
        g_time, g_cast, _ = _gemm_time(ctx, logits, 0.0, 1)
        out["gemm"] = heads * g_time
        v_shard = spec.vocab / cfg.parallel.tp
        # cross-entropy: softmax over the vocabulary shard in fp32, forward and backward
        out["elementwise"] = heads * (3 * v_shard * ctx.seq_tokens * FP32_BYTES / hbm + g_cast)
    if stage.mtp and spec.mtp_layer is not None:
        lt = layer_time(ctx, spec.mtp_layer)
        for k, v in lt.__dict__.items():
            out[k] = out.get(k, 0.0) + stage.mtp * v
        eh_proj = mtp_eh_proj_gemm(spec)
        out["gemm"] = out.get("gemm", 0.0) + stage.mtp * _gemm_time(ctx, eh_proj, 0.0, 1)[0]
    return out


def _work_time(ctx: _Ctx, work: tuple[tuple[tuple[Layer, int], ...], tuple[tuple[bool, int], ...]]) -> dict[str, float]:
    """Seconds per time item of one micro-batch through a rank's layers and heads (:func:`pipeline_rank_work`),
    memoised like layer times (read only)."""
    hit = ctx.cache.get(work)
    if hit is None:
        groups, heads = work
        acc: dict[str, float] = {}
        for layer, n in groups:
            for k, v in layer_time(ctx, layer).__dict__.items():
                acc[k] = acc.get(k, 0.0) + n * v
        for loss, mtp in heads:
            for k, v in head_time(ctx, loss, mtp).items():
                acc[k] = acc.get(k, 0.0) + v
        hit = ctx.cache[work] = acc
    return hit


def _ep_chunk_edges_s(ctx: _Ctx, groups: tuple[tuple[Layer, int], ...]) -> float:
    """EP exposure that one micro-batch's model chunks on a rank add beyond their layers' steady state under
    EP A2A overlap: each merged chunk run (TransformerModelChunkSchedulePlan.run) starts its first layer with
    both streams idle and ends by waiting on both events, so per chunk one layer runs as
    ``merged_layer_s(carry=False)`` (with delay_wgrad_compute: no earlier attention wgrad for its combine_bwd
    to run beside). Chunks: the rank's VPP model chunks, at most one per MoE layer; the layer: the rank's
    MoE layers' mean (read from the layer cache that :func:`layer_time` fills)."""
    edges = [(ctx.cache.get((EP_CHUNK_EDGE, layer), 0.0), n) for layer, n in groups if isinstance(layer.mlp, MoE)]
    layers = sum(n for _, n in edges)
    if not layers:
        return 0.0
    return min(ctx.cfg.parallel.vpp, layers) * sum(e * n for e, n in edges) / layers


@lru_cache(maxsize=4096)
def pipeline_rank_work(spec: ModelSpec, pipe: Pipeline) -> tuple[tuple[tuple[tuple[Layer, int], ...], tuple[tuple[bool, int], ...]], ...]:
    """Per pipeline rank: distinct layers with counts over its chunks, and its (loss, MTP) heads. Ranks
    with the same work share one tuple object (step_parts costs each distinct work once)."""
    out = []
    same: dict[object, Any] = {}
    for stages in pipe.rank_stages:
        counts: dict[Layer, int] = {}
        for st in stages:
            for layer, n in stage_groups(spec, st):
                counts[layer] = counts.get(layer, 0) + n
        heads = tuple((st.loss, st.mtp) for st in stages if st.loss or st.mtp)
        work = (tuple(counts.items()), heads)
        out.append(same.setdefault(work, work))
    return tuple(out)


def bubble_microbatches(par: Parallel) -> float:
    """Pipeline bubble of (interleaved) 1F1B in micro-batch times of the slowest rank: (PP - 1) / VPP
    (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters", section 2.2)."""
    return (par.pp - 1) / par.vpp if par.pp > 1 else 0.0


@dataclass(frozen=True)
class StepParts:
    """What a step is assembled from (the timeline lays these out; estimate_time sums them).

    ``rank_microbatch_s``: per pipeline rank, seconds per time item of one micro-batch through all its
    chunks, forward + backward. The pipeline runs at the slowest rank's pace (``slowest_rank``).
    ``dp_*_s``: the whole gradient reduce-scatter / parameter all-gather, and the part of each that
    is not hidden behind the backward / forward (``breakdown_s["dp_comm"]`` is the exposed sum)."""

    rank_microbatch_s: tuple[dict[str, float], ...]
    slowest_rank: int
    microbatches: int
    microbatch_s: float
    dp_reduce_scatter_s: float
    dp_all_gather_s: float
    dp_reduce_scatter_exposed_s: float
    dp_all_gather_exposed_s: float
    breakdown_s: dict[str, float]


def _pp_comm_s(ctx: _Ctx) -> float | None:
    """Seconds of one micro-batch's PP send / recv on a rank: activations forward and gradients backward
    at each of its VPP chunk boundaries (None without PP)."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    if par.pp <= 1:
        return None
    p2p = ctx.tokens * cfg.model.hidden * BF16_BYTES
    bw = gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff if par.gpus > gpu.nvlink_domain else gpu.nvlink_bw_bytes_per_s
    return 2 * par.vpp * p2p / bw


def _pp_exposed_s(pp_comm: float, vpp: int, rank_s: float) -> float:
    """The exposed part of :func:`_pp_comm_s` on a rank whose micro-batch takes ``rank_s``. With VPP > 1
    Megatron Bridge turns on overlap_p2p_comm (training/comm_overlap.py): the interleaved schedule posts
    each chunk's send / receive asynchronously and waits only before that chunk's compute, so a transfer
    shows only where it outlasts one chunk's compute; with VPP = 1 they are batched (batch_p2p_comm) in
    the critical path."""
    if vpp <= 1:
        return pp_comm
    one, chunk = pp_comm / (2 * vpp), rank_s / (2 * vpp)
    return 2 * vpp * max(0.0, one - chunk)


def step_parts(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
               pipeline: Pipeline | None = None, validated: bool = False,
               layer_cache: dict[Any, dict[Any, Any]] | None = None) -> StepParts:
    spec, par, batch = cfg.model, cfg.parallel, cfg.batch
    if not validated:
        validate(spec, par, batch, cfg.mcore_version, cfg.gpu, cfg.te_version)
    pipe = pipeline or build_pipeline(spec, par)
    m = batch.microbatches(par.dp)
    ctx = make_ctx(cfg, gpu, cal, layer_cache)
    # --- per pipeline rank, one micro-batch through all its chunks
    per_rank: list[dict[str, float]] = []
    worst: dict[str, float] = {}
    worst_total, worst_rank = -1.0, 0
    pp_comm = _pp_comm_s(ctx)
    done: dict[int, tuple[dict[str, float], float]] = {}  # ranks with the same work (one tuple) cost it once
    for r, work in enumerate(pipeline_rank_work(spec, pipe)):
        hit = done.get(id(work))
        if hit is not None:
            acc, total = dict(hit[0]), hit[1]
            per_rank.append(acc)
            if total > worst_total:
                worst, worst_total, worst_rank = acc, total, r
            continue
        acc = dict(_work_time(ctx, work))
        edge = _ep_chunk_edges_s(ctx, work[0])
        if edge:
            acc["ep_comm"] = acc.get("ep_comm", 0.0) + edge
        if pp_comm is not None:
            acc["pp_comm"] = _pp_exposed_s(pp_comm, par.vpp, sum(acc.values()))
        per_rank.append(acc)
        total = sum(acc.values())
        done[id(work)] = (acc, total)
        if total > worst_total:
            worst, worst_total, worst_rank = acc, total, r
    t_mb = worst_total
    breakdown = {k: v * m for k, v in worst.items()}
    breakdown["pp_bubble"] = bubble_microbatches(par) * t_mb
    # --- data parallel: grad reduce-scatter + param all-gather, overlapped with the last backward
    dense_p, expert_p = average_params_per_gpu(spec, par)
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    dp_group, edp = par.dp * par.cp, par.edp
    dense_bw = _busbw(gpu, dp_group, par.tp, cal)
    expert_bw = _busbw(gpu, edp, par.ep * par.etp, cal)
    if cfg.fsdp is not None or cfg.optimizer != "adam":  # Megatron-FSDP / Muon: moeplan.fsdp, moeplan.muon
        extra, dp_parts = _sharded_dp_and_optimizer_s(ctx, pipe, t_mb, breakdown["pp_bubble"], dense_p, expert_p,
                                                      dense_bw, expert_bw)
        breakdown.update(extra)
        items = {k: breakdown.get(k, 0.0) for k in TIME_ITEMS}
        return StepParts(tuple(per_rank), worst_rank, m, t_mb, *dp_parts, items)
    rs_time = ag_time = 0.0  # gradient reduce-scatter, parameter all-gather (distributed optimizer)
    if dp_group > 1:
        rs_time += _ring_time(dense_p * grad_b / dp_group, dp_group, dense_bw)
        ag_time += _ring_time(dense_p * BF16_BYTES / dp_group, dp_group, dense_bw)
    if edp > 1:
        rs_time += _ring_time(expert_p * grad_b / edp, edp, expert_bw)
        ag_time += _ring_time(expert_p * BF16_BYTES / edp, edp, expert_bw)
    # overlap_grad_reduce: buckets reduce during the last micro-batch's backward and the pipeline
    # cool-down; overlap_param_gather: buckets gather during the first forward and the warm-up.
    bubble = breakdown["pp_bubble"]
    if cfg.dp_overlap:
        rs_exposed, ag_exposed = max(0.0, rs_time - (2 * t_mb / 3 + bubble)), max(0.0, ag_time - (t_mb / 3 + bubble))
    else:  # without overlap_grad_reduce / overlap_param_gather both run after / before the micro-batches
        rs_exposed, ag_exposed = rs_time, ag_time
    breakdown["dp_comm"] = rs_exposed + ag_exposed
    # --- optimizer step (GPU share) and CPU offload
    shard = dense_p / dp_group + expert_p / edp
    gpu_share = 1.0 - cfg.optimizer_offload
    breakdown["optimizer"] = shard * gpu_share * cal.optimizer_bytes_per_param / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
    if cfg.optimizer_offload > 0:
        breakdown["offload"] = offload_s(cfg, gpu, cal, shard * cfg.optimizer_offload)
    items = {k: breakdown.get(k, 0.0) for k in TIME_ITEMS}
    return StepParts(tuple(per_rank), worst_rank, m, t_mb, rs_time, ag_time, rs_exposed, ag_exposed, items)


def _sharded_dp_and_optimizer_s(ctx: _Ctx, pipe: Pipeline, t_mb: float, bubble: float, dense_p: float,
                                expert_p: float, dense_bw: float, expert_bw: float,
                                ) -> tuple[dict[str, float], tuple[float, float, float, float]]:
    """dp_comm, optimizer and offload seconds with Megatron-FSDP (moeplan.fsdp.dp_comm_s) or Muon's
    layer-wise distributed optimizer (moeplan.muon): DDP all-reduces the gradients (2 x a
    reduce-scatter), the updated weights are all-gathered after the step, and each rank runs Newton-Schulz
    on its share of the matrices at the bf16 matmul rate (muon_fp32_matmul_prec 'medium'). Also the
    (reduce, gather, reduce exposed, gather exposed) seconds StepParts carries."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    spec, par = cfg.model, cfg.parallel
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    dp_group, edp = par.dp * par.cp, par.edp
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    out: dict[str, float] = {}
    sh = fsdp.shards(cfg)
    if cfg.fsdp is not None:
        mean_unit = (dense_p + expert_p) * par.pp / max(1, spec.num_layers)
        across = max(dp_group * par.tp, edp * par.ep * par.etp) > gpu.nvlink_domain
        sms = fsdp.COMM_SMS_SCALEOUT if across else fsdp.COMM_SMS_NVLINK
        exposed, raw = fsdp.dp_comm_s(cfg, dense_p, expert_p, mean_unit, t_mb, bubble, dense_bw, expert_bw,
                                      grad_b, _ring_time, sms / gpu.sms)
        rs, ag = raw["grad_reduce_s"], raw["param_all_gather_s"]
        share = rs / (rs + ag) if rs + ag else 1.0
        dp_parts = (rs, ag, exposed * share, exposed * (1 - share))
    else:  # Muon with DDP (no distributed optimizer): all-reduce, then the layer-wise gather
        rs = 2 * (_ring_time(dense_p * grad_b / dp_group, dp_group, dense_bw)
                  + _ring_time(expert_p * grad_b / edp, edp, expert_bw))
        ag = (_ring_time(dense_p * BF16_BYTES / dp_group, dp_group, dense_bw)
              + _ring_time(expert_p * BF16_BYTES / edp, edp, expert_bw)) if sh.optimizer else 0.0
        if cfg.dp_overlap and cfg.muon_layer_wise and muon_dp_overlap(cfg.mcore_version):
            dp_parts = (rs, ag, max(0.0, rs - (2 * t_mb / 3 + bubble)), max(0.0, ag - (t_mb / 3 + bubble)))
        else:  # core_v0.16 (any Muon) and plain muon: overlap_grad_reduce / overlap_param_gather asserted off
            dp_parts = (rs, ag, rs, ag)
        exposed = dp_parts[2] + dp_parts[3]
    out["dp_comm"] = exposed
    # --- optimizer step on this GPU's shard (slowest pipeline rank); CPU offload of the Adam state
    d_div = dp_group if sh.optimizer else 1
    e_div = edp if sh.optimizer else 1
    worst_opt = worst_off = 0.0
    for (groups, heads), stages in zip(pipeline_rank_work(spec, pipe), pipe.rank_stages):
        dense, expert, _ = rank_params(spec, stages, par.tp, par.ep * par.etp)
        ns_s = muon_shard = m_dense = m_expert = 0.0
        if cfg.optimizer == "muon":
            mats = muon.rank_matrices(spec, groups, sum(mtp for _, mtp in heads), par.tp, par.ep, par.etp)
            m_dense, m_expert = muon.matrix_params(mats)
            m_dense, m_expert = min(m_dense, dense), min(m_expert, expert)
            ns = muon.newton_schulz(mats, cfg.muon_ns_steps, cfg.muon_tp_mode)
            ns_s = ((ns.dense_flops / d_div + ns.expert_flops / e_div) / _gemm_rate(gpu, "bf16")
                    + (ns.dense_bytes / d_div + ns.expert_bytes / e_div) / hbm)
            if ns.tp_gather_bytes:
                ns_s += ns.tp_gather_bytes / d_div / _busbw(gpu, par.tp, 1, cal)
            muon_shard = m_dense / d_div + m_expert / e_div
        adam_shard = (dense - m_dense) / d_div + (expert - m_expert) / e_div
        opt = (adam_shard * (1.0 - cfg.optimizer_offload) * cal.optimizer_bytes_per_param
               + muon_shard * (cal.optimizer_bytes_per_param - muon.MOMENT_TRAFFIC_BYTES)) / hbm + ns_s
        off = offload_s(cfg, gpu, cal, adam_shard * cfg.optimizer_offload) if cfg.optimizer_offload > 0 else 0.0
        if opt + off > worst_opt + worst_off:
            worst_opt, worst_off = opt, off
    out["optimizer"] = worst_opt
    if worst_off:
        out["offload"] = worst_off
    return out, dp_parts


def _layer_hidden_comm(ctx: _Ctx, layer: Layer) -> dict[str, float]:
    """Seconds of one layer's TP / CP / EP communication (one micro-batch, fwd + bwd) that run behind
    compute: the whole collective less its exposed part in :func:`layer_time`."""
    cfg, par, lt = ctx.cfg, ctx.cfg.parallel, layer_time(ctx, layer)
    out: dict[str, float] = {}
    if par.tp > 1 and cfg.tp_comm_overlap and ctx.cal.tp_hidden < 1:
        out["tp_comm"] = lt.tp_comm * ctx.cal.tp_hidden / (1 - ctx.cal.tp_hidden)
    if par.cp > 1 and isinstance(layer.mixer, Attention):  # the ring with no attention to hide behind
        out["cp_comm"] = max(0.0, _cp_comm(ctx, layer.mixer, 0.0)[0] - lt.cp_comm)
    if isinstance(layer.mlp, MoE):
        out["ep_comm"] = max(0.0, _ep_comm(ctx, layer.mlp)[0] - lt.ep_comm)
    return {k: v for k, v in out.items() if v > 0}


def hidden_comm_s(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
                  pipeline: Pipeline | None = None) -> tuple[dict[str, float], ...]:
    """Per pipeline rank, seconds of TP / CP / EP / PP communication per micro-batch that overlap compute
    (not in the step time, whose ``*_comm`` items are the exposed parts); the timeline draws them."""
    spec = cfg.model
    pipe = pipeline or build_pipeline(spec, cfg.parallel)
    ctx = make_ctx(cfg, gpu, cal)
    out = []
    pp_comm = _pp_comm_s(ctx)
    for rank_work in pipeline_rank_work(spec, pipe):
        groups, heads = rank_work
        acc: dict[str, float] = {}
        work = list(groups) + [(spec.mtp_layer, mtp) for _, mtp in heads if mtp and spec.mtp_layer is not None]
        for layer, n in work:
            for k, v in _layer_hidden_comm(ctx, layer).items():
                acc[k] = acc.get(k, 0.0) + n * v
        edge = _ep_chunk_edges_s(ctx, groups)  # exposed in step_parts, so not hidden
        if edge and acc.get("ep_comm"):
            acc["ep_comm"] = max(0.0, acc["ep_comm"] - edge)
        if pp_comm is not None:  # the PP send / recv behind the next chunk (overlap_p2p_comm)
            hidden_pp = pp_comm - _pp_exposed_s(pp_comm, cfg.parallel.vpp, sum(_work_time(ctx, rank_work).values()))
            if hidden_pp > 0:
                acc["pp_comm"] = hidden_pp
        out.append(acc)
    return tuple(out)


def estimate_time(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
                  pipeline: Pipeline | None = None, validated: bool = False,
                  layer_cache: dict[Any, dict[Any, Any]] | None = None) -> TimeEstimate:
    """Step time of a run. ``layer_cache``: a dict shared by estimates of one GPU and one set of
    constants (the planner's search), so a layer is costed once per :func:`layer_shape`."""
    spec, par, batch = cfg.model, cfg.parallel, cfg.batch
    parts = step_parts(cfg, gpu, cal, pipeline, validated, layer_cache)
    items = parts.breakdown_s
    step = sum(items.values())
    fpt = flops_per_token(spec, batch.seq_len, par.tp).total_flops
    tokens = batch.gbs * batch.seq_len
    tflops = fpt * tokens / step / par.gpus / 1e12
    peak = gpu.peak(MFU_PEAK)  # one convention at every precision: an FP8 run at the same speed has the same MFU
    outside = tuple(f for f in MODEL_FEATURES if f in spec.features and f in cal.out_of_fit_shortfall_log)
    shortfall = max([0.0, *(cal.out_of_fit_shortfall_log[f] for f in outside)])
    return TimeEstimate(step, items, tflops, tflops * 1e12 / peak, tokens / step / par.gpus, fpt, parts.microbatches,
                        parts.slowest_rank, peak, cal.error_band_log, max(cal.error_band_log, shortfall), outside,
                        shortfall)


__all__ = ["Calibration", "DEFAULT_CALIBRATION", "MFU_PEAK", "TIME_ITEMS", "StepParts", "TimeEstimate", "attention_block_tokens",
           "attention_efficiency", "attention_kernel", "attention_rate", "fused_attention_efficiency", "best_cp_comm_type", "expert_glue_bytes", "expert_glue_clamp_fwd_bytes", "rope_glue_bytes", "estimate_time", "hidden_comm_s", "step_parts"]
