"""Cheap, sound bounds that let the plan search skip layouts without changing its answer.

The planner's first phase costs every layout's memory ladder (recompute x optimizer offload, with
the best CP communication type and EP A2A overlap where allowed) and keeps the fastest option that
fits; only its best layouts are refined. A layout whose *upper bound* on tokens/s per GPU is below
the slowest of the layouts already kept for refinement cannot enter that set, so its full
estimate is skipped (moeplan.plan.planner; ``exhaustive=True`` turns this off, and a test compares both).

The bound uses the timing model's own functions (moeplan.engine.timing ``layer_time`` / ``head_time`` /
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
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from moeplan.engine.timing.attention import best_cp_comm_type
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.pipeline import bubble_microbatches, pipeline_rank_work
from moeplan.engine.timing.step import head_time
from moeplan.hardware import GPUSpec
from moeplan.models.spec import Layer, ModelSpec
from moeplan.run.config import Recompute, RunConfig, other_fields
from moeplan.run.parallel import Pipeline


_NO_RECOMPUTE = Recompute()
# what a layer's time may not depend on (moeplan.engine.timing.layer_shape), or what a bound variant sets itself
_BLANKED = ("parallel", "batch", "recompute", "optimizer_offload", "ep_overlap", "cp_comm_type")
_SHAPE_FIELDS = other_fields(*_BLANKED)


@dataclass
class ThroughputBound:
    """Upper bound on tokens/s per GPU of a layout over its memory options, cached per shape.

    Three caches, each keyed by what its value reads: per shape (every run field but the layout, the
    batch and the options above, plus TP, CP, EP, ETP, sequence and MBS) and EP overlap setting, the
    layer and head times of that setting (the overlap-off setting is shared by the layouts that allow
    overlap and those that do not); per shape and whether overlap is allowed, the least over the
    settings; and per shape, allowed and pipeline split, the busiest rank's work W. A layout then costs
    a key and two multiplications, whatever the GPU count."""

    gpu: GPUSpec
    cal: Calibration = DEFAULT_CALIBRATION
    layer_cache: dict[Any, dict[Any, Any]] | None = None  # shared with the search's estimates
    _cp_types: dict[tuple[object, ...], str] = field(default_factory=dict)
    _settings: dict[tuple[object, ...], tuple[Any, dict[Layer, float], dict[tuple[bool, int], float]]] = field(
        default_factory=dict)
    _least: dict[tuple[object, ...], tuple[list[Any], dict[Layer, float], dict[tuple[bool, int], float]]] = field(
        default_factory=dict)
    _rests: dict[tuple[object, ...], int] = field(default_factory=dict)  # run fields -> a small id (cheap keys)

    def fields_id(self, cfg: RunConfig) -> int:
        """A small id of the run's fields that :meth:`_key` keeps whole: every field (present or added later)
        but those a layer's time may not depend on or that the bound sets itself (the layout, the batch,
        recompute, offload, EP overlap, CP communication type). Runs made from one template by setting only
        these and a few others share it per value of the few (the planner finds it once per value)."""
        return self._rests.setdefault(_SHAPE_FIELDS(cfg), len(self._rests))  # the other values, in field order

    def _key(self, cfg: RunConfig, fields: int | None = None) -> tuple[object, ...]:
        """The shape: :meth:`fields_id` (``fields``, when the caller has it) and the parts of the layout and
        batch a layer's time reads."""
        par, batch = cfg.parallel, cfg.batch
        rest = self.fields_id(cfg) if fields is None else fields
        return rest, par.tp, par.cp, par.ep, par.etp, batch.seq_len, batch.mbs

    def _setting(self, cfg: RunConfig, key: tuple[object, ...], overlap: bool,
                 ) -> tuple[Any, dict[Layer, float], dict[tuple[bool, int], float]]:
        """(timing context, layer times, head times) of the shape at no recompute and offload, with the
        CP communication type the first phase picks (``best_cp_comm_type``, which reads attention and
        CP communication only, which no memory option changes) and EP overlap ``overlap``."""
        hit = self._settings.get((key, overlap))
        if hit is not None:
            return hit
        base = cfg.evolve(recompute=_NO_RECOMPUTE, optimizer_offload=0.0, ep_overlap=False)
        cp_type = self._cp_types.get(key)
        if cp_type is None:
            cp_type = self._cp_types[key] = best_cp_comm_type(base, self.gpu, self.cal, self.layer_cache)
        v = base.evolve(cp_comm_type=cp_type, ep_overlap=overlap)
        ctx = make_ctx(v, self.gpu, self.cal, self.layer_cache)
        spec = cfg.model
        layers = list(dict.fromkeys(spec.layers)) + ([spec.mtp_layer] if spec.mtp_layer is not None else [])
        hit = self._settings[(key, overlap)] = (ctx, {layer: layer_time(ctx, layer).total() for layer in layers}, {})
        return hit

    def _least_times(self, cfg: RunConfig, key: tuple[object, ...], allowed: bool,
                     ) -> tuple[list[Any], dict[Layer, float], dict[tuple[bool, int], float]]:
        """Per layer, the least time over EP overlap off and, where allowed, on."""
        hit = self._least.get((key, allowed))
        if hit is not None:
            return hit
        settings = [self._setting(cfg, key, o) for o in ((False, True) if allowed else (False,))]
        layer_s = {layer: math.inf for layer in settings[0][1]}
        for _, times, _ in settings:
            for layer, s in times.items():
                layer_s[layer] = min(layer_s[layer], s)
        hit = self._least[(key, allowed)] = ([s[0] for s in settings], layer_s, {})
        return hit

    def tokens_per_s_per_gpu(self, cfg: RunConfig, pipe: Pipeline, fields: int | None = None,
                             allowed: bool | None = None) -> float:
        """Upper bound on the tokens/s per GPU of ``cfg``'s layout with any recompute, offload, CP
        communication type and EP overlap setting. ``fields`` (:meth:`fields_id` of ``cfg``) and ``allowed``
        (``ep_overlap_allowed`` of ``cfg`` without recompute), when the caller has them, are not recomputed."""
        key = self._key(cfg, fields)
        if allowed is None:
            # whether EP overlap can be on (it depends on PP, VPP and the micro-batch count, and on recompute)
            rc = cfg.recompute
            allowed = (cfg if rc is _NO_RECOMPUTE or rc == _NO_RECOMPUTE else cfg.evolve(recompute=_NO_RECOMPUTE)
                       ).ep_overlap_allowed
        slowest = self._busiest_rank_s(cfg, key, allowed, pipe)  # each layout of a search has its own split and shape
        return self._floor(cfg, slowest)

    @staticmethod
    def _floor(cfg: RunConfig, slowest: float) -> float:
        """Tokens/s per GPU if a step took (M + B) micro-batches of ``slowest`` seconds."""
        par, batch = cfg.parallel, cfg.batch
        step_floor = (batch.microbatches(par.dp) + bubble_microbatches(par)) * slowest
        return math.inf if step_floor <= 0 else batch.gbs * batch.seq_len / (step_floor * par.gpus)

    def option_tokens_per_s_per_gpu(self, opt: RunConfig, pipe: Pipeline) -> float:
        """Upper bound on the tokens/s per GPU of the one option ``opt`` (its recompute, offload, CP
        communication type and EP overlap as set): the same floor with this option's own layer and head
        times, so recompute's forward work is in it. The planner takes it, over the options the first
        phase costs for a layout, once the memory ladder has named them (moeplan.plan.planner)."""
        ctx = make_ctx(opt, self.gpu, self.cal, self.layer_cache)
        layer_s: dict[Layer, float] = {}
        slowest = 0.0
        seen: set[int] = set()
        for rank_work in pipeline_rank_work(opt.model, pipe):
            if id(rank_work) in seen:
                continue
            seen.add(id(rank_work))
            groups, heads = rank_work
            work = 0.0
            for layer, n in groups:
                s = layer_s.get(layer)
                if s is None:
                    s = layer_s[layer] = layer_time(ctx, layer).total()
                work += n * s
            for loss, mtp in heads:
                work += sum(head_time(ctx, loss, mtp).values())
            slowest = max(slowest, work)
        return self._floor(opt, slowest)

    def _busiest_rank_s(self, cfg: RunConfig, key: tuple[object, ...], allowed: bool, pipe: Pipeline) -> float:
        """One micro-batch on the slowest pipeline rank takes at least this: its layers' and heads' least times."""
        hit = self._least.get((key, allowed))
        ctxs, layer_s, head_s = hit if hit is not None else self._least_times(cfg, key, allowed)
        slowest = 0.0
        for groups, heads in _candidate_works(cfg.model, pipe):
            work = 0.0
            for layer, n in groups:
                work += n * layer_s[layer]
            for h in heads:
                s = head_s.get(h)
                if s is None:
                    s = head_s[h] = min(sum(head_time(ctx, *h).values()) for ctx in ctxs)
                work += s
            if work > slowest:
                slowest = work
        return slowest


@lru_cache(maxsize=4096)
def _candidate_works(spec: ModelSpec, pipe: Pipeline) -> tuple[tuple[tuple[tuple[Layer, int], ...], tuple[tuple[bool, int], ...]], ...]:
    """The pipeline ranks' works (moeplan.engine.timing.pipeline_rank_work) that can be the busiest, once each: a
    work is left out when another holds at least as many layers of every kind and all its heads (every
    time is >= 0, so it cannot be slower; of equal works the first is kept)."""
    works = list(dict.fromkeys(pipeline_rank_work(spec, pipe)))
    counts = [(dict(groups), Counter(heads)) for groups, heads in works]

    def covers(a: int, b: int) -> bool:
        (ga, ha), (gb, hb) = counts[a], counts[b]
        return (all(ha[h] >= n for h, n in hb.items())
                and all(ga.get(layer, 0) >= n for layer, n in gb.items()))

    kept = [b for b in range(len(works))
            if not any(a != b and covers(a, b) and (a < b or not covers(b, a)) for a in range(len(works)))]
    return tuple(works[b] for b in kept)


__all__ = ["ThroughputBound"]
