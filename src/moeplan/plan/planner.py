"""Plan search: every valid layout and knob, ranked by estimated tokens/s per GPU.

Search, for a model on ``gpus`` GPUs at one sequence length and global batch:
1. layouts: TP (inside the NVLink domain), CP (around the guidance's start seq_len / 4096),
   PP x VPP, EP, MBS; pruned by divisibility (moeplan.run.parallel) and by a static-memory lower bound
   (weights + gradients, which no knob below removes);
2. per layout, the memory ladder (moeplan.plan.advice.recompute_ladder): no recompute, growing selective
   sets, optimizer CPU offload, full recompute; each option is kept only if it fits with the
   headroom, and the cheapest in time wins;
3. the best layouts are refined over dispatcher, CP communication type, EP overlap and CUDA graphs; each layout's
   best run per dispatcher goes to the ranking (plan.ranking's tie rule orders dispatchers); one run per layout listed;
4. if nothing fits, GBS is halved (more gradient accumulation per sample is not possible at MBS 1,
   so a smaller GBS is the remaining lever) and the search repeats; else the closest miss is named.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.base.errors import GroupedTensorRefused, InvalidLayout, MoeplanError
from moeplan.base.fields import fields_for, sync_free_moe
from moeplan.base.te_release import (DEFAULT_TE_VERSION, GROUPED_TENSOR_ENV, grouped_tensor_raises,
                                     grouped_tensor_refusal, te_version_key)
from moeplan.base.vocab import (DEFAULT_MCORE_VERSION, DEFAULT_RESERVE_GIB, DROPLESS_MOE_GRAPH_SCOPES,
                                OFFLOAD_FRACTIONS, REFINE_MIN, RESOLVED_GAIN)
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.budget import budget_bytes
from moeplan.engine.estimate import evaluate
from moeplan.engine.fsdp import FULL_SHARD, SHARDS
from moeplan.engine.memory import (GIB, LayoutMemory, host_fits as memory_host_fits, offloaded_state_bytes,
                                   peak_memory_bytes, shared_fields_key)
from moeplan.engine.param_shards import average_params_per_gpu
from moeplan.engine.timeline import gc_paused
from moeplan.engine.timing.attention import best_cp_comm_type
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.step import estimate_time
from moeplan.hardware import GPUSpec
from moeplan.models.spec import GatedDeltaNet, ModelSpec
from moeplan.plan.advice import (Reason, candidate_mbss, cp_start, dispatcher_candidates, explain_plan,
                                 is_recipe_layout, recipe_closeness, recipe_cps, recipe_distance, recipe_vpps,
                                 recompute_ladder)
from moeplan.plan.bounds import ThroughputBound
from moeplan.plan.ranking import listed_plans, rank_candidates
from moeplan.plan.space import Candidate, NewerRelease, Plan, PlanResult, SearchSpace, release_gate
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import (Batch, Parallel, Pipeline, balanced_layout, batch_positive, build_pipeline,
                                  check_layout, expert_rules, interleaving_problem, mixer_rules, pipeline_rules,
                                  sequence_rules, with_balanced_layout)

# From Megatron-Core 0.18, dropless MoE can run sync-free with fixed per-rank HybridEP buffers
# (moe_expert_rank_capacity_factor) and paged activation stashing, so a full-iteration CUDA graph
# captures it; 1.5 is what the Megatron Bridge full-iteration perf recipes use
# (perf_recipes/deepseek/common.py, _enable_deepseek_full_iteration_mxfp8, v0.6.0).
FULL_ITERATION = frozenset({"full_iteration"})
RANK_CAPACITY_FACTOR = 1.5
# A layout is skipped only when its throughput bound is below the slowest kept layout by more than
# this relative margin: the bound and the estimate add the same terms in different orders.
BOUND_SLACK = 1e-9
# why plan refuses --te-grouped-tensor where TE raises on GroupedLinear's module path (see search)
_NO_RUN_LEFT = (" (none of the best fitting layouts the search refines has a run that fits without it: theirs run the "
                "routed experts on TE GroupedLinear's module path, which reads it; only op-fused experts do not, "
                "Megatron-Core 0.18+'s sync-free full-iteration bundle with HybridEP, CUDA graphs and ETP 1)")


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _largest_gdn_cp(spec: ModelSpec) -> float:
    """The largest power-of-two CP whose group divides every Gated DeltaNet layer's key and value heads (at TP 1;
    inf without such layers)."""
    heads = [h for m in spec.distinct_mixers if isinstance(m, GatedDeltaNet) for h in (m.num_key_heads, m.num_value_heads)]
    if not heads:
        return math.inf
    g = math.gcd(*heads)
    return float(g & -g)  # its largest power-of-two divisor


def candidate_sizes(spec: ModelSpec, gpu: GPUSpec, gpus: int, batch: Batch, space: SearchSpace,
                    wide: bool = False) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    """The sizes the search tries, each pinned by ``space`` or from its range: (TP, CP, PP, EP, MBS, ETP). PP: the
    powers of two and every other divisor of the GPU count up to 32 (PP 3 / 6 / 12 on 6- or 12-node clusters).
    ``wide``: also CP 1 and 2 (the search's second try where the CP range around seq/4096 leaves no valid layout,
    e.g. a length that 2 x CP x TP does not divide)."""
    moe = spec.first_moe
    tps = [space.tp] if space.tp else [t for t in _pow2_upto(min(8, gpu.nvlink_domain)) if t <= gpus]
    cp0 = cp_start(batch.seq_len)
    # CP from a quarter to four times the guidance's start; CP 1 too where CP may be unsupported
    # (Gated DeltaNet before Megatron-Core 0.18) or the start is small. The start is capped at the largest
    # CP the GPU count allows: with fewer GPUs than seq/4096 the guidance's "adjust" is toward that CP,
    # not to no CP at all (16 GPUs at 1M tokens: CP 4-16, where CP 64-1024 would leave no layout to try)
    pow2s = _pow2_upto(gpus)
    # and at the largest CP the model's Gated DeltaNet heads allow (head-parallel CP: parallel.check_layout
    # gdn-heads-cp; Qwen3-Next's 16 key heads stop at CP 16, where 512K tokens would start the range at CP 128)
    cap = _largest_gdn_cp(spec)
    low = min(cp0, pow2s[-1], cap) / 4
    if cap < math.inf:  # a CP that TP x CP must divide the heads by: every CP from 2, so TP 4 / 8 keep CP 2 / 4
        low = min(low, 2)
    always = {1} if (wide or cp0 <= 4 or any(layer.is_linear_attention for layer in spec.layers)) else set()
    always |= {2} if wide and gpus % 2 == 0 else set()
    # and the CP of a measured recipe of this model and system within 2x of the length (advice.recipe_cps)
    always |= {c for c in recipe_cps(spec.name, gpu.name, batch.seq_len) if c <= gpus and c <= cap}
    cps = [space.cp] if space.cp else sorted(always | {c for c in pow2s if low <= c <= min(cp0 * 4, cap)})
    most = min(32, spec.num_layers, gpus)
    pps = [space.pp] if space.pp else sorted({*_pow2_upto(most), *(d for d in range(3, most + 1) if gpus % d == 0)})
    eps = [space.ep] if space.ep else ([e for e in _pow2_upto(moe.num_experts) if moe.num_experts % e == 0] if moe else [1])
    mbss = [space.mbs] if space.mbs else candidate_mbss(batch.seq_len)
    etps = [space.etp] if space.etp else [1]
    return tps, cps, pps, eps, mbss, etps


def candidate_vpps(spec: ModelSpec, pp: int, space: SearchSpace) -> list[int]:
    """The VPP sizes the search tries at ``pp``: pinned, else 1 at PP 1, else 1/2/4/8 and the VPP sizes of this model's
    measured recipes (advice.recipe_vpps: Qwen3-235B-A22B's PP4 VPP12 at 128K), as far as the layers allow."""
    if space.vpp:
        return [space.vpp]
    if pp == 1:
        return [1]
    return [v for v in sorted({1, 2, 4, 8, *recipe_vpps(spec.name)}) if pp * v <= spec.num_layers]


def _layouts(spec: ModelSpec, gpu: GPUSpec, gpus: int, batch: Batch, space: SearchSpace,
             mcore_version: str, te_version: str | None = None, wide: bool = False) -> list[tuple[Parallel, int]]:
    """Every (layout, MBS) that passes the validity rules. Bounds: TP up to 8 and inside the NVLink
    domain (TP collectives every layer need NVLink; Megatron Bridge recipes never exceed 8), powers of
    two for TP/CP/EP, PP up to 32 (powers of two and the GPU count's other divisors), VPP 1/2/4/8, MBS as
    :func:`candidate_mbss` gives; ``wide``: :func:`candidate_sizes`' second try."""
    tps, cps, pps, eps, mbss, etps = candidate_sizes(spec, gpu, gpus, batch, space, wide)
    out: list[tuple[Parallel, int]] = []
    # check_layout's rule groups, each checked once per value of the sizes it reads (the same verdict as
    # check_layout on every candidate: tests/unit/test_layout_enumeration.py)
    if not batch_positive(batch):
        return out
    seq_len, gbs, n_layers = batch.seq_len, batch.gbs, spec.num_layers
    mbss = [m for m in mbss if m >= 1]
    eps = [e for e in eps if e >= 1]
    etps = [e for e in etps if e >= 1]
    expert_ok = [(ep, etp) for ep in eps for etp in etps if not expert_rules(spec, ep, etp)]
    splits: dict[int, list[tuple[int, str | None]]] = {}  # PP -> its (VPP, layout string) passing pipeline_rules
    for pp in pps:
        vpps = candidate_vpps(spec, pp, space)
        splits[pp] = [(vpp, split) for vpp in vpps if pp >= 1 and vpp >= 1
                      for split in (balanced_layout(spec, pp, vpp),)  # as with_balanced_layout fills it in
                      if not pipeline_rules(spec, pp, vpp, split, mcore_version)]
    for tp in tps:
        for cp in cps:
            if tp < 1 or cp < 1 or mixer_rules(spec, tp, cp, mcore_version, gpu, te_version) \
                    or sequence_rules(tp, cp, seq_len):
                continue
            for pp in pps:
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                for vpp, split in splits[pp]:
                    for ep, etp in expert_ok:
                        if gpus % (ep * etp * pp):
                            continue
                        par = Parallel(gpus, tp, pp, vpp, cp, ep, etp, split)
                        for mbs in mbss:
                            if gbs % (mbs * dp):
                                continue
                            if not interleaving_problem(pp, vpp, gbs // (mbs * dp)):
                                out.append((par, mbs))
    return out


def _static_lower_bound(spec: ModelSpec, par: Parallel, grad_bytes: int, sharding: str | None = None) -> float:
    """Weights + gradients per GPU averaged over pipeline ranks: nothing in the ladder removes them
    (Megatron-FSDP shards them over the data-parallel groups as its strategy says)."""
    dense, expert = average_params_per_gpu(spec, par)
    if sharding is None:
        return (dense + expert) * (BF16_BYTES + grad_bytes)
    sh = SHARDS[sharding]
    sharded = dense / (par.dp * par.cp) + expert / par.edp
    return ((sharded if sh.params else dense + expert) * BF16_BYTES
            + (sharded if sh.gradients else dense + expert) * grad_bytes)


def _sharding_options(space: SearchSpace, mcore_version: str, optimizer: str) -> tuple[str | None, ...]:
    """Data-parallel sharding choices searched: the distributed optimizer (None) and, where Megatron-Core
    has it and the optimizer allows it (Muon does not run under Megatron-FSDP), fully sharded Megatron-FSDP;
    or the strategy the user pinned."""
    has_fsdp = bool(fields_for(mcore_version).fsdp_strategies)
    if space.fsdp == "off":
        return (None,)
    if space.fsdp != "auto":
        if not has_fsdp:
            raise MoeplanError(f"Megatron-FSDP needs Megatron-Core >= 0.14, target is {mcore_version}")
        if optimizer == "muon":
            raise MoeplanError("Muon does not run with Megatron-FSDP (Megatron-LM arguments.py); use --fsdp off")
        return (space.fsdp,)
    return (None, FULL_SHARD) if has_fsdp and optimizer == "adam" else (None,)


def _base_cfg(cfg: RunConfig, sharding: str | None, space: SearchSpace) -> RunConfig:
    """The layout's configuration with a data-parallel sharding choice."""
    buffered = space.fsdp_double_buffer if sharding else False
    if cfg.fsdp == sharding and cfg.fsdp_double_buffer == buffered:
        return cfg
    return cfg.evolve(fsdp=sharding, fsdp_double_buffer=buffered)


def _layout_run(template: RunConfig, par: Parallel, batch: Batch, dispatcher: str) -> RunConfig:
    """The search's run of one layout: ``template`` (no recompute, no offload) with its layout, batch and
    first dispatcher, and EP A2A overlap on exactly where Megatron-Core allows it. The same run as
    ``template.evolve(...).evolve(ep_overlap=...ep_overlap_allowed)``, with one copy instead of two."""
    cfg = template.evolve(parallel=par, batch=batch, dispatcher=dispatcher)
    allowed = cfg.ep_overlap_allowed
    if cfg.ep_overlap != allowed:
        cfg.__dict__["ep_overlap"] = allowed  # a fresh copy no one else holds yet (evolve writes it the same way)
    return cfg


def _fits(cfg: RunConfig, gpu: GPUSpec, pipe: Pipeline, budget: float) -> tuple[bool, float]:
    total = peak_memory_bytes(cfg, gpu.nvlink_domain, pipe)
    return total <= budget, total


def _tps(cfg: RunConfig, gpu: GPUSpec, pipe: Pipeline, cal: Calibration,
         layer_cache: dict[Any, Any] | None = None) -> float:
    return estimate_time(cfg, gpu, cal, pipeline=pipe, validated=True, layer_cache=layer_cache).tokens_per_s_per_gpu


def _best_cp_comm(cfg: RunConfig, gpu: GPUSpec, pipe: Pipeline, cal: Calibration,
                  layer_cache: dict[Any, Any] | None = None) -> tuple[RunConfig, float]:
    """The configuration with its best CP communication type, and its tokens/s per GPU."""
    c = cfg.evolve(cp_comm_type=best_cp_comm_type(cfg, gpu, cal, layer_cache))
    return c, _tps(c, gpu, pipe, cal, layer_cache)


def _consistent(cfg: RunConfig) -> RunConfig:
    """EP A2A overlap only where Megatron-Core accepts it: a memory option (full recompute) can rule it
    out after the layout turned it on (TransformerConfig rejects overlap_moe_expert_parallel_comm then)."""
    return cfg if not cfg.ep_overlap or cfg.ep_overlap_allowed else cfg.evolve(ep_overlap=False)


def _first_fit(mem: LayoutMemory, rcs: list[Recompute], offload: float, budget: float,
               last_fits: float | None = None) -> tuple[int, float]:
    """Index of the first recompute option that fits with this offload fraction (memory falls along the
    ladder: binary search) and its total bytes; (len(rcs), inf) if none fits. ``last_fits``: the last
    option's total, if known."""
    lo, hi = 0, len(rcs)
    found = math.inf
    if last_fits is not None:
        hi, found = len(rcs) - 1, last_fits
    while lo < hi:
        mid = (lo + hi) // 2
        total = mem.peak_bytes(rcs[mid], offload)
        ok = total <= budget
        if ok:
            hi, found = mid, total
        else:
            lo = mid + 1
    return lo, found


def _strongest_option(space: SearchSpace, ladder: list[Recompute]) -> tuple[Recompute, float]:
    """The most aggressive memory option: last recompute step with the largest offload fraction."""
    rcs = [space.recompute] if space.recompute is not None else ladder
    return rcs[-1], OFFLOAD_FRACTIONS[-1] if space.optimizer_offload else 0.0


def _host_capped(host_fits: Callable[[float], bool], option: tuple[Recompute, float]) -> tuple[Recompute, float]:
    """``option`` with its offload fraction lowered to the largest whose offloaded state fits the host memory per
    GPU (``host_fits``: LayoutMemory.host_fits, against hardware ``host_mem_bytes``), 0 where none does."""
    rc, f = option
    while f > 0.0 and not host_fits(f):
        f = max((x for x in OFFLOAD_FRACTIONS if x < f), default=0.0)
    return rc, f


def _strongest(cfg: RunConfig, space: SearchSpace, ladder: list[Recompute], pipe: Pipeline) -> RunConfig:
    """``cfg`` with :func:`_strongest_option`, its offload within the host's memory."""
    def host_fits(f: float) -> bool:
        return memory_host_fits(cfg, offloaded_state_bytes(cfg.evolve(optimizer_offload=f), pipe))

    rc, f = _host_capped(host_fits, _strongest_option(space, ladder))
    return cfg.evolve(recompute=rc, optimizer_offload=f)


def _memory_options(cfg: RunConfig, pipe: Pipeline, space: SearchSpace, ladder: list[Recompute], budget: float,
                    smallest: float, mem: LayoutMemory | None = None,
                    nvlink_domain: int = 8) -> list[tuple[RunConfig, float]]:
    """The memory options :func:`_cheapest_fitting` costs, in its order, with their total bytes, given that
    the most aggressive option (:func:`_strongest`, ``smallest`` bytes) fits: per offload fraction, the
    first recompute set that fits (binary search); offload only when no recompute set fits without it.
    ``mem``: ``cfg``'s :class:`LayoutMemory`, if made (else one on ``nvlink_domain``)."""
    rcs = [space.recompute] if space.recompute is not None else ladder
    if mem is None:
        mem = LayoutMemory(cfg, nvlink_domain, pipe)
    offloads = (0.0,) + (tuple(f for f in OFFLOAD_FRACTIONS if mem.host_fits(f)) if space.optimizer_offload else ())
    out = []
    lightest = len(rcs)  # the lightest recompute step an option so far fits with
    for f in offloads:
        i, total = _first_fit(mem, rcs, f, budget, smallest if f == offloads[-1] else None)
        if i >= lightest:
            continue  # more offload with no lighter recompute only adds time
        out.append((_consistent(mem.config(rcs[i], f)), total))
        lightest = i
        if i == 0:
            break  # nothing left to recompute: more offload would only add time
    # (a selective set that fits without offload does not end the ladder: offload that lets a lighter set fit can
    # be faster where the host link is fast, e.g. Grace's C2C: Qwen3-235B-A22B on 128 GB200 at 128K, whose
    # published layout pinned with its recompute and 75% offload beat the free search's plan 1, issue #31)
    assert out  # the strongest option fits
    return out


def _cheapest_fitting(cfg: RunConfig, gpu: GPUSpec, pipe: Pipeline, space: SearchSpace,
                      ladder: list[Recompute], budget: float, smallest: float,
                      cal: Calibration = DEFAULT_CALIBRATION, layer_cache: dict[Any, Any] | None = None,
                      mem: LayoutMemory | None = None,
                      options: list[tuple[RunConfig, float]] | None = None) -> Candidate:
    """Fastest option of the memory ladder that fits, given that the most aggressive option
    (:func:`_strongest`, ``smallest`` bytes) fits. ``mem``: ``cfg``'s :class:`LayoutMemory`, if made;
    ``options``: its :func:`_memory_options`, if found. Each option is costed with the CP communication
    type chosen on the first (it barely depends on recompute/offload)."""
    if options is None:
        options = _memory_options(cfg, pipe, space, ladder, budget, smallest, mem, gpu.nvlink_domain)
    best: Candidate | None = None
    cp_type: str | None = None
    for opt, total in options:
        if cp_type is None:
            opt, tps = _best_cp_comm(opt, gpu, pipe, cal, layer_cache)
            cp_type = opt.cp_comm_type
        else:
            opt = opt.evolve(cp_comm_type=cp_type)
            tps = _tps(opt, gpu, pipe, cal, layer_cache)
        if best is None or tps > best.tokens_per_s_per_gpu:
            best = Candidate(opt, pipe, total, tps)
    assert best is not None
    return best


def _pipeline(pipes: dict[tuple[int, int, str | None], Pipeline], spec: ModelSpec, par: Parallel) -> Pipeline:
    """The split's one object (build_pipeline's) in the search's cache, built once per (PP, VPP, layout)."""
    key = (par.pp, par.vpp, par.pipeline_layout)
    pipe = pipes.get(key)
    if pipe is None:
        pipe = pipes[key] = build_pipeline(spec, par)
    return pipe


def _closest_miss(template: RunConfig, misses: list[tuple[float, int, Parallel, int, dict[str | None, float]]],
                  shardings: tuple[str | None, ...], space: SearchSpace, ladder: list[Recompute], budget: float,
                  gpu: GPUSpec, mem_cache: dict[Any, Any],
                  pipes: dict[tuple[int, int, str | None], Pipeline]) -> tuple[RunConfig, float, float | None]:
    """When nothing fits: the run that misses the budget by least, and by how many bytes. Each missing layout
    is taken at its strongest memory option (:func:`_strongest_option`: the last recompute step, the largest
    offload fraction) under every sharding choice searched, with its first (or pinned) dispatcher, as `estimate` would
    cost that run; layouts come in order of their static floor (weights + gradients + reserve, a lower bound of
    their peak), so the search stops at the first floor at or above the best exact peak found. Each miss carries
    the exact peaks pass 1 already found (sharding -> bytes, those of the same run): only the others are costed."""
    best: tuple[float, Parallel, int, str | None] | None = None  # (miss, layout, MBS, sharding)
    for floor, _, par, mbs, known in sorted(misses, key=lambda m: (m[0], m[1])):
        if best is not None and floor >= best[0] + budget:
            break
        cfg = pipe = None
        for sh in shardings:
            peak = known.get(sh)
            if peak is None:
                if cfg is None:
                    cfg = _closest_run(template, par, mbs, space, gpu)
                    pipe = _pipeline(pipes, cfg.model, par)
                run = _consistent(_strongest(_base_cfg(cfg, sh, space), space, ladder, pipe))  # type: ignore[arg-type]
                peak = LayoutMemory(run, gpu.nvlink_domain, pipe, mem_cache).peak_bytes(  # type: ignore[arg-type]
                    run.recompute, run.optimizer_offload)
            if best is None or peak - budget < best[0]:
                best = (peak - budget, par, mbs, sh)
    assert best is not None
    miss, par, mbs, sh = best
    cfg = _closest_run(template, par, mbs, space, gpu)
    run = _consistent(_strongest(_base_cfg(cfg, sh, space), space, ladder, _pipeline(pipes, cfg.model, par)))
    asked = _strongest_option(space, ladder)[1]
    return run, miss, (asked if run.optimizer_offload < asked else None)


def _closest_run(template: RunConfig, par: Parallel, mbs: int, space: SearchSpace, gpu: GPUSpec) -> RunConfig:
    """A missing layout's run as :func:`_closest_miss` prices it: its first (or pinned) dispatcher, no knob else."""
    cfg = template.evolve(parallel=par, batch=Batch(template.batch.seq_len, template.batch.gbs, mbs))
    return _layout_run(cfg, par, cfg.batch, space.dispatcher or dispatcher_candidates(cfg, gpu)[0])


def _partial_graphs_supported(version: str) -> bool:
    """Per-module CUDA graph scopes (attn, moe_router, moe_preprocess) exist from Megatron-Core 0.16."""
    return DROPLESS_MOE_GRAPH_SCOPES <= set(fields_for(version).cuda_graph_scopes)


def _full_iteration_searched(spec: ModelSpec, space: SearchSpace, mcore_version: str) -> bool:
    """Whether :func:`_refine` tries the full-iteration CUDA graph (with HybridEP and RANK_CAPACITY_FACTOR):
    the only runs of the search whose experts can be op-fused (RunConfig.experts_op_fused, at ETP 1)."""
    return space.cuda_graphs and spec.first_moe is not None and sync_free_moe(mcore_version)


def _refine(c: Candidate, gpu: GPUSpec, space: SearchSpace, ladder: list[Recompute], budget: float,
            cal: Calibration = DEFAULT_CALIBRATION, layer_cache: dict[Any, Any] | None = None,
            mem_cache: dict[Any, Any] | None = None) -> list[Candidate]:
    """Try every dispatcher, EP overlap and CUDA graph choice on a good layout, keeping its memory
    option when it still fits (else the next ladder step), and the next recompute step too.
    The options are tried in the guidance's order of preference (its dispatcher order, then the
    simpler knobs: no EP overlap, no graphs, the layout's own recompute); the fastest wins unless an
    option earlier in that order is within RESOLVED_GAIN of it, so that a knob moves off the
    guidance's default only for a gain the model resolves (a 0.07% HybridEP-over-alltoall margin is
    not one). ``mem_cache``: the search's shared memory parts (moeplan.engine.memory.LayoutMemory). Runs on which TE
    raises with the user's te_grouped_tensor (RunConfig.grouped_tensor_raises) are not options.

    Returns that winner first, then the layout's best run with each other dispatcher that has one (its twins, by
    the same rule among that dispatcher's options): the tie rule (moeplan.plan.ranking) orders plans by the
    guidance's dispatcher order inside the error band, so it must see every dispatcher of every layout, not only
    the winner (a layout's HybridEP twin, dropped for an alltoall run 6% faster, is faster than another layout's
    HybridEP plan the rule would lift instead: issue #31 item 6). Empty where no option is left."""
    base = c.cfg
    options: list[Candidate] = [c] if base.grouped_tensor_raises is None else []
    dispatchers = [space.dispatcher] if space.dispatcher else dispatcher_candidates(base, gpu)
    graph_opts = [frozenset()] + ([DROPLESS_MOE_GRAPH_SCOPES] if space.cuda_graphs and base.model.first_moe
                                  and _partial_graphs_supported(base.mcore_version) else [])
    if _full_iteration_searched(base.model, space, base.mcore_version):
        graph_opts.append(FULL_ITERATION)  # sync-free dropless MoE (HybridEP only): see RANK_CAPACITY_FACTOR
    rcs = [space.recompute] if space.recompute is not None else ladder
    start = rcs.index(base.recompute) if base.recompute in rcs else 0
    for d in dispatchers:
        for overlap in dict.fromkeys((False, base.evolve(dispatcher=d).ep_overlap_allowed)):
            for graphs in graph_opts:
                if graphs == FULL_ITERATION and d != "hybridep":
                    continue
                cfg = base.evolve(dispatcher=d, ep_overlap=overlap, cuda_graph_scopes=graphs,
                                  rank_capacity_factor=RANK_CAPACITY_FACTOR if graphs == FULL_ITERATION else None)
                if cfg.grouped_tensor_raises is not None:
                    continue
                for rc in rcs[start: start + 2]:
                    opt = _consistent(cfg.evolve(recompute=rc))
                    total = LayoutMemory(opt, gpu.nvlink_domain, c.pipeline, mem_cache).peak_bytes(
                        opt.recompute, opt.optimizer_offload)
                    if total > budget:
                        continue
                    options.append(Candidate(opt, c.pipeline, total, _tps(opt, gpu, c.pipeline, cal, layer_cache)))
                    break
    if not options:
        return []
    best = _resolved_best(options)
    twins = [_resolved_best([o for o in options if o.cfg.dispatcher == d])
             for d in dict.fromkeys(o.cfg.dispatcher for o in options) if d != best.cfg.dispatcher]
    return [best, *twins]


def _resolved_best(options: list[Candidate]) -> Candidate:
    """The fastest of ``options`` (in the guidance's order of preference) unless an earlier one is within
    RESOLVED_GAIN of it."""
    fastest = max(o.tokens_per_s_per_gpu for o in options)
    return next(o for o in options if o.tokens_per_s_per_gpu * (1 + RESOLVED_GAIN) >= fastest)


def _rank_with_twins(refined: list[list[Candidate]], gpu: GPUSpec, band_log: float,
                     outside_fit: bool) -> tuple[list[Candidate], dict[int, str]]:
    """Rank every refined run (each layout's winner and the dispatcher twins nearer a measured recipe than it, rule
    1; else the refinement's dispatcher choice stands) with the tie rule; plan 1 is the run it puts first; then one
    run per layout, its winner (plan 1's layout again only when plan 1 is a twin), in the rule's order."""
    def near(c: Candidate) -> float:
        return recipe_closeness(recipe_distance(c.cfg, gpu))

    kept = [[runs[0], *(t for t in runs[1:] if near(t) < near(runs[0]))] for runs in refined]
    twin_of = {id(t): runs[0] for runs in kept for t in runs[1:]}
    ordered, ties = rank_candidates([r for runs in kept for r in runs], gpu, band_log, outside_fit, twin_of)
    return listed_plans(ordered, twin_of), ties


# A search allocates tens of thousands of small, acyclic objects (configurations, cache keys, tuples) that reference
# counting frees; the collector's passes find almost nothing to free (about 1,500 objects after a 16,384-GPU search)
# but each walks the young generations, and a full pass every live object: on 16,384 GPUs at 1M tokens a full pass
# alone took ~20 ms of a ~0.35 s plan (benchmarks/plan_scale.py). Pausing changes no result.
@gc_paused()
def search(spec: ModelSpec, gpu: GPUSpec, gpus: int, seq_len: int, gbs: int, *, precision: str = "bf16",
           top: int = 5, space: SearchSpace = SearchSpace(), moe_imbalance: float = 1.0,
           mcore_version: str = DEFAULT_MCORE_VERSION, reserve_gib: float = DEFAULT_RESERVE_GIB,
           allow_gbs_reduction: bool = True, progress: object = None, grad_fp32: bool = True,
           bf16_moments: bool = False, cal: Calibration = DEFAULT_CALIBRATION,
           exhaustive: bool = False, optimizer: str = "adam", te_version: str = DEFAULT_TE_VERSION,
           te_grouped_tensor: bool = False, knobs: Mapping[str, object] | None = None) -> PlanResult:
    """Search layouts and knobs; the top ``top`` plans that fit, fastest first. ``te_version`` (like
    ``mcore_version``, a fixed input, never searched) picks the attention kernel per head shape; ``te_grouped_tensor``
    (RunConfig's, the user's choice, never searched) its GroupedLinear path for the experts. The numerics
    (``precision``, main-grad dtype, Adam moment dtype) are the user's choice, never searched;
    ``cal`` holds the timing constants (default: the fitted ones). ``exhaustive`` costs every fitting
    layout in full instead of skipping those whose throughput bound (moeplan.plan.bounds) rules them out;
    the answer is the same, only slower (tests compare both).

    Where TE raises with ``te_grouped_tensor`` (moeplan.base.te_release.grouped_tensor_raises) the search drops the runs
    that would raise, those whose routed experts take TEGroupedMLP's GroupedLinear module
    (RunConfig.grouped_tensor_raises), and keeps op-fused ones with the variable set: the op fuser's GroupedLinear
    never reads it, so they train as they would without it, while the module raises at run time (keeping such a run
    without the variable would plan a job other than the one the user runs). Only when no run is left is the flag
    refused, with estimate's one-line input error (which runs are op-fused has one owner, RunConfig.experts_op_fused:
    the search does not restate it to refuse early).

    ``knobs``: other RunConfig knobs the user fixes (field name -> value), never searched: every run carries them."""
    if gpus < 1 or seq_len < 1 or gbs < 1:
        raise MoeplanError("GPU count, sequence length and GBS must be positive")
    gpu.peak(precision)
    raises = grouped_tensor_raises(te_version, gpu.sm_arch, precision) if te_grouped_tensor else None
    refusal = None if raises is None else grouped_tensor_refusal(raises, _NO_RUN_LEFT)
    budget = budget_bytes(gpu.hbm_bytes, space.headroom)  # the one rule (moeplan.engine.budget); plans fit it
    requested = gbs
    notes: list[str] = []
    if optimizer == "muon":
        if "muon" not in fields_for(mcore_version).optimizers:
            raise MoeplanError(f"the Muon optimizer needs Megatron-Core >= 0.16 (optimizer 'muon'/'dist_muon', "
                               f"muon_* fields), target is {mcore_version}")
        if bf16_moments:
            raise MoeplanError("Muon runs without the precision-aware optimizer (Megatron-Core OptimizerConfig): "
                               "no bf16 moments")
        space = replace(space, optimizer_offload=False)  # nor optimizer CPU offload (same reason)
    numerics: dict[str, object] = {"grad_fp32": grad_fp32, "bf16_moments": bf16_moments, "optimizer": optimizer,
                                   "te_version": te_version_key(te_version), "te_grouped_tensor": te_grouped_tensor}
    numerics.update(knobs or {})
    result = _search_once(spec, gpu, gpus, seq_len, gbs, precision, top, space, moe_imbalance,
                          mcore_version, reserve_gib, budget, progress, numerics, cal, exhaustive)
    while not result.plans and not result.raising_dropped and allow_gbs_reduction and gbs % 2 == 0 and gbs > 1:
        smaller = gbs // 2
        try:
            retry = _search_once(spec, gpu, gpus, seq_len, smaller, precision, top, space, moe_imbalance,
                                 mcore_version, reserve_gib, budget, progress, numerics, cal, exhaustive)
        except MoeplanError:  # no valid layout at the smaller GBS: keep the no-fit answer we have
            break
        notes.append(f"no layout fits GBS {gbs}; tried GBS {smaller} (fewer micro-batches in flight "
                     f"and a smaller DP group become possible)")
        gbs, result = smaller, retry
    if result.find_closest is not None:  # the closest miss of the answer kept, once
        run, miss, asked = result.find_closest()
        result.closest, result.closest_offload_asked, result.find_closest = (run, miss), asked, None
    if refusal is not None and not result.plans and result.raising_dropped:
        raise GroupedTensorRefused(refusal)  # layouts fit, but TE raises on every run of them
    if raises is not None and result.plans:
        dropped = result.raising_dropped
        notes.append(f"--te-grouped-tensor ({GROUPED_TENSOR_ENV}=1): {raises}; so the plans keep only runs whose routed "
                     "experts are op-fused (TE's op fuser, the sync-free full-iteration bundle at ETP 1), whose "
                     "GroupedLinear does not read it" + (f"; {dropped} of the best layouts had no such run that fits"
                                                         if dropped else ""))
    result.requested_gbs = requested
    result.notes = notes + result.notes
    gate = release_gate(spec, space, mcore_version)
    if gate is not None:  # what the release that lifts the rule would plan (one more search, plans only)
        try:
            there = _search_once(spec, gpu, gpus, seq_len, requested, precision, 1, space, moe_imbalance, gate[0],
                                 reserve_gib, budget, None, numerics, cal, exhaustive).plans
        except MoeplanError:
            there = []
        here = max((c.tokens_per_s_per_gpu for c in result.plans), default=None)  # type: ignore[attr-defined]
        # the newer release runs every plan this target runs: its answer is at least the better of its own
        # search and this target's plans re-costed there (a search is not a proof: FSDP, for one, is tried
        # on the best distributed-optimizer layouts only)
        there = list(there) + _recosted(result.plans, gate[0], gpu, cal, budget)  # type: ignore[arg-type]
        if there:
            best = max(there, key=lambda c: c.tokens_per_s_per_gpu)
            result.newer = NewerRelease(mcore_version, *gate, best.cfg, best.tokens_per_s_per_gpu, best.memory_bytes,  # type: ignore[attr-defined]
                                        None if here is None else best.tokens_per_s_per_gpu / here - 1)  # type: ignore[attr-defined]
        else:
            result.newer = NewerRelease(mcore_version, *gate)
    plans = []
    peers = tuple((i + 1, c.cfg, c.tokens_per_s_per_gpu) for i, c in enumerate(result.plans))  # type: ignore[attr-defined]
    for c in result.plans:  # type: ignore[assignment]
        est = evaluate(c.cfg, gpu, cal)  # type: ignore[attr-defined]
        reasons = explain_plan(c.cfg, gpu, est, budget, requested, cal, peers)  # type: ignore[attr-defined]
        tie = result.ties.get(id(c))
        if tie:
            reasons.insert(0, Reason("rank", tie, {"tie": True, "error_band": round(math.expm1(cal.error_band_log), 3)}))
        if result.newer is not None:
            reasons.append(Reason("mcore_version", result.newer.sentence(), result.newer.as_dict()))
        plans.append(Plan(c.cfg, gpu, tuple(reasons), est, tie=tie is not None))  # type: ignore[attr-defined]
    result.plans = plans
    note = plans[0].estimate.time.outside_fit_note if plans else None
    if note is not None:  # the model's, so every plan's: plan 1's band stands for them
        result.notes.append(note)
    return result


def _recosted(plans: list[Candidate], version: str, gpu: GPUSpec, cal: Calibration, budget: float) -> list[Candidate]:
    """This target's plans as the newer release ``version`` would run them (those that still fit)."""
    out = []
    for c in plans:
        try:
            cfg = c.cfg.evolve(mcore_version=version)
        except MoeplanError:
            continue
        est = evaluate(cfg, gpu, cal)
        if est.memory.total_bytes <= budget:
            out.append(Candidate(cfg, c.pipeline, est.memory.total_bytes, est.time.tokens_per_s_per_gpu))
    return out


def _search_once(spec: ModelSpec, gpu: GPUSpec, gpus: int, seq_len: int, gbs: int, precision: str, top: int,
                 space: SearchSpace, moe_imbalance: float, mcore_version: str, reserve_gib: float,
                 budget: float, progress: object, numerics: dict[str, object],
                 cal: Calibration = DEFAULT_CALIBRATION, exhaustive: bool = False) -> PlanResult:
    batch = Batch(seq_len, gbs, space.mbs or 1)
    te = str(numerics["te_version"])
    layouts = _layouts(spec, gpu, gpus, batch, space, mcore_version, te)
    if not layouts and not space.cp:  # the CP range around seq/4096 has none (a length 2 x CP x TP does not divide)
        layouts = _layouts(spec, gpu, gpus, batch, space, mcore_version, te, wide=True)
    if not layouts:
        # the example: the largest CP the search tries that divides the GPU count (the fewest data-parallel
        # ranks), so its reason is one the search met, not CP 1's where CP 1 is not tried
        fold = (space.tp or 1) * (space.pp or 1)  # a pinned TP / PP folds with it: name the rule that breaks them
        cp = space.cp or max((c for c in candidate_sizes(spec, gpu, gpus, batch, space, wide=True)[1]
                              if gpus % (c * fold) == 0), default=1)
        probe = Parallel(gpus, space.tp or 1, space.pp or 1, space.vpp or 1, cp, space.ep or 1, space.etp or 1)
        reasons = check_layout(spec, with_balanced_layout(spec, probe), batch, mcore_version, gpu, te)
        why = f"; e.g. {probe.short() if probe.dp else 'the smallest layout'}: {reasons[0].reason}" if reasons else ""
        raise InvalidLayout(f"no valid layout of {spec.name} on {gpus} GPUs at seq {seq_len} with GBS {gbs}{why}")
    ladder = recompute_ladder(spec, seq_len, mcore_version, gpu, te)
    grad_bytes = 4 if numerics["grad_fp32"] else BF16_BYTES
    shardings = _sharding_options(space, mcore_version, str(numerics["optimizer"]))
    # layouts whose strongest memory option does not fit: (static floor, a lower bound of the peak; index; layout; MBS;
    # the exact peaks pass 1 found per sharding choice, where they are the runs _closest_miss prices)
    misses: list[tuple[float, int, Parallel, int, dict[str | None, float]]] = []
    considered = feasible = 0
    advance = getattr(progress, "advance", None)
    if hasattr(progress, "start"):
        progress.start(len(layouts))  # type: ignore[union-attr]
    # pass 1, every layout: the static memory floor, then the exact memory of the strongest option
    # (whether the layout fits at all, and by how much it misses), then an upper bound on throughput
    layer_cache: dict[Any, Any] = {}  # layer times once per shape (moeplan.engine.timing.layer_shape)
    mem_cache: dict[Any, Any] = {}  # activations and parameter state shared by layouts (moeplan.engine.memory.LayoutMemory)
    bound = ThroughputBound(gpu, cal, layer_cache)
    # per fitting layout: (bound, index, layout, batch, dispatcher, sharding, strongest option's peak, a
    # measured recipe's layout): its run, split and memory ladder are made again for the few pass 2 costs
    # (the same values: the ladder's parts are in mem_cache), not kept for every layout
    fitting: list[tuple[float, int, Parallel, Batch, str, str | None, float, bool]] = []
    strongest = _strongest_option(space, ladder)
    # every layout's run: the same knobs (checked once), its layout and MBS
    template = RunConfig(spec, layouts[0][0], Batch(batch.seq_len, batch.gbs, layouts[0][1]), gpu=gpu,
                         precision=precision, dispatcher="alltoall", moe_imbalance=moe_imbalance,
                         reserve_gib=reserve_gib, mcore_version=mcore_version, **numerics)  # type: ignore[arg-type]
    batches: dict[int, Batch] = {}
    # per-layout invariants, computed once per value of what they read: the static floors per sharding
    # (TP, PP, EP, ETP, DP x CP and EDP: _static_lower_bound; on one GPU count the first four fix the last two) and the first dispatcher
    # (the tp_ep group's size, EP x ETP)
    floors: dict[tuple[int, ...], tuple[dict[str | None, float], list[str | None]]] = {}
    first_dispatcher: dict[int, str] = {}
    # every run below is the template with its layout, batch, dispatcher, EP overlap and sharding choice: the
    # memory and bound caches' "every other field" ids are found once per value of the last three
    mem_fields: dict[tuple[object, ...], object] = {}
    pipes: dict[tuple[int, int, str | None], Pipeline] = {}
    bound_fields: dict[tuple[object, ...], int] = {}
    for index, (par, mbs) in enumerate(layouts):
        considered += 1
        if advance:
            advance()
        fkey = (par.tp, par.pp, par.ep, par.etp)  # with the search's GPU count these fix DP x CP and EDP
        hit = floors.get(fkey)
        if hit is None:
            st = {sh: _static_lower_bound(spec, par, grad_bytes, sh) + reserve_gib * GIB for sh in shardings}
            hit = floors[fkey] = (st, [sh for sh in shardings if st[sh] <= budget])
        statics, usable = hit
        if not usable:
            misses.append((min(statics.values()), index, par, mbs, {}))
            continue
        pipe = _pipeline(pipes, spec, par)
        b = batches.get(mbs)
        if b is None:
            b = batches[mbs] = Batch(batch.seq_len, batch.gbs, mbs)
        group = tp_ep_group_ranks(par)
        disp = first_dispatcher.get(group)
        if disp is None:  # it reads the tp_ep group's size and the run's model, version and GPU, which all layouts
            # share; a pinned one stays on layouts the refinement does not reach
            disp = first_dispatcher[group] = (space.dispatcher
                                              or dispatcher_candidates(template.evolve(parallel=par), gpu)[0])
        cfg = _layout_run(template, par, b, disp)  # the dispatcher is refined later
        overlap = cfg.ep_overlap
        # the first sharding choice whose strongest memory option fits (the distributed optimizer first;
        # the other choice is tried on the best layouts before refining)
        ok, smallest, fit_sh = False, math.inf, None
        peaks: dict[str | None, float] = {}
        for sh in usable:
            trial = _base_cfg(cfg, sh, space)
            fid = mem_fields.get((disp, overlap, sh))
            if fid is None:
                fid = mem_fields[(disp, overlap, sh)] = shared_fields_key(trial, mem_cache)
            mem = LayoutMemory(trial, gpu.nvlink_domain, pipe, mem_cache, fid)  # the layout's memory ladder, costed part by part
            total = mem.peak_bytes(*_host_capped(mem.host_fits, strongest))
            if total <= budget:
                ok, cfg, smallest, fit_sh = True, trial, total, sh
                break
            peaks[sh] = total
        if not ok:  # its peaks are the closest-miss runs' (run with the pinned dispatcher, where one is pinned)
            misses.append((min(statics.values()), index, par, mbs, peaks))
            continue
        feasible += 1
        # the bound costs layers only, which the sharding choice does not change (it adds DP communication)
        if exhaustive:
            upper = math.inf
        else:
            plain = _base_cfg(cfg, None, space)
            bid = bound_fields.get((disp, overlap))
            if bid is None:
                bid = bound_fields[(disp, overlap)] = bound.fields_id(plain)
            # the template runs no recompute: EP overlap is allowed exactly where _layout_run turned it on
            upper = bound.tokens_per_s_per_gpu(plain, pipe, bid, overlap)
        fitting.append((upper, index, par, b, disp, fit_sh, smallest, is_recipe_layout(cfg, gpu)))
    closest = None
    if not feasible and misses:  # nothing fits: the layout that misses by least, at its strongest memory option
        # found by search() for the answer it keeps only (not at every GBS it halves through)
        closest = functools.partial(_closest_miss, template, misses, shardings, space, ladder, budget, gpu, mem_cache,
                                    pipes)
    # pass 2, best bound first: the full estimate, until no remaining layout can reach the slowest of
    # the `keep` best found. A layout first comes up with its layout bound; it then goes back with the
    # bound of the memory options the first phase would cost for it (its recompute's forward work in
    # it), and is costed in full when it comes up again with that one.
    keep = max(REFINE_MIN, 2 * top)
    found: list[tuple[int, Candidate]] = []
    kept: list[float] = []  # min-heap of the `keep` best throughputs so far
    costed: set[int] = set()
    nvl = gpu.nvlink_domain

    def cost(index: int, cfg: RunConfig, pipe: Pipeline, smallest: float, mem: LayoutMemory,
             options: list[tuple[RunConfig, float]] | None) -> Candidate:
        cand = _cheapest_fitting(cfg, gpu, pipe, space, ladder, budget, smallest, cal, layer_cache, mem, options)
        found.append((index, cand))
        costed.add(index)
        return cand

    def layout_run(entry: tuple[float, int, Parallel, Batch, str, str | None, float, bool],
                   ) -> tuple[RunConfig, Pipeline, LayoutMemory]:
        """A fitting layout's run, split and memory ladder, as pass 1 made them."""
        _, _, par, b, disp, sh, _, _ = entry
        cfg = _layout_run(template, par, b, disp)
        overlap = cfg.ep_overlap
        cfg = _base_cfg(cfg, sh, space)
        pipe = _pipeline(pipes, spec, par)
        return cfg, pipe, LayoutMemory(cfg, nvl, pipe, mem_cache, mem_fields[(disp, overlap, sh)])

    def out_of_reach(upper: float) -> bool:
        return len(kept) >= keep and upper * (1 + BOUND_SLACK) < kept[0]

    # heap entries: (-bound, index, None, the fitting entry) with the layout bound, then (-bound, index,
    # options, cfg, pipe, smallest, mem); ties come up in enumeration order (no two entries share an index)
    queue: list[tuple[Any, ...]] = [(-entry[0], entry[1], None, entry) for entry in fitting]
    heapq.heapify(queue)
    while queue and not out_of_reach(-queue[0][0]):
        item = heapq.heappop(queue)
        index, options = item[1], item[2]
        if options is None:
            cfg, pipe, mem = layout_run(item[3])
            smallest = item[3][6]
        else:
            cfg, pipe, smallest, mem = item[3:]
        if options is None and not exhaustive:
            options = _memory_options(cfg, pipe, space, ladder, budget, smallest, mem, nvl)
            cp_type = best_cp_comm_type(options[0][0], gpu, cal, layer_cache)  # as _cheapest_fitting picks it
            upper = max(bound.option_tokens_per_s_per_gpu(opt.evolve(cp_comm_type=cp_type), pipe)
                        for opt, _ in options)
            if not out_of_reach(upper):
                heapq.heappush(queue, (-upper, index, options, cfg, pipe, smallest, mem))
            continue
        tps = cost(index, cfg, pipe, smallest, mem, options).tokens_per_s_per_gpu
        if len(kept) < keep:
            heapq.heappush(kept, tps)
        elif tps > kept[0]:
            heapq.heapreplace(kept, tps)
    # the layouts of measured recipes for this model and system are costed even when their bound is out
    # of reach: the tie-breaker prefers them when their band overlaps plan 1's
    for entry in fitting:
        if entry[7] and entry[1] not in costed:
            cfg, pipe, mem = layout_run(entry)
            cost(entry[1], cfg, pipe, entry[6], mem, None)
    found.sort(key=lambda ic: (-ic[1].tokens_per_s_per_gpu, ic[0]))
    candidates = [c for _, c in found]
    evaluated = len(found)
    n_refine = max(REFINE_MIN, 2 * top)
    pool = candidates[:n_refine] + [c for c in candidates[n_refine:] if is_recipe_layout(c.cfg, gpu)]
    for c in candidates[:n_refine]:  # the other sharding choices on the best layouts (freed memory can drop recompute)
        for sh in shardings:
            if sh == c.cfg.fsdp:
                continue
            alt = _base_cfg(c.cfg, sh, space)
            mem = LayoutMemory(alt, gpu.nvlink_domain, c.pipeline, mem_cache)
            smallest = mem.peak_bytes(*_host_capped(mem.host_fits, strongest))
            if smallest <= budget:
                pool.append(_cheapest_fitting(alt, gpu, c.pipeline, space, ladder, budget, smallest, cal,
                                              layer_cache, mem))
    refined = [r for r in (_refine(c, gpu, space, ladder, budget, cal, layer_cache, mem_cache) for c in pool) if r]
    outside = bool(spec.features & set(cal.out_of_fit_shortfall_log))
    ordered, ties = _rank_with_twins(refined, gpu, cal.error_band_log, outside)
    return PlanResult(ordered[:top], gbs, gbs, considered, feasible,  # type: ignore[arg-type]
                      layouts_evaluated=evaluated, ties=ties, raising_dropped=len(pool) - len(refined),
                      find_closest=closest)


__all__ = ["candidate_sizes", "candidate_vpps", "search"]
