"""Cheap, sound bounds that let the plan search skip layouts without changing its answer.

The planner's first phase costs every layout's memory ladder (recompute x optimizer offload, with
the best CP communication type and EP A2A overlap where allowed) and keeps the fastest option that
fits; only its best layouts are refined. A layout whose *upper bound* on tokens/s per GPU is below
the slowest of the layouts already kept for refinement cannot enter that set, so its full
estimate is skipped (moeplan.planner; ``exhaustive=True`` turns this off, and a test compares both).

The bound uses the timing model's own functions (moeplan.timing ``layer_time`` / ``head_time`` /
``pipeline_rank_work``), never a constant of its own, so it stays sound when the physics changes as long as
these structural facts of the model hold:

- a step runs every micro-batch on the slowest pipeline rank and waits for the pipeline bubble:
  step >= (M + B) x t_mb, B = ``bubble_microbatches`` ((PP - 1) / VPP), where t_mb (one micro-batch on
  the slowest rank) is at least the sum of that rank's layers' and heads' times (pipeline p2p, DP
  communication, optimizer and offload only add);
- the time of a layer depends on the layout through TP, CP, EP, ETP, MBS and whether EP A2A overlap
  is allowed, not otherwise on PP, VPP or DP (so it is computed once per shape and reused for every
  pipeline split and DP size);
- recompute only adds forward work, so the no-recompute layer time is the least over the ladder;
  the CP communication type is the one the first phase picks (``best_cp_comm_type``, which reads
  attention and CP communication only); the least over EP overlap on/off is taken explicitly.

Hence tokens/s/GPU = GBS x seq / (step x GPUs) <= GBS x seq / ((M + B) x W x GPUs), W = the work of the
busiest rank; its cost per layout is a sum over pipeline ranks and does not grow with the GPU count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from moeplan.hardware import GPUSpec
from moeplan.models.spec import Layer
from moeplan.parallel import Batch, Parallel, Pipeline
from moeplan.run import Recompute, RunConfig
from moeplan.timing import (
    DEFAULT_CALIBRATION,
    Calibration,
    LayerTime,
    head_time,
    layer_time,
    make_ctx,
    pipeline_rank_work,
    best_cp_comm_type,
    bubble_microbatches,
)

@dataclass
class ThroughputBound:
    """Upper bound on tokens/s per GPU of a layout over its memory options, cached per shape."""

    gpu: GPUSpec
    cal: Calibration = DEFAULT_CALIBRATION
    layer_cache: dict[Any, dict[Any, Any]] | None = None  # shared with the search's estimates
    _shapes: dict[tuple[RunConfig, bool], tuple[dict[Layer, float], dict[tuple[bool, int], float]]] = field(
        default_factory=dict)

    def _variants(self, cfg: RunConfig) -> list[RunConfig]:
        """The option settings whose least time bounds every option of the first phase: no recompute,
        the CP communication type the first phase uses (it takes ``best_cp_comm_type`` once per layout,
        and that choice reads attention and CP communication only, which no memory option changes),
        and EP overlap off and, where allowed, on."""
        base = cfg.evolve(recompute=Recompute(), optimizer_offload=0.0)
        base = base.evolve(cp_comm_type=best_cp_comm_type(base, self.gpu, self.cal, self.layer_cache))
        overlaps = (False, True) if base.ep_overlap_allowed else (False,)
        return [base.evolve(ep_overlap=o) for o in overlaps]

    def _shape(self, cfg: RunConfig, pipe: Pipeline) -> tuple[dict[Layer, float], dict[tuple[bool, int], float]]:
        par = cfg.parallel
        # the run with everything a layer's time may not depend on blanked out (every other field,
        # present or added later, stays in the key), and whether EP overlap can be on (that depends
        # on PP, VPP and the micro-batch count)
        key = (cfg.evolve(parallel=Parallel(0, par.tp, 1, 1, par.cp, par.ep, par.etp),
                          batch=Batch(cfg.batch.seq_len, 0, cfg.batch.mbs), recompute=Recompute(),
                          optimizer_offload=0.0, ep_overlap=False, cp_comm_type=""),
               cfg.evolve(recompute=Recompute()).ep_overlap_allowed)
        hit = self._shapes.get(key)
        if hit is not None:
            return hit
        spec = cfg.model
        layers = list(dict.fromkeys(spec.layers)) + ([spec.mtp_layer] if spec.mtp_layer is not None else [])
        heads = {h for _, rank_heads in pipeline_rank_work(spec, pipe) for h in rank_heads}
        heads.add((True, spec.mtp_layers))
        layer_s = {layer: math.inf for layer in layers}
        head_s = {h: math.inf for h in heads}
        for v in self._variants(cfg):
            ctx = make_ctx(v, self.gpu, self.cal, self.layer_cache)
            for layer in layers:
                layer_s[layer] = min(layer_s[layer], layer_time(ctx, layer).total())
            for loss, mtp in heads:
                head_s[(loss, mtp)] = min(head_s[(loss, mtp)], sum(head_time(ctx, loss, mtp).values()))
        self._shapes[key] = (layer_s, head_s)
        return layer_s, head_s

    def tokens_per_s_per_gpu(self, cfg: RunConfig, pipe: Pipeline) -> float:
        """Upper bound on the tokens/s per GPU of ``cfg``'s layout with any recompute, offload, CP
        communication type and EP overlap setting."""
        layer_s, head_s = self._shape(cfg, pipe)
        slowest = 0.0  # one micro-batch on the slowest pipeline rank takes at least this
        seen: set[int] = set()  # ranks with the same work share one tuple (moeplan.timing.pipeline_rank_work)
        for rank_work in pipeline_rank_work(cfg.model, pipe):
            if id(rank_work) in seen:
                continue
            seen.add(id(rank_work))
            groups, heads = rank_work
            work = sum(n * layer_s[layer] for layer, n in groups)
            for h in heads:
                if h not in head_s:  # an unusual split (explicit layout string): cost it once
                    head_s[h] = self._head(cfg, h)
                work += head_s[h]
            slowest = max(slowest, work)
        par, batch = cfg.parallel, cfg.batch
        step_floor = (batch.microbatches(par.dp) + bubble_microbatches(par)) * slowest
        return math.inf if step_floor <= 0 else batch.gbs * batch.seq_len / (step_floor * par.gpus)

    def _head(self, cfg: RunConfig, head: tuple[bool, int]) -> float:
        loss, mtp = head
        return min(sum(head_time(make_ctx(v, self.gpu, self.cal, self.layer_cache), loss, mtp).values())
                   for v in self._variants(cfg))


__all__ = ["ThroughputBound"]
