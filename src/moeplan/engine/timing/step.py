"""The step: per-rank micro-batch time from the layers and the pipeline edges, the slowest rank times the
micro-batches plus the bubble, exposed DP communication and the optimizer; TFLOP/s, MFU and tokens/s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from moeplan.base.vocab import TE_QUANT_MAPS
from moeplan.engine.activations import BF16_BYTES, FP32_BYTES
from moeplan.engine.flops import flops_per_token, logits_gemm, mtp_eh_proj_gemm
from moeplan.engine.param_shards import average_params_per_gpu
from moeplan.engine.timing.attention import cp_comm
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.context import TIME_ITEMS, Ctx, busbw, derived_ctx, make_ctx, ring_time
from moeplan.engine.timing.gemm import gemm_time
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import EP_CHUNK_EDGE, ep_comm, ep_host_proxied
from moeplan.engine.timing.optimizer import offload_s
from moeplan.engine.timing.quant_map import bf16_config, bf16_layer_counts
from moeplan.engine.timing.pipeline import (bubble_microbatches, pipeline_rank_work, pp_comm_s, pp_exposed_s,
                                            sharded_dp_and_optimizer_s)
from moeplan.hardware import GPUSpec
from moeplan.models.spec import MODEL_FEATURES, Attention, Layer, MoE
from moeplan.run.config import RunConfig
from moeplan.run.parallel import Pipeline, Stage, build_pipeline, validate

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
    # where the run's EP crosses nodes over a fabric without GPU-initiated RDMA (timing.moe.ep_host_proxied): the
    # largest shortfall of the measured runs there (Calibration.proxied_ep_shortfall_log; 0 elsewhere)
    proxied_ep_shortfall_log: float = 0.0

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
        """One sentence where the model has features no fitted run has (:attr:`outside_fit`) or the run's EP crosses
        nodes over a fabric whose absolute level the fit does not pin (:attr:`proxied_ep_shortfall_log`), else None."""
        if not self.outside_fit and not self.proxied_ep_shortfall_log:
            return None
        why = []
        if self.outside_fit:
            what = " or ".join(MODEL_FEATURES[f] for f in self.outside_fit)
            why.append(f"no fitted run has {what}; measured runs of such models took up to "
                       f"{math.exp(self.outside_fit_shortfall_log):.2f}x the estimated step time (docs/calibration.md, "
                       f"'Outside the fit')")
        if self.proxied_ep_shortfall_log:
            why.append(f"EP crosses nodes over a fabric without GPU-initiated RDMA (AWS EFA), whose runs the fit takes "
                       f"as ratios; their absolute steps took up to {math.exp(self.proxied_ep_shortfall_log):.2f}x the "
                       f"estimated time (docs/calibration.md, known gaps)")
        lo, hi = self.tflops_range
        return (f"outside the fit: {'; '.join(why)}, so the band reaches {-math.expm1(-self.band_below_log):.0%} "
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


def head_time(ctx: Ctx, loss: bool, mtp: int) -> dict[str, float]:
    """:func:`_edge_time` of a stage's (loss, MTP) heads, memoised like layer times (read only)."""
    key = ("head", loss, mtp)
    hit = ctx.cache.get(key)
    if hit is None:
        hit = ctx.cache[key] = _edge_time(ctx, Stage((), False, mtp, loss))
    return hit


def _edge_time(ctx: Ctx, stage: Stage) -> dict[str, float]:
    """Embedding, output layer + cross-entropy and MTP extras on a stage, one micro-batch."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    spec = cfg.model
    out: dict[str, float] = {}
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    heads = (1 if stage.loss else 0) + stage.mtp
    if heads:
        logits = logits_gemm(spec, cfg.parallel.tp)
        g_time, g_cast, _ = gemm_time(ctx, logits, 0.0, 1)
        out["gemm"] = heads * g_time
        v_shard = spec.vocab / cfg.parallel.tp
        # cross-entropy: softmax over the vocabulary shard in fp32, forward and backward
        out["elementwise"] = heads * (3 * v_shard * ctx.seq_tokens * FP32_BYTES / hbm + g_cast)
    if stage.mtp and spec.mtp_layer is not None:
        # the MTP modules in BF16 where the run's TE quantization config says so (its "mtp.*" matcher)
        mctx = _bf16_ctx(ctx) if TE_QUANT_MAPS[cfg.te_quant_map].get("mtp") == "bf16" else ctx
        lt = layer_time(mctx, spec.mtp_layer)
        for k, v in lt.__dict__.items():
            out[k] = out.get(k, 0.0) + stage.mtp * v
        eh_proj = mtp_eh_proj_gemm(spec)
        out["gemm"] = out.get("gemm", 0.0) + stage.mtp * gemm_time(mctx, eh_proj, 0.0, 1)[0]
    return out


def _work_time(ctx: Ctx, work: tuple[tuple[tuple[Layer, int], ...], tuple[tuple[bool, int], ...]],
               first: bool = False) -> dict[str, float]:
    """Seconds per time item of one micro-batch through a rank's layers and heads (:func:`pipeline_rank_work`),
    memoised like layer times (read only). ``first``: the first pipeline rank's work."""
    key = ("first rank", work) if first else work
    hit = ctx.cache.get(key)
    if hit is None:
        groups, heads = work
        acc: dict[str, float] = {}
        # the layers kept in BF16 at the start (bf16_start_layers) sit on the first rank, those at the end
        # (bf16_end_layers) on the rank with the loss head
        bf16 = bf16_layer_counts(ctx.cfg, first, any(loss for loss, _ in heads))
        for layer, n in groups:
            n_bf16 = min(n, bf16.get(layer, 0))
            for c, cn in ((ctx, n - n_bf16), (_bf16_ctx(ctx) if n_bf16 else ctx, n_bf16)):
                if cn:
                    for k, v in layer_time(c, layer).__dict__.items():
                        acc[k] = acc.get(k, 0.0) + cn * v
        for loss, mtp in heads:
            for k, v in head_time(ctx, loss, mtp).items():
                acc[k] = acc.get(k, 0.0) + v
        hit = ctx.cache[key] = acc
    return hit


def _bf16_ctx(ctx: Ctx) -> Ctx:
    """The context of the run's layers that run without FP8 / FP4 autocast (moeplan.engine.timing.quant_map:
    the BF16 end layers, MTP under a TE quantization config), made once per run context."""
    hit = ctx.cache.get("bf16_ctx")
    if hit is None:
        hit = ctx.cache["bf16_ctx"] = derived_ctx(ctx, bf16_config(ctx.cfg))
    return hit  # type: ignore[no-any-return]


def _ep_chunk_edges_s(ctx: Ctx, groups: tuple[tuple[Layer, int], ...]) -> float:
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


def holds_bf16_start(cfg: RunConfig, rank: int) -> bool:
    """Whether pipeline rank ``rank`` holds the BF16 start layers (the first rank, where bf16_start_layers is set):
    its work is costed apart from ranks with the same layers."""
    return rank == 0 and bool(cfg.bf16_start_layers)


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
    pp_comm = pp_comm_s(ctx)
    done: dict[int, tuple[dict[str, float], float]] = {}  # ranks with the same work (one tuple) cost it once
    for r, work in enumerate(pipeline_rank_work(spec, pipe)):
        first = holds_bf16_start(cfg, r)  # its own cost
        hit = None if first else done.get(id(work))
        if hit is not None:
            acc, total = dict(hit[0]), hit[1]
            per_rank.append(acc)
            if total > worst_total:
                worst, worst_total, worst_rank = acc, total, r
            continue
        acc = dict(_work_time(ctx, work, first=first))
        edge = _ep_chunk_edges_s(ctx, work[0])
        if edge:
            acc["ep_comm"] = acc.get("ep_comm", 0.0) + edge
        if pp_comm is not None:
            acc["pp_comm"] = pp_exposed_s(pp_comm, par.vpp, sum(acc.values()))
        per_rank.append(acc)
        total = sum(acc.values())
        if not first:
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
    dense_bw = busbw(gpu, dp_group, par.tp, cal)
    expert_bw = busbw(gpu, edp, par.ep * par.etp, cal)
    if cfg.fsdp is not None or cfg.optimizer != "adam":  # Megatron-FSDP / Muon: moeplan.engine.fsdp, moeplan.engine.muon
        extra, dp_parts = sharded_dp_and_optimizer_s(ctx, pipe, t_mb, breakdown["pp_bubble"], dense_p, expert_p,
                                                      dense_bw, expert_bw)
        breakdown.update(extra)
        items = {k: breakdown.get(k, 0.0) for k in TIME_ITEMS}
        return StepParts(tuple(per_rank), worst_rank, m, t_mb, *dp_parts, items)
    rs_time = ag_time = 0.0  # gradient reduce-scatter, parameter all-gather (distributed optimizer)
    if dp_group > 1:
        rs_time += ring_time(dense_p * grad_b / dp_group, dp_group, dense_bw)
        ag_time += ring_time(dense_p * BF16_BYTES / dp_group, dp_group, dense_bw)
    if edp > 1:
        rs_time += ring_time(expert_p * grad_b / edp, edp, expert_bw)
        ag_time += ring_time(expert_p * BF16_BYTES / edp, edp, expert_bw)
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


def _layer_hidden_comm(ctx: Ctx, layer: Layer) -> dict[str, float]:
    """Seconds of one layer's TP / CP / EP communication (one micro-batch, fwd + bwd) that run behind
    compute: the whole collective less its exposed part in :func:`layer_time`."""
    cfg, par, lt = ctx.cfg, ctx.cfg.parallel, layer_time(ctx, layer)
    out: dict[str, float] = {}
    if par.tp > 1 and cfg.tp_comm_overlap and ctx.cal.tp_hidden < 1:
        out["tp_comm"] = lt.tp_comm * ctx.cal.tp_hidden / (1 - ctx.cal.tp_hidden)
    if par.cp > 1 and isinstance(layer.mixer, Attention):  # the ring with no attention to hide behind
        out["cp_comm"] = max(0.0, cp_comm(ctx, layer.mixer, 0.0)[0] - lt.cp_comm)
    if isinstance(layer.mlp, MoE):
        out["ep_comm"] = max(0.0, ep_comm(ctx, layer.mlp)[0] - lt.ep_comm)
    return {k: v for k, v in out.items() if v > 0}


def hidden_comm_s(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
                  pipeline: Pipeline | None = None) -> tuple[dict[str, float], ...]:
    """Per pipeline rank, seconds of TP / CP / EP / PP communication per micro-batch that overlap compute
    (not in the step time, whose ``*_comm`` items are the exposed parts); the timeline draws them."""
    spec = cfg.model
    pipe = pipeline or build_pipeline(spec, cfg.parallel)
    ctx = make_ctx(cfg, gpu, cal)
    out = []
    pp_comm = pp_comm_s(ctx)
    for r, rank_work in enumerate(pipeline_rank_work(spec, pipe)):
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
            hidden_pp = pp_comm - pp_exposed_s(pp_comm, cfg.parallel.vpp, sum(_work_time(ctx, rank_work, first=holds_bf16_start(cfg, r)).values()))
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
    proxied = ep_host_proxied(cfg, gpu)
    low = max(cal.error_band_log, shortfall, cal.proxied_ep_shortfall_log if proxied else 0.0)
    return TimeEstimate(step, items, tflops, tflops * 1e12 / peak, tokens / step / par.gpus, fpt, parts.microbatches,
                        parts.slowest_rank, peak, cal.error_band_log, low, outside, shortfall,
                        cal.proxied_ep_shortfall_log if proxied else 0.0)
