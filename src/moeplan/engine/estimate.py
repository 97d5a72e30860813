"""Memory and time of one run configuration, and a cached validate-then-estimate evaluator
(the linter and the plan rationale cost many alternatives of one run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeplan.base.routing import routing_fields
from moeplan.engine.budget import budget_bytes
from moeplan.engine.memory import GIB, MemoryEstimate, estimate_memory
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.step import TimeEstimate, estimate_time
from moeplan.hardware import GPUSpec
from moeplan.models import ModelSpec
from moeplan.run.config import RunConfig
from moeplan.run.parallel import build_pipeline, validate


@dataclass(frozen=True)
class Estimate:
    """Memory and time of one run configuration."""

    config: RunConfig
    gpu: GPUSpec
    memory: MemoryEstimate
    time: TimeEstimate

    def run_dict(self) -> dict[str, Any]:
        """The run this estimate is of (layout, batch, knobs, numerics, releases), as JSON shows it: the one owner
        of those keys, which a plan's JSON carries too (moeplan.api.plan_dict), so plans and estimates describe a
        run alike."""
        cfg, mem = self.config, self.memory
        par = cfg.parallel
        return {
            "parallel": par.as_dict(),
            "pipeline_layout": mem.assumptions.get("pipeline_layout"),
            "seq_len": cfg.batch.seq_len,
            "gbs": cfg.batch.gbs,
            "mbs": cfg.batch.mbs,
            "microbatches": cfg.batch.microbatches(par.dp),
            "precision": cfg.precision,
            "recompute": cfg.recompute.label(),
            "recompute_modules": sorted(cfg.recompute.modules),
            "dispatcher": cfg.dispatcher,
            "ep_overlap": cfg.ep_overlap,
            "delay_wgrad": cfg.delay_wgrad_on,
            "cp_comm_type": cfg.cp_comm_type,
            "cuda_graphs": sorted(cfg.cuda_graph_scopes),
            "rank_capacity_factor": cfg.rank_capacity_factor,
            "optimizer_offload": cfg.optimizer_offload,
            "offload_modules": sorted(cfg.offload_modules),
            "grad_fp32": cfg.grad_fp32,
            "bf16_moments": cfg.bf16_moments,
            "fp8_attention": cfg.fp8_attention,
            "optimizer": cfg.optimizer,
            "fsdp": cfg.fsdp,
            "fsdp_double_buffer": cfg.fsdp_double_buffer,
            "mcore_version": cfg.mcore_version,
            "te_version": cfg.te_version,
            "te_grouped_tensor": cfg.te_grouped_tensor,
            "experts_grouped_tensor": cfg.experts_grouped_tensor,
        }

    def as_dict(self) -> dict[str, Any]:
        cfg, mem = self.config, self.memory
        par = cfg.parallel
        peak = mem.peak
        return {
            "model": cfg.model.name,
            "gpu": self.gpu.name,
            "gpus": par.gpus,
            **self.run_dict(),
            "memory_gib": mem.as_gib(),
            "memory_rank": peak.rank,
            "memory_by_rank_gib": [r.total_bytes / GIB for r in mem.ranks],
            "memory_ranks_gib": [{k: v / GIB for k, v in r.items.items()} for r in mem.ranks],
            "host_memory_gib": peak.host_bytes / GIB,
            "host_peak_gib": mem.host_peak_bytes / GIB,  # the rank that offloads most (may not be the GPU peak's)
            "host_capacity_gib": mem.host_capacity_bytes / GIB,
            "capacity_gib": mem.capacity_bytes / GIB,
            "fits": mem.fits,
            "memory_verdict": mem.verdict,  # moeplan.engine.budget: fits, edge (inside the model's error) or over
            "budget_gib": budget_bytes(mem.capacity_bytes) / GIB,
            "headroom_gib": mem.headroom_bytes() / GIB,
            **self.time.as_dict(),
            "assumptions": mem.assumptions,
        }


def routing_answer(model: ModelSpec, imbalance: float, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """The routing an answer (JSON) says it assumed, the one place that asks whether the model routes: ``routing``
    and ``moe_imbalance`` of moeplan.base.routing.routing_fields for ``imbalance`` (rows on the busiest expert rank /
    mean), both None for a model without experts; ``cal`` names the imbalance natural routing stands for."""
    return routing_fields(imbalance if model.num_experts else None, cal.natural_routing_imbalance)


def run_routing(cfg: RunConfig, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """The routing a run assumes, as every answer says it (:func:`routing_answer` of its model and imbalance)."""
    return routing_answer(cfg.model, cfg.moe_imbalance, cal)


def estimate_dict(est: Estimate, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """An estimate as every answer gives it (``moeplan estimate --json``, check's estimate, a sweep row):
    :meth:`Estimate.as_dict` and the routing it assumed (:func:`run_routing`)."""
    return est.as_dict() | run_routing(est.config, cal)


def evaluate(cfg: RunConfig, gpu: GPUSpec | None = None, cal: Calibration = DEFAULT_CALIBRATION) -> Estimate:
    """Memory and time of a configuration on its GPU (``cfg.gpu``; ``gpu`` is accepted for callers that pass the
    pair and must be the same GPU), timing constants ``cal``."""
    gpu = cfg.gpu if gpu is None else gpu
    validate(cfg.model, cfg.parallel, cfg.batch, cfg.mcore_version, cfg.gpu, cfg.te_version)
    pipe = build_pipeline(cfg.model, cfg.parallel)
    mem = estimate_memory(cfg, gpu.hbm_bytes, gpu.nvlink_domain, pipe)
    return Estimate(cfg, gpu, mem, estimate_time(cfg, gpu, cal, pipeline=pipe))


class Evaluator:
    """Estimates of a run's alternatives, cached; ``None`` for a layout that is not valid.

    ``budget_bytes`` is what the run itself must fit in; ``fit_budget_bytes`` (default the same) is what
    an alternative must fit in before it is recommended: the linter holds its fixes to the planner's
    headroom, so it never recommends a configuration the planner would reject."""

    def __init__(self, gpu: GPUSpec, budget_bytes: float, fit_budget_bytes: float | None = None,
                 cal: Calibration = DEFAULT_CALIBRATION) -> None:
        self.gpu = gpu
        self.cal = cal
        self.budget_bytes = budget_bytes
        self.fit_budget_bytes = budget_bytes if fit_budget_bytes is None else fit_budget_bytes
        self._cache: dict[RunConfig, Estimate] = {}

    def __call__(self, cfg: RunConfig) -> Estimate | None:
        if cfg.layout_checks():
            return None
        if cfg not in self._cache:
            self._cache[cfg] = evaluate(cfg, self.gpu, self.cal)
        return self._cache[cfg]

    def gpu_fits(self, est: Estimate | None) -> bool:
        """The run fits the GPU's budget (its host share aside)."""
        return est is not None and est.memory.total_bytes <= self.fit_budget_bytes

    def fits(self, est: Estimate | None) -> bool:
        """The run fits the GPU's budget and what it offloads fits the host."""
        return self.gpu_fits(est) and est is not None and est.memory.host_fits


__all__ = ["Estimate", "Evaluator", "evaluate"]
