"""Lint rules for what users of Megatron-Core's MoE paths hit, each naming its source: limits of the expert
dispatch kernels (DeepEP, HybridEP), CUDA graphs that cost a run its fit, and throughput above the GPU's peak.

:func:`pitfalls` runs on an estimated run (moeplan.lint.rules.lint turns its answers into findings);
:func:`above_peak` is shared with the calibration's log reading (a logged TFLOP/s/GPU above the peak).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from moeplan.base.deepep_configs import (DEEPEP_EP_SIZES, DEEPEP_MAX_RANKS, DEEPEP_NVL_PEERS, DEEPEP_RDMA_PEERS,
                                         deepep_config_ep, tp_ep_group_ranks)
from moeplan.base.fields import hybridep_ib_tokens_cap
from moeplan.hardware.spec import GPUSpec
from moeplan.run.config import RunConfig


@dataclass(frozen=True)
class Pitfall:
    """One finding of this module, as moeplan.lint.rules.Finding words it; ``fixed`` is the run that removes it (rules
    turns it into overrides), None where no setting does."""

    severity: str
    rule: str
    message: str
    fixed: RunConfig | None
    numbers: dict[str, Any] = field(default_factory=dict)
    line: int | None = None


def _deepep_group(par: Any) -> str:
    """The DeepEP group in words: the EP size, or EP x expert TP and its ranks."""
    ranks = tp_ep_group_ranks(par)
    return f"EP {par.ep}" if par.etp == 1 else f"EP {par.ep} x expert TP {par.etp} = {ranks} ranks"


def deepep_ranks(cfg: RunConfig, lines: dict[str, int]) -> list[Pitfall]:
    """DeepEP's normal (training) kernels, which Megatron-Core's flex dispatcher runs (fused_a2a.py, low_latency_mode
    off), reach at most the ranks their Buffer asserts, NUM_MAX_NVL_PEERS x NUM_MAX_RDMA_PEERS
    (base.deepep_configs.DEEPEP_MAX_RANKS; deepseek-ai/DeepEP #464), counted over its group: the flex dispatcher's
    expert-TP x EP group (base.deepep_configs.tp_ep_group_ranks)."""
    par = cfg.parallel
    ranks = tp_ep_group_ranks(par)
    if cfg.dispatcher != "deepep" or ranks <= DEEPEP_MAX_RANKS:
        return []
    fix = cfg.with_(dispatcher="hybridep") if hybridep_ib_tokens_cap(cfg.mcore_version) is not None else None
    limit = "EP" if par.etp == 1 else "EP x expert TP"
    return [Pitfall("error", "deepep-ep-ranks",
                     f"DeepEP's normal kernels reach at most {DEEPEP_MAX_RANKS} ranks "
                     f"({DEEPEP_NVL_PEERS} NVLink x {DEEPEP_RDMA_PEERS} RDMA peers; "
                     f"Buffer asserts it): {_deepep_group(par)} will not start (deepseek-ai/DeepEP #464); use "
                     f"HybridEP or {limit} <= {DEEPEP_MAX_RANKS}", fix,
                     {"ep": par.ep, "etp": par.etp, "ep_ranks": ranks, "max_ep": DEEPEP_MAX_RANKS},
                     lines.get("moe_flex_dispatcher_backend") or lines.get("expert_model_parallel_size"))]


def deepep_ep_size(cfg: RunConfig, lines: dict[str, int]) -> list[Pitfall]:
    """DeepEP lists configs for some EP sizes only (base.deepep_configs.DEEPEP_EP_SIZES): Megatron-Core's
    fused_a2a.get_buffer asks deep_ep's Buffer.get_dispatch_config / get_combine_config for its group's size, and
    they assert that it is listed; above 8 ranks the Buffer also asserts a multiple of 8 (DEEPEP_NVL_PEERS). The
    group is the flex dispatcher's expert-TP x EP group (token_dispatcher.py: tp_ep_group). A warning, not an error
    (plans unchanged): the table is DeepEP's releases' (a patched or newer DeepEP may list more), and moeplan
    estimates the run with the next listed size's row (deepep_config_ep). Sizes past the largest listed one are
    deepep_ranks' error."""
    par = cfg.parallel
    ranks = tp_ep_group_ranks(par)
    if cfg.dispatcher != "deepep" or ranks <= 1 or ranks > DEEPEP_MAX_RANKS or ranks in DEEPEP_EP_SIZES:
        return []
    listed = ", ".join(str(n) for n in DEEPEP_EP_SIZES)
    nvl = (f"; above {DEEPEP_NVL_PEERS} ranks its Buffer also asserts a multiple of {DEEPEP_NVL_PEERS}"
           if ranks > DEEPEP_NVL_PEERS and ranks % DEEPEP_NVL_PEERS else "")
    row = deepep_config_ep(ranks)  # the row moeplan's buffers and messages read (the same group size)
    return [Pitfall("warning", "deepep-ep-size",
                     f"DeepEP with {_deepep_group(par)}: DeepEP lists dispatch / combine configs for EP {listed} only; "
                     "Megatron-Core sizes its buffer from those of its group (fused_a2a.get_buffer) and deep_ep's "
                     f"Buffer.get_dispatch_config asserts the size is listed{nvl}: with DeepEP's released tables the "
                     f"run stops at its first dispatch; moeplan estimates it with the configs of the next listed size "
                     f"({row}); use a listed {'EP' if par.etp == 1 else 'EP x expert TP'} size or another dispatcher",
                     None, {"ep_ranks": ranks, "listed_ep": list(DEEPEP_EP_SIZES), "config_ep": row},
                     lines.get("expert_model_parallel_size") or lines.get("moe_flex_dispatcher_backend"))]


def dispatch_tokens_per_rank(cfg: RunConfig) -> int:
    """Tokens one rank hands the flex dispatcher per micro-batch: the micro-batch's sequence split by CP and, with
    sequence parallelism, by TP (fused_a2a.py: x.shape[-2] of the flattened hidden states)."""
    par = cfg.parallel
    split = par.cp * (par.tp if par.sequence_parallel else 1)
    return cfg.batch.seq_len * cfg.batch.mbs // split


def hybridep_ib_queue(cfg: RunConfig, lines: dict[str, int]) -> list[Pitfall]:
    """HybridEP across InfiniBand: DeepEP's hybrid-ep RDMA queue holds 3 x tokens + 1 < 65536 entries, and the
    released Megatron-Cores size it by the local micro-batch's tokens (Megatron-LM #3999)."""
    cap = hybridep_ib_tokens_cap(cfg.mcore_version)
    if cfg.dispatcher != "hybridep" or cap is None:
        return []
    par = cfg.parallel
    # the flex dispatcher's expert TP x EP group (base.deepep_configs.tp_ep_group_ranks): consecutive ranks (expert
    # rank order tp-ep-dp-pp)
    span = tp_ep_group_ranks(par)
    if span <= cfg.gpu.nvlink_domain:
        return []
    tokens = dispatch_tokens_per_rank(cfg)
    if tokens <= cap:
        return []
    return [Pitfall("warning", "hybridep-ib-queue-depth",
                     f"HybridEP across InfiniBand (EP x ETP {span} > NVLink domain {cfg.gpu.nvlink_domain}) with "
                     f"{tokens:,} tokens per rank per micro-batch: DeepEP's RDMA queue needs 3 x {tokens:,} + 1 entries, "
                     f"above the 65,535 InfiniBand queue pairs commonly allow, and Megatron-Core "
                     f"{cfg.mcore_version} sizes it by the micro-batch's tokens: the job may abort at the first "
                     f"dispatch (NVIDIA/Megatron-LM #3999); keep tokens per rank <= {cap:,} (a smaller micro-batch, "
                     "more CP or TP) or check the NICs' queue depth", None,
                     {"tokens_per_rank": tokens, "max_tokens": cap}, lines.get("moe_flex_dispatcher_backend"))]


def graph_memory(cfg: RunConfig, est: Any, ev: Any, lines: dict[str, int]) -> list[Pitfall]:
    """CUDA graphs whose static buffers (memory.CUDA_GRAPH_STATIC_IO, the full-iteration pool) cost a run its fit:
    the scope(s) whose removal alone makes it fit. As the memory rule holds a run (moeplan.engine.budget, through
    the Evaluator's two limits): past the budget's edge (``ev.budget_bytes``) an error where the run without them
    is inside it; at the edge (over ``ev.fit_budget_bytes``) a warning where the run without them is under the
    budget."""
    if est is None or not cfg.cuda_graph_scopes or est.memory.total_bytes <= ev.fit_budget_bytes:
        return []
    severity, limit = (("error", ev.budget_bytes) if est.memory.total_bytes > ev.budget_bytes
                       else ("warning", ev.fit_budget_bytes))

    def fits(e: Any) -> bool:
        return e is not None and e.memory.total_bytes <= limit

    scopes = cfg.cuda_graph_scopes
    bare = ev(cfg.with_(cuda_graph_scopes=frozenset()))
    if not fits(bare):
        return []
    culprits = sorted(s for s in scopes if fits(ev(cfg.with_(cuda_graph_scopes=scopes - {s}))))
    named = culprits or sorted(scopes)
    keep = frozenset(scopes - set(culprits)) if culprits else frozenset()
    gib = 2.0 ** 30
    extra = (est.memory.total_bytes - bare.memory.total_bytes) / gib
    where = (f"past the budget's edge ({limit / gib:.1f} GiB)" if severity == "error"
             else f"over the {limit / gib:.1f} GiB budget (inside its edge)")
    return [Pitfall(severity, "cuda-graphs-memory",
                     f"CUDA graph scope(s) {', '.join(named)} put the run {where}: it needs "
                     f"{est.memory.total_bytes / gib:.1f} GiB with them, {bare.memory.total_bytes / gib:.1f} GiB "
                     f"without (graph buffers and pools {extra:.1f} GiB); "
                     f"drop {'it' if len(named) == 1 else 'them'}",
                     cfg.with_(cuda_graph_scopes=keep),
                     {"scopes": named, "with_gib": est.memory.total_bytes / gib,
                      "without_gib": bare.memory.total_bytes / gib, "limit_gib": limit / gib},
                     lines.get("cuda_graph_modules") or lines.get("cuda_graph_scope") or lines.get("cuda_graph_impl"))]


def above_peak(tflops_per_gpu: float, gpu: GPUSpec, precision: str) -> str | None:
    """Why a throughput (TFLOP/s per GPU, Megatron-Core's FLOPs count) cannot be: above the GPU's dense peak for
    the precision (the catalog's datasheet figure). None where it is below."""
    peak = gpu.peak(precision) / 1e12 if gpu.supports(precision) else gpu.peak("bf16") / 1e12
    if tflops_per_gpu <= peak:
        return None
    return (f"{tflops_per_gpu:,.0f} TFLOP/s/GPU is above {gpu.name}'s dense {precision} peak ({peak:,.0f}): no run "
            "can do that, so the configuration (FLOPs count, GPU, precision or the hardware entry) is wrong")


def estimate_above_peak(cfg: RunConfig, est: Any) -> list[Pitfall]:
    """An estimate above the GPU's peak is misconfigured (a calibration or hardware entry out of range); Megatron
    Bridge #2667 reported the same symptom in a logged throughput."""
    why = above_peak(est.time.tflops_per_gpu, cfg.gpu, cfg.precision)
    if why is None:
        return []
    return [Pitfall("error", "above-peak", f"the estimate's {why}", None,
                     {"tflops_per_gpu": est.time.tflops_per_gpu, "peak_tflops": est.time.peak_flops / 1e12})]


def pitfalls(cfg: RunConfig, est: Any, ev: Any, lines: dict[str, int]) -> list[Pitfall]:
    """Every rule of this module for an estimated run."""
    return (deepep_ranks(cfg, lines) + deepep_ep_size(cfg, lines) + hybridep_ib_queue(cfg, lines)
            + graph_memory(cfg, est, ev, lines) + estimate_above_peak(cfg, est))


__all__ = ["Pitfall", "above_peak", "dispatch_tokens_per_rank", "pitfalls"]
