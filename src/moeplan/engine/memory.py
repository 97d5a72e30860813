"""Per-GPU memory, item by item, for the most loaded pipeline rank.

Sources per item:
- weights, fp32 main grads, Adam state with the distributed optimizer: Megatron-Core
  docs/source/api-guide/dist_optimizer.md (bf16 param + fp32 grad + 12 B sharded fp32 master and
  moments); dense parameters shard over DP x CP, expert parameters over expert-DP
  (megatron/core/optimizer/distrib_optimizer.py); optimizer CPU offload moves
  ``optimizer_offload_fraction`` of the state to host (megatron/core/optimizer/cpu_offloading).
- activations: moeplan.engine.activations (Korthikanti et al. 2022), times micro-batches in flight under
  1F1B / interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py: warm-up of
  (PP - rank - 1) x 2 + (VPP - 1) x PP chunk micro-batches on rank ``rank``).
- logits and cross-entropy: 4 x s x b x h x (1 + V/h) / TP bytes (megatron/training/
  theoretical_memory_usage.py, output layer term); the loss's forward peak beyond it and the output layer's
  sequence-parallel gather buffer in the transient (moeplan.engine.loss_memory).
- the score matrices of Transformer Engine's UnfusedDotProductAttention where TE trains the head shape only
  with it (moeplan.run.attention_backend.unfused_attention; bytes: moeplan.engine.activations.unfused_attention_bytes):
  kept unless core_attn is recomputed, their working peak in the layer's transient.
- DeepEP / HybridEP buffers: moeplan.engine.dispatcher_buffers; parameters per GPU: moeplan.engine.param_shards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.engine import fsdp, muon
from moeplan.engine.activations import (BF16_BYTES, FP32_BYTES, clamp_saved_row_bytes, fp8_kind, keeps_unfused_scores,
                                        layer_input_bytes, offload_split_bytes, run_layer_activation,
                                        unfused_attention_bytes)
from moeplan.engine.budget import Verdict, budget_bytes, edge_bytes, memory_verdict
from moeplan.engine.dispatcher_buffers import deepep_buffer_bytes, hybridep_buffer_bytes
from moeplan.engine.loss_memory import loss_forward_extra_bytes, output_gather_buffer_bytes
from moeplan.engine.mamba import ssd_transient_bytes_per_token
from moeplan.engine.moe_transient import alltoall_expert_tp_combine_bytes, many_local_experts
from moeplan.engine.param_shards import rank_muon_params, rank_params, rank_units
from moeplan.models.spec import Attention, Layer, Mamba2, ModelSpec, MoE
from moeplan.run.attention_backend import unfused_attention
from moeplan.run.config import Recompute, RunConfig, other_fields
from moeplan.run.parallel import Parallel, Pipeline, Stage, build_pipeline, stage_groups, validate, warmup_count

GIB = 1024**3

ADAM_STATE_BYTES = 12  # fp32 master weight + exp_avg + exp_avg_sq per parameter
ADAM_STATE_BF16_MOMENTS_BYTES = 8  # precision-aware optimizer: fp32 master + bf16 moments
FP32_MASTER_BYTES = 4  # the fp32 master copy inside the Adam state


def offloaded_state_bytes_per_param(cfg: RunConfig) -> float:
    """Adam state bytes per parameter that optimizer CPU offload moves to the host.

    HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py) runs the CPU
    share of the update on CPU copies of the parameters. With the precision-aware optimizer it owns the
    fp32 master, so the whole state moves; without it the distributed optimizer keeps its fp32 master
    shard on the GPU and only the moments move (measured: Qwen3-30B-A3B, TP2 PP2 EP4 on 16 H100, ~1.9e9
    parameters per GPU, 15.3 GB saved at 100% = 8 bytes per parameter; measured_variants.csv G08)."""
    state = ADAM_STATE_BF16_MOMENTS_BYTES if cfg.bf16_moments else ADAM_STATE_BYTES
    return float(state if cfg.precision_aware else state - FP32_MASTER_BYTES)


# Host bytes per offloaded parameter (what the host's RAM holds, not what the GPU saves): HybridDeviceOptimizer
# keeps a pinned fp32 CPU copy of each offloaded parameter (_get_sub_optimizer_param_groups: the distributed
# optimizer's fp32 shard cloned to the CPU, or the bf16 one cloned and made fp32 by param_update_in_fp32 with the
# precision-aware optimizer), a pinned CPU gradient buffer of the copy's dtype (_set_sub_optimizer_grads) and the
# CPU Adam's two moments in that dtype: 4 + 4 + 8.
HOST_BYTES_PER_OFFLOADED_PARAM = 16.0
FP8_WEIGHT_CACHE_BYTES = 2  # TE keeps row-wise and column-wise (transposed) FP8 copies of GEMM weights
MXFP8_SCALE_BYTES = 2 / 32  # one e8m0 scale per 32 values, both directions (OCP MX v1.0)
LOGITS_BYTES_PER_VOCAB = 4  # theoretical_memory_usage.py: 4 x s x b x V (bf16 logits + fp32 CE grad)
# Full-iteration graphs keep one private memory pool: freed activations cannot be reused by other
# allocations, an overhead assumed at 5% of activations (an estimate; Megatron-Core cuda_graphs docs
# warn of extra memory, without a figure).
CUDA_GRAPH_FULL_ITERATION_POOL_FRACTION = 0.05
CUDA_GRAPH_STATIC_IO = 2  # each graphed module keeps a static input and a static output buffer


@dataclass(frozen=True)
class RankMemory:
    """Bytes on one GPU of pipeline rank ``rank``; ``items`` in display order."""

    rank: int
    items: dict[str, float]
    host_bytes: float
    inflight_microbatches: float

    @property
    def allocated_bytes(self) -> float:
        return sum(v for k, v in self.items.items() if k != "reserve")

    @property
    def total_bytes(self) -> float:
        return sum(self.items.values())


@dataclass(frozen=True)
class MemoryEstimate:
    ranks: tuple[RankMemory, ...]
    capacity_bytes: float
    _assumptions: dict[str, object] = field(default_factory=dict)
    pipeline: Pipeline | None = None
    host_capacity_bytes: float = math.inf
    """Host memory per GPU for what the run offloads (hardware ``host_mem_bytes``)."""

    @property
    def assumptions(self) -> dict[str, object]:
        """What the estimate assumed, with the pipeline layout string (built on demand)."""
        out = dict(self._assumptions)
        out["pipeline_layout"] = self.pipeline.layout_string() if self.pipeline else None
        return out

    @property
    def peak(self) -> RankMemory:
        return max(self.ranks, key=lambda r: r.total_bytes)

    @property
    def total_bytes(self) -> float:
        return self.peak.total_bytes

    @property
    def host_peak_bytes(self) -> float:
        """Host bytes of the rank that offloads most (optimizer state and activations it moves to the CPU)."""
        return max(r.host_bytes for r in self.ranks)

    @property
    def host_fits(self) -> bool:
        return self.host_peak_bytes <= self.host_capacity_bytes

    @property
    def verdict(self) -> Verdict:
        """The budget's verdict on the most loaded rank (moeplan.engine.budget: fits, edge or over), with the
        default headroom."""
        return memory_verdict(self.total_bytes, self.capacity_bytes)

    @property
    def fits(self) -> bool:
        """The most loaded rank fits its GPU by the budget's rule (moeplan.engine.budget: within the budget or at its
        edge, inside the memory model's error) and what every rank offloads fits its share of the host's memory."""
        return self.verdict != "over" and self.host_fits

    def shortfall(self, gpu_name: str) -> str | None:
        """What does not fit, in words (None where everything fits): the GPU's memory, the host's, or both."""
        parts = []
        if self.verdict == "over":
            parts.append(f"{self.total_bytes / GIB:,.1f} GiB per GPU on a {self.capacity_bytes / GIB:,.1f} GiB {gpu_name} "
                         f"(budget {budget_bytes(self.capacity_bytes) / GIB:,.1f} GiB, at most "
                         f"{edge_bytes(self.capacity_bytes) / GIB:,.1f} GiB at its edge)")
        if not self.host_fits:
            parts.append(f"{self.host_peak_bytes / GIB:,.1f} GiB per GPU offloaded to a host with "
                         f"{self.host_capacity_bytes / GIB:,.1f} GiB per GPU")
        return "; ".join(parts) or None

    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    def as_gib(self) -> dict[str, float]:
        out = {k: v / GIB for k, v in self.peak.items.items()}
        out["total"] = self.total_bytes / GIB
        return out


# ------------------------------------------------------------------------------------ pipeline


def inflight_per_chunk(pp: int, vpp: int, rank: int, microbatches: int, ep_overlap: bool = False) -> list[int]:
    """Micro-batches whose activations rank ``rank`` holds at its peak, per virtual chunk
    (megatron/core/pipeline_parallel/schedules.py, 1F1B and interleaved 1F1B warm-up counts).

    With EP A2A overlap (overlap_moe_expert_parallel_comm) the interleaved schedule runs one extra
    warm-up forward (get_pp_rank_microbatches: "we schedule one extra micro-batch forward step
    before the 1f1b stages"); its combined steps pair each layer's forward with another micro-batch's
    backward of the mirrored layer (combined_1f1b.py), so they hold no more than plain 1F1B."""
    inflight = min(warmup_count(pp, vpp, rank, microbatches, ep_overlap) + 1, microbatches * vpp)
    if vpp == 1:
        return [max(1, inflight)]
    counts = [0] * vpp
    for k in range(inflight):
        counts[(k // pp) % vpp] += 1
    return counts


# ------------------------------------------------------------------------------------ estimate


def _unfused_scores(cfg: RunConfig, layer: Layer) -> tuple[float, float]:
    """(saved, working peak) bytes of one layer's unfused-attention scores for one micro-batch on one GPU; (0, 0)
    where TE runs a fused kernel for the layer on ``cfg.gpu`` (the timing model's choice, one predicate)."""
    mixer = layer.mixer
    if not isinstance(mixer, Attention) or not unfused_attention(mixer, cfg.gpu, cfg.te_version):
        return 0.0, 0.0
    par, batch = cfg.parallel, cfg.batch
    u = unfused_attention_bytes(mixer, batch.mbs, batch.seq_len, par.tp, par.cp)
    return u.saved_bytes, u.peak_bytes


def _layer_mb_bytes(cfg: RunConfig, layer: Layer, tokens: float, modules: frozenset[str]) -> tuple[float, float]:
    """(kept bytes, offloaded bytes) of one layer for one micro-batch on one GPU; the unfused attention path's
    scores are kept unless core_attn is recomputed (TE checkpoints the whole UnfusedDotProductAttention)."""
    la = run_layer_activation(cfg, layer, modules)
    kept = la.token_bytes * tokens
    if "core_attn" not in modules:
        kept += _unfused_scores(cfg, layer)[0]
    if isinstance(layer.mlp, MoE):
        etp = cfg.parallel.etp
        rows = tokens * layer.mlp.top_k * cfg.rows_factor * etp
        kept += (la.row_bytes - la.row_ffn_bytes) * rows + la.row_ffn_bytes * rows / etp
        if not cfg.experts_op_fused and not modules & {"moe", "moe_act"} and "moe_act" not in cfg.offload_modules:
            kept += clamp_saved_row_bytes(layer.mlp, etp) * rows  # the eager clamp's kept fc1 output (per ETP shard)
    stays, leaves = offload_split_bytes(cfg, la, layer, tokens)
    return kept + stays, leaves


@dataclass(frozen=True)
class RankProfile:
    """What one pipeline rank holds, independent of the memory knobs: parameters per GPU and, for
    activations, each distinct layer weighted by the micro-batches in flight on its chunk."""

    rank: int
    dense_params: float
    expert_params: float
    gemm_params: float
    layer_weights: tuple[tuple[Layer, float], ...]  # sum over chunks of in-flight x layers of that kind
    mtp_weight: float  # in-flight-weighted MTP modules
    loss_weight: float  # in-flight-weighted output layer + loss
    chunks: tuple[tuple[int, Stage], ...]  # (in-flight micro-batches, stage): full recompute needs them
    distinct_layers: tuple[Layer, ...]
    has_moe: bool
    inflight: float

    @cached_property
    def layer_weight_total(self) -> float:
        """The in-flight-weighted layers of every kind, summed in order (each profile once: activation terms
        per layer input and CUDA graph buffers read it for every memory option)."""
        return sum(w for _, w in self.layer_weights)


@lru_cache(maxsize=4096)
def rank_profiles(spec: ModelSpec, par: Parallel, microbatches: int, pipeline: Pipeline,
                  ep_overlap: bool = False) -> tuple[RankProfile, ...]:
    """Per-rank profiles of a layout (cached: the planner costs many knob settings per layout; and
    by what they depend on, so layouts that differ only in CP or DP share them)."""
    counts = tuple(_inflight(par.pp, par.vpp, r, microbatches, ep_overlap) for r in range(par.pp))
    return _rank_profiles(spec, par.tp, par.pp, par.vpp, par.ep, par.etp, pipeline, counts)


@lru_cache(maxsize=4096)
def _inflight(pp: int, vpp: int, rank: int, microbatches: int, ep_overlap: bool) -> tuple[int, ...]:
    return tuple(inflight_per_chunk(pp, vpp, rank, microbatches, ep_overlap))


@lru_cache(maxsize=4096)
def _rank_profiles(spec: ModelSpec, tp: int, pp: int, vpp: int, ep: int, etp: int, pipeline: Pipeline,
                   inflight: tuple[tuple[int, ...], ...]) -> tuple[RankProfile, ...]:
    shape = Parallel(0, tp, pp, vpp, 1, ep, etp)  # what a profile reads of the layout
    return tuple(_profile(spec, shape, r, stages, list(counts))
                 for r, (stages, counts) in enumerate(zip(pipeline.rank_stages, inflight)))


def peak_rank_profiles(spec: ModelSpec, par: Parallel, microbatches: int, pipeline: Pipeline,
                       ep_overlap: bool = False) -> tuple[RankProfile, ...]:
    """The profiles of :func:`rank_profiles` whose rank can hold the layout's peak: a rank is left out when
    a lower rank holds the same layers (kinds, in the same order), embedding, MTP and loss, hence the same
    parameters, and at least as many micro-batches in flight on every chunk. Every activation term is a
    non-negative sum of in-flight counts times bytes, and rounding is monotone, so such a rank's total
    is at most the other's, as a float too: the maximum over these ranks is the maximum over all.
    Only their activation fields are meant (what is in flight depends on the split and the micro-batch
    count, not on TP, EP or ETP): the parameter fields are those of TP = EP = ETP = 1, so layouts that
    differ in these share one answer."""
    return _peak_profiles(spec, par.pp, par.vpp, microbatches, pipeline, ep_overlap)


@lru_cache(maxsize=4096)
def _peak_profiles(spec: ModelSpec, pp: int, vpp: int, microbatches: int, pipeline: Pipeline,
                   ep_overlap: bool) -> tuple[RankProfile, ...]:
    counts = tuple(_inflight(pp, vpp, r, microbatches, ep_overlap) for r in range(pp))
    return tuple(_rank_profile(spec, 1, vpp, 1, 1, pipeline, r, counts[r]) for r in _peak_ranks(spec, pipeline, counts))


@lru_cache(maxsize=16384)
def _rank_profile(spec: ModelSpec, tp: int, vpp: int, ep: int, etp: int, pipeline: Pipeline, rank: int,
                  inflight: tuple[int, ...]) -> RankProfile:
    """One rank's profile (as :func:`_rank_profiles` makes it)."""
    return _profile(spec, Parallel(0, tp, pipeline.pp, vpp, 1, ep, etp), rank, pipeline.rank_stages[rank], list(inflight))


@lru_cache(maxsize=4096)
def _peak_ranks(spec: ModelSpec, pipeline: Pipeline, inflight: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    kept: dict[tuple[object, ...], list[int]] = {}
    out = []
    for r, stages in enumerate(pipeline.rank_stages):
        key = tuple((tuple(spec.layers[i] for i in st.layers), st.embedding, st.mtp, st.loss) for st in stages)
        same = kept.setdefault(key, [])
        if any(all(a >= b for a, b in zip(inflight[k], inflight[r])) for k in same):
            continue
        same.append(r)
        out.append(r)
    return tuple(out)


@lru_cache(maxsize=16384)
def _parameter_profile(spec: ModelSpec, stages: tuple[Stage, ...], tp: int, ep: int, etp: int, rank: int) -> RankProfile:
    """What a rank's parameter state reads of its profile (parameters per GPU and its stages), nothing in
    flight: the activation fields are empty."""
    dense, expert, gemm = rank_params(spec, stages, tp, ep * etp)
    return RankProfile(rank, dense, expert, gemm, (), 0.0, 0.0, tuple((0, st) for st in stages), (), False, 0.0)


def _profile(spec: ModelSpec, par: Parallel, r: int, stages: tuple[Stage, ...], counts: list[int]) -> RankProfile:
    """Rank ``r``'s profile with ``counts[c]`` micro-batches of chunk ``c`` in flight."""
    dense, expert, gemm = rank_params(spec, stages, par.tp, par.ep * par.etp)
    weights: dict[Layer, float] = {}
    mtp = loss = 0.0
    for count, st in zip(counts, stages):
        for layer, n in stage_groups(spec, st):
            weights[layer] = weights.get(layer, 0.0) + count * n
        mtp += count * st.mtp
        loss += count * (1 if st.loss else 0)
    distinct = tuple(dict.fromkeys(layer for st in stages for layer, _ in stage_groups(spec, st)))
    return RankProfile(r, dense, expert, gemm, tuple(weights.items()), mtp, loss, tuple(zip(counts, stages)),
                       distinct, any(layer.is_moe for layer in distinct), sum(counts) / max(1, par.vpp))


def _chunk_full_recompute(cfg: RunConfig, stage: Stage, tokens: float) -> tuple[float, float]:
    """(kept bytes per micro-batch, transient peak) of a chunk under full recompute."""
    spec, rc = cfg.model, cfg.recompute
    groups = stage_groups(spec, stage)
    full_layer = {layer: _layer_mb_bytes(cfg, layer, tokens, frozenset())[0] for layer, _ in groups}
    n_layers = len(stage.layers)
    per_input = layer_input_bytes(spec.hidden) * tokens
    # the layer rebuilt last adds its unfused-attention working peak beyond the scores it keeps
    excess = max((p - s for s, p in (_unfused_scores(cfg, layer) for layer, _ in groups)), default=0.0)
    biggest = max(full_layer.values(), default=0.0)
    if rc.method == "uniform":
        n_groups = math.ceil(n_layers / rc.num_layers) if n_layers else 0
        return n_groups * per_input, min(rc.num_layers, n_layers) * biggest + excess
    recomputed = min(rc.num_layers, n_layers)  # block: first num_layers layers keep only their input
    ordered = [spec.layers[i] for i in stage.layers]
    return recomputed * per_input + sum(full_layer[layer] for layer in ordered[recomputed:]), biggest + excess


def _head_bytes(cfg: RunConfig, tokens: float) -> tuple[float, float]:
    """(output layer + loss, one MTP module beyond its layer) kept bytes per micro-batch."""
    h, v = cfg.model.hidden, cfg.model.vocab
    logits = LOGITS_BYTES_PER_VOCAB * (h + v) * tokens
    eh_proj_and_norms = (2 * 2 * h + 4 * 2 * h) * tokens  # eh_proj input (2h) and 4 norms
    return logits, logits + eh_proj_and_norms


def _rank_activations(cfg: RunConfig, prof: RankProfile, tokens: float,
                      per_layer: dict[Layer, tuple[float, float, float]], dispatch_transient: float,
                      ) -> tuple[float, float, float, float]:
    """(activations, offloaded to host, transient peak, CUDA graph static buffers) on one rank.
    ``per_layer`` maps each layer kind to (kept, offloaded, full) bytes of one micro-batch."""
    spec, rc = cfg.model, cfg.recompute
    act = off = transient = 0.0
    if rc.granularity == "full" and rc.method == "uniform" and rc.num_layers == 1:
        # every layer keeps only its input; one layer is rebuilt at a time
        act = prof.layer_weight_total * layer_input_bytes(spec.hidden) * tokens
        transient = max((per_layer[layer][2] for layer in prof.distinct_layers), default=0.0)
    elif rc.granularity == "full":
        for count, st in prof.chunks:
            kept, trans = _chunk_full_recompute(cfg, st, tokens)
            act += count * kept
            transient = max(transient, trans)
    else:
        for layer, w in prof.layer_weights:
            k, o, _ = per_layer[layer]
            act += w * k
            off += w * o
        for layer in prof.distinct_layers:  # backward regenerates / prefetches one layer at a time
            _, o, full = per_layer[layer]
            transient = max(transient, full + o)
    if prof.mtp_weight and spec.mtp_layer is not None:
        k, o, _ = per_layer[spec.mtp_layer]
        act += prof.mtp_weight * (k + _head_bytes(cfg, tokens)[1])
        off += prof.mtp_weight * o
    if prof.loss_weight:
        act += prof.loss_weight * _head_bytes(cfg, tokens)[0]
    if prof.has_moe:
        transient += dispatch_transient
    if prof.loss_weight:  # the loss's forward peak comes when no layer runs; the gather buffer stays
        h, tp = spec.hidden, cfg.parallel.tp
        transient = max(transient, loss_forward_extra_bytes(spec.vocab, tokens)) + output_gather_buffer_bytes(h, tokens, tp)
    graphs = 0.0
    scopes = cfg.cuda_graph_scopes
    if scopes and "full_iteration" not in scopes:
        per = len(scopes & {"attn", "mlp", "moe", "moe_router", "mamba"}) * CUDA_GRAPH_STATIC_IO * spec.hidden * BF16_BYTES
        graphs = prof.layer_weight_total * per * tokens
    elif "full_iteration" in scopes:
        graphs = CUDA_GRAPH_FULL_ITERATION_POOL_FRACTION * act
    return act, off, transient, graphs


def _per_layer_bytes(cfg: RunConfig, tokens: float) -> dict[Layer, tuple[float, float, float]]:
    """(kept, offloaded, kept-without-recompute) bytes per micro-batch of every layer kind."""
    rc = cfg.recompute
    modules = rc.modules if rc.granularity == "selective" else frozenset()
    out = {}
    for layer in cfg.model.distinct_layers:
        k, o = _layer_mb_bytes(cfg, layer, tokens, modules)
        full = k if rc.granularity == "none" else _layer_mb_bytes(cfg, layer, tokens, frozenset())[0]
        saved, peak = _unfused_scores(cfg, layer)
        # the transient of a layer run alone: its unfused scores at their working peak, not once more as saved
        # where the layer's kept bytes already hold them (no core_attn recompute, not full recompute)
        kept_scores = rc.granularity != "full" and "core_attn" not in modules
        full += peak - saved - (saved if kept_scores else 0.0)
        if isinstance(layer.mixer, Mamba2):  # the SSD kernels' fp32 working buffers (moeplan.engine.mamba)
            full += ssd_transient_bytes_per_token(layer.mixer) * tokens
        out[layer] = (k, o, full)
    return out


def _moe_dispatch_transient(cfg: RunConfig, tokens: float) -> float:
    """Permutation and all-to-all copies of one MoE layer's routed tokens (input permute buffer and
    the received buffer before sorting), live while the layer runs."""
    moe = cfg.model.first_moe
    if moe is None:
        return 0.0
    rows = tokens * moe.top_k * cfg.rows_factor * cfg.parallel.etp
    if cfg.dispatcher == "allgather":
        # MoEAllGatherTokenDispatcher gathers every token of the EP x ETP group (token_dispatcher.py
        # gather_from_sequence_parallel_region) before it selects its own rows: that gathered copy is live too
        rows += tokens * tp_ep_group_ranks(cfg.parallel) / 2
    return max(2 * rows * cfg.model.hidden * BF16_BYTES, alltoall_expert_tp_combine_bytes(cfg, tokens))


def _dispatcher_bytes(cfg: RunConfig, nvlink_domain: int, tokens: float) -> float:
    """The MoE dispatcher's communication buffers per GPU (DeepEP / HybridEP; none for alltoall)."""
    spec, par = cfg.model, cfg.parallel
    moe = spec.first_moe
    if cfg.dispatcher in ("deepep", "ncclep") and moe is not None:
        # NCCL EP (core_v0.19.0): what NCCL's EP group and TE's symmetric-memory pool allocate has no public size;
        # its high-throughput kernels are HybridEP/DeepEP-derived, so DeepEP's normal-kernel buffers stand in
        # DeepEP's Buffer spans the flex dispatcher's expert TP x EP group (base.deepep_configs.tp_ep_group_ranks)
        return deepep_buffer_bytes(spec.hidden, tp_ep_group_ranks(par))
    if cfg.dispatcher == "hybridep" and moe is not None:
        # HybridEP's buffer spans the same group, whose experts are expert TP x num_experts
        # (token_dispatcher.py: _HybridEPManager(group=self.tp_ep_group, num_experts=tp_size x num_experts))
        return hybridep_buffer_bytes(spec.hidden, tp_ep_group_ranks(par), tokens, moe.num_experts * par.etp,
                                     nvlink_domain)
    return 0.0


def _state_bytes(cfg: RunConfig) -> int:
    return ADAM_STATE_BF16_MOMENTS_BYTES if cfg.bf16_moments else ADAM_STATE_BYTES


def _extra_warmup(cfg: RunConfig) -> bool:
    """EP A2A overlap adds one warm-up micro-batch, only to the interleaved schedule."""
    return cfg.parallel.vpp > 1 and cfg.ep_overlap and cfg.ep_overlap_allowed


def _rank_model_state(cfg: RunConfig, prof: RankProfile) -> tuple[float, float, float, float, float, float]:
    """(weights, FP8 weight copies, gradients, optimizer state on the GPU, FSDP buffers, optimizer state on
    the host) bytes of one rank: what its parameters hold, whatever the activation knobs."""
    par = cfg.parallel
    grad_bytes = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    state_bytes = _state_bytes(cfg)
    fp8 = fp8_kind(cfg.precision)
    fp8_copy = FP8_WEIGHT_CACHE_BYTES + (MXFP8_SCALE_BYTES if fp8 == "mxfp8" else 0.0) if fp8 else 0.0
    if cfg.fsdp is None and cfg.optimizer == "adam":
        offloaded_state = cfg.optimizer_offload * offloaded_state_bytes_per_param(cfg) / state_bytes
        opt_share = 1.0 - offloaded_state  # share of the sharded Adam state that stays on the GPU
        params = prof.dense_params + prof.expert_params
        sharded_state = state_bytes * (prof.dense_params / (par.dp * par.cp) + prof.expert_params / par.edp)
        weights, grads, opt_gpu = params * BF16_BYTES, params * grad_bytes, sharded_state * opt_share
        opt_host, fsdp_buffers, fp8_share = sharded_state * offloaded_state, 0.0, 1.0
    else:  # Megatron-FSDP and/or Muon: moeplan.engine.fsdp and moeplan.engine.muon
        st = _model_state(cfg, prof, state_bytes, grad_bytes)
        weights, grads, opt_gpu = st.weights, st.gradients, st.optimizer_gpu
        opt_host, fsdp_buffers, fp8_share = st.optimizer_host, st.fsdp_buffers, st.weight_fraction
    return weights, prof.gemm_params * fp8_copy * fp8_share, grads, opt_gpu, fsdp_buffers, opt_host


def _rank_items(cfg: RunConfig, nvlink_domain: int, pipe: Pipeline) -> list[tuple[RankProfile, dict[str, float], float]]:
    """Per rank: its profile, memory items (bytes) and host bytes."""
    spec, par, batch = cfg.model, cfg.parallel, cfg.batch
    m = batch.microbatches(par.dp)
    tokens = batch.mbs * batch.seq_len / (par.cp * par.tp)  # per GPU, attention layout
    dispatcher = _dispatcher_bytes(cfg, nvlink_domain, tokens)
    out = []
    per_layer = _per_layer_bytes(cfg, tokens)
    dispatch_transient = _moe_dispatch_transient(cfg, tokens)
    reserve = cfg.reserve_gib * GIB
    for prof in rank_profiles(spec, par, m, pipe, _extra_warmup(cfg)):
        act, off_host, transient, graphs = _rank_activations(cfg, prof, tokens, per_layer, dispatch_transient)
        weights, fp8_copies, grads, opt_gpu, fsdp_buffers, opt_host = _rank_model_state(cfg, prof)
        opt_host = _host_bytes_of_moved_state(cfg, opt_host)
        items = {
            "weights": weights,
            "fp8_weight_copies": fp8_copies,
            "gradients": grads,
            "optimizer_states": opt_gpu,
            "fsdp_buffers": fsdp_buffers,
            "activations": act,
            "transient": transient,
            "dispatcher_buffers": dispatcher,
            "cuda_graphs": graphs,
            "reserve": reserve,
        }
        out.append((prof, items, opt_host + off_host))
    return out


def _rank_total(state: float, act: float, transient: float, dispatcher: float, graphs: float, reserve: float) -> float:
    """A rank's total bytes, added in the order of MEMORY_ITEMS (``state``: weights + FP8 copies + gradients
    + optimizer + FSDP buffers, added in that order), so every path gives the same float."""
    return state + act + transient + dispatcher + graphs + reserve


_NOT_SHARED = ("parallel", "batch", "recompute", "optimizer_offload")  # LayoutMemory.shared_keys: read in parts
_SHARED_FIELDS = other_fields(*_NOT_SHARED)


def shared_fields_key(base: RunConfig, shared: dict[Any, Any]) -> object:
    """The small id that stands in :meth:`LayoutMemory.shared_keys` for the run's other fields (every field
    but the layout, the batch, the recompute and the offload, in field order), kept in ``shared``. Runs whose
    other fields are equal get the same id, so a caller that makes runs from one template by setting the
    layout, the batch and a few other fields can find it once per value of those few."""
    return shared.setdefault(("fields", _SHARED_FIELDS(base)), ("fields", len(shared)))


class LayoutMemory:
    """Peak memory of the memory options of one run: the run ``base`` with any recompute and optimizer
    offload fraction (the planner's memory ladder). A rank's parameter state does not depend on the
    recompute, its activations not on the offload: each part is computed once per value and the two are
    added in the order :func:`peak_memory_bytes` adds them, so the totals are the same floats
    (tests/unit/test_memory_ladder_cache.py)."""

    __slots__ = ("base", "nvlink_domain", "pipe", "_tokens", "_m", "_fixed", "_state", "_acts", "_layers", "_peaks",
                 "_offloaded", "_host")

    def __init__(self, base: RunConfig, nvlink_domain: int, pipe: Pipeline,
                 shared: dict[Any, Any] | None = None, fields: object = None) -> None:
        """``shared``: a dict the caller keeps across the layouts of one search (see :meth:`shared_keys`).
        ``fields``: :func:`shared_fields_key` of ``base`` and ``shared``, when the caller has it (the planner
        builds its runs from one template and computes it once per value of the fields it sets)."""
        self.base, self.nvlink_domain, self.pipe = base, nvlink_domain, pipe
        par, batch = base.parallel, base.batch
        self._tokens = batch.mbs * batch.seq_len / (par.cp * par.tp)
        self._m = batch.microbatches(par.dp)
        self._fixed = (_dispatcher_bytes(base, nvlink_domain, self._tokens), base.reserve_gib * GIB)
        # offload -> rank -> parameter state bytes; recompute -> (extra warm-up, per rank activations)
        self._state: dict[float, dict[int, float]]
        self._acts: dict[Recompute, tuple[bool, list[tuple[int, float, float, float]]]]
        # recompute -> (bytes per micro-batch of each layer kind, MoE dispatch transient)
        self._layers: dict[Recompute, tuple[dict[Layer, tuple[float, float, float]], float]]
        # offload -> host bytes of the rank that offloads most (what the parameter state reads: shared with it)
        self._host: dict[float, float]
        if shared is None:
            self._state, self._acts, self._layers, self._host = {}, {}, {}, {}
        else:
            act_key, state_key, layer_key = self.shared_keys(shared, fields)
            self._acts = shared.setdefault(act_key, {})
            self._state = shared.setdefault(state_key, {})
            self._layers = shared.setdefault(layer_key, {})
            self._host = shared.setdefault(("host", *state_key[1:]), {})
        self._peaks: dict[tuple[Recompute, float], float] = {}
        self._offloaded: dict[float, RunConfig] = {}  # offload fraction -> the run with it (every rank's state)

    def shared_keys(self, shared: dict[Any, Any] | None = None, fields: object = None,
                    ) -> tuple[tuple[object, ...], tuple[object, ...], tuple[object, ...]]:
        """What a rank's activations, its parameter state and the per-layer activation bytes depend on, to
        share them across the layouts of a search: every field of the run (present or added later) but the
        layout, the batch, the recompute and the offload, plus the parts of these they read. Activations:
        TP, PP, VPP, CP, ETP, the pipeline, sequence, MBS and the micro-batch count, not EP (only parameters
        are split over experts; but the allgather dispatcher's EP x ETP group, whose tokens its transient holds) nor
        the GPU count. Parameter state: TP, PP, VPP, EP, ETP, the pipeline, the
        GPU count and with it the dense data-parallel group DP x CP (Megatron's distributed optimizer and
        FSDP shard dense state over it; expert state over EDP, which these fix), not the batch nor CP and DP
        apart. Per-layer bytes of one micro-batch: ETP and the tokens per GPU (MBS x seq / (CP x TP)), whether
        EP leaves a rank more than one expert (the alltoall combine's unsort), the EP x ETP group where the allgather
        dispatcher gathers its tokens (its transient), not
        the pipeline; with unfused attention (its s x s scores) TP, CP, MBS and the sequence apart. Both
        also read the routed rows per token (``rows_factor``), which depends on EP where the imbalance is
        capped (EP 1 keeps a token's rows local), so it is in their keys.
        tests/unit/test_memory_ladder_cache.py shares one dict over families of layouts and
        compares every answer with a fresh item-by-item estimate. With ``shared``, the run's other fields
        stand in the keys as a small id kept in it (cheaper to hash; ``fields``: that id, already found)."""
        base, par, batch = self.base, self.base.parallel, self.base.batch
        rest: object
        if shared is None:
            rest = _SHARED_FIELDS(base)  # the other fields' values, in field order
        else:
            rest = fields if fields is not None else shared_fields_key(base, shared)
        rows = base.rows_factor  # routed rows per token: it reads EP where the imbalance is capped
        gathered = tp_ep_group_ranks(par) if base.dispatcher == "allgather" else None  # the allgather transient's group
        if shared is None:
            unfused = keeps_unfused_scores(base.model, base.gpu, base.te_version)
        else:  # it reads the model, GPU and TE release, which the id stands for: once per id
            unfused = shared.get(("unfused", rest))
            if unfused is None:
                unfused = shared[("unfused", rest)] = keeps_unfused_scores(base.model, base.gpu, base.te_version)
        return (("activations", rest, par.tp, par.pp, par.vpp, par.cp, par.etp, par.pipeline_layout, self.pipe,
                 batch.seq_len, batch.mbs, self._m, rows, gathered),
                ("state", rest, par.tp, par.pp, par.vpp, par.ep, par.etp, par.pipeline_layout, self.pipe,
                 par.dp * par.cp, par.gpus),
                ("layers", rest, par.etp, self._tokens, rows, (par.tp, par.cp, batch.mbs, batch.seq_len) if unfused else None,
                 many_local_experts(base), gathered))

    def config(self, recompute: Recompute, optimizer_offload: float) -> RunConfig:
        return self.base.evolve(recompute=recompute, optimizer_offload=optimizer_offload)

    def _activations(self, recompute: Recompute) -> tuple[bool, list[tuple[int, float, float, float]]]:
        """(extra EP-overlap warm-up, per rank that can hold the peak: (rank, activations, transient, CUDA
        graph buffers)) with this recompute."""
        hit = self._acts.get(recompute)
        if hit is None:
            base = self.base
            cfg = base.evolve(recompute=recompute)
            extra = _extra_warmup(cfg)
            tokens = self._tokens
            layers = self._layers.get(recompute)
            if layers is None:
                layers = self._layers[recompute] = (_per_layer_bytes(cfg, tokens), _moe_dispatch_transient(cfg, tokens))
            per_layer, transient = layers
            acts = []
            for prof in peak_rank_profiles(base.model, base.parallel, self._m, self.pipe, extra):
                act, _, trans, graphs = _rank_activations(cfg, prof, tokens, per_layer, transient)
                acts.append((prof.rank, act, trans, graphs))
            hit = self._acts[recompute] = (extra, acts)
        return hit

    def _rank_state(self, rank: int, optimizer_offload: float) -> float:
        """Weights + FP8 copies + gradients + optimizer + FSDP buffers of a rank, added in that order."""
        base, par = self.base, self.base.parallel
        prof = _parameter_profile(base.model, self.pipe.rank_stages[rank], par.tp, par.ep, par.etp, rank)
        cfg = self._offloaded.get(optimizer_offload)
        if cfg is None:
            cfg = self._offloaded[optimizer_offload] = base.evolve(optimizer_offload=optimizer_offload)
        weights, fp8_copies, grads, opt_gpu, fsdp_buffers, _ = _rank_model_state(cfg, prof)
        return weights + fp8_copies + grads + opt_gpu + fsdp_buffers

    def host_bytes(self, optimizer_offload: float) -> float:
        """:func:`offloaded_state_bytes` of the run with this offload fraction: the full offload's, kept with the
        parameter state, times the fraction (the offloaded parameters, and so their host bytes, are that fraction of
        each rank's: hybrid_optimizer.py offload_threshold)."""
        full = self._host.get(1.0)
        if full is None:
            full = self._host[1.0] = offloaded_state_bytes(self.base.evolve(optimizer_offload=1.0), self.pipe)
        return full * optimizer_offload

    def host_fits(self, optimizer_offload: float) -> bool:
        """Whether that offload fits the host memory per GPU (:func:`host_fits`)."""
        return host_fits(self.base, self.host_bytes(optimizer_offload))

    def peak_bytes(self, recompute: Recompute, optimizer_offload: float) -> float:
        """Total bytes on the most loaded rank of the run with this recompute and offload fraction."""
        key = (recompute, optimizer_offload)
        hit = self._peaks.get(key)
        if hit is not None:
            return hit
        acts = self._acts.get(recompute)  # (one call fewer per layout where another layout costed them)
        _, acts = acts if acts is not None else self._activations(recompute)
        state = self._state.get(optimizer_offload)
        if state is None:
            state = self._state[optimizer_offload] = {}
        dispatcher, reserve = self._fixed
        peak = -math.inf
        for rank, act, trans, graphs in acts:
            s = state.get(rank)
            if s is None:
                s = state[rank] = self._rank_state(rank, optimizer_offload)
            peak = max(peak, _rank_total(s, act, trans, dispatcher, graphs, reserve))
        self._peaks[key] = peak
        return peak


def _host_bytes_of_moved_state(cfg: RunConfig, moved_gpu_bytes: float) -> float:
    """Host bytes of the offloaded parameters whose state frees ``moved_gpu_bytes`` on the GPU
    (:func:`offloaded_state_bytes_per_param` each): :data:`HOST_BYTES_PER_OFFLOADED_PARAM` per parameter."""
    if moved_gpu_bytes == 0.0:
        return 0.0
    return moved_gpu_bytes / offloaded_state_bytes_per_param(cfg) * HOST_BYTES_PER_OFFLOADED_PARAM


def host_fits(cfg: RunConfig, host_bytes: float) -> bool:
    """Whether ``host_bytes`` offloaded per GPU fit the host memory per GPU (hardware ``host_mem_bytes``), as the
    planner asks it (LayoutMemory.host_fits, its strongest option); an estimate compares with the capacity it was
    made with (MemoryEstimate.host_capacity_bytes, the same field)."""
    return host_bytes <= cfg.gpu.host_mem_bytes


def offloaded_state_bytes(cfg: RunConfig, pipeline: Pipeline) -> float:
    """Host bytes of the optimizer state CPU offload keeps in the host's RAM, on the pipeline rank that offloads
    most (every rank counted: the host memory per GPU is each rank's share). Activation offload
    (``offload_modules``) adds to it in :func:`estimate_memory`; the planner's runs offload none."""
    if cfg.optimizer_offload == 0.0:
        return 0.0
    par = cfg.parallel
    moved = max(_rank_model_state(cfg, _parameter_profile(cfg.model, stages, par.tp, par.ep, par.etp, rank))[5]
                for rank, stages in enumerate(pipeline.rank_stages))
    return _host_bytes_of_moved_state(cfg, moved)


def _model_state(cfg: RunConfig, prof: RankProfile, adam_bytes: float, grad_bytes: float) -> Any:
    """Weights, gradients, optimizer state and FSDP buffers of one rank (moeplan.engine.fsdp.model_state):
    Muon holds MUON_STATE_BYTES per 2-D weight, Adam ``adam_bytes`` per other parameter; optimizer CPU
    offload (Adam only: Muon runs without the precision-aware optimizer) moves
    ``offloaded_state_bytes_per_param`` of each parameter's state."""
    par, spec = cfg.parallel, cfg.model
    stages = tuple(st for _, st in prof.chunks)
    dense, expert = prof.dense_params, prof.expert_params
    if cfg.optimizer == "muon":
        m_dense, m_expert = rank_muon_params(spec, stages, par.tp, par.ep, par.etp)
        m_dense, m_expert = min(m_dense, dense), min(m_expert, expert)
    else:
        m_dense = m_expert = 0.0
    a_dense, a_expert = dense - m_dense, expert - m_expert
    moved = cfg.optimizer_offload * offloaded_state_bytes_per_param(cfg)
    state_dense = adam_bytes * a_dense + muon.MUON_STATE_BYTES * m_dense
    state_expert = adam_bytes * a_expert + muon.MUON_STATE_BYTES * m_expert
    units = rank_units(spec, stages, par.tp, par.ep * par.etp) if cfg.fsdp is not None else ()
    return fsdp.model_state(cfg, dense, expert, units, state_dense, state_expert, moved * a_dense,
                            moved * a_expert, grad_bytes)


@dataclass(frozen=True)
class ScheduleMemory:
    """One rank's memory as the schedule runs: ``static_bytes`` stay the whole step, each in-flight
    micro-batch of chunk ``c`` keeps ``chunk_microbatch_bytes[c]`` (activations and the CUDA graph
    buffers that scale with them) from its forward to the end of its backward, and the running layer
    adds ``transient_bytes``. With ``inflight_per_chunk`` micro-batches in flight this is the estimate:
    static + sum(inflight x chunk bytes) + transient = ``total_bytes``."""

    rank: int
    static_bytes: float
    chunk_microbatch_bytes: tuple[float, ...]
    transient_bytes: float
    inflight_per_chunk: tuple[int, ...]
    total_bytes: float


def schedule_memory(cfg: RunConfig, nvlink_domain: int, pipeline: Pipeline, rank: int) -> ScheduleMemory:
    """Rank ``rank``'s memory split for laying it over the pipeline schedule (moeplan.engine.timeline)."""
    spec, par, batch = cfg.model, cfg.parallel, cfg.batch
    tokens = batch.mbs * batch.seq_len / (par.cp * par.tp)
    prof, items, _ = _rank_items(cfg, nvlink_domain, pipeline)[rank]
    per_layer = _per_layer_bytes(cfg, tokens)
    dispatch_transient = _moe_dispatch_transient(cfg, tokens)
    stages = pipeline.rank_stages[rank]
    chunk_bytes = []
    for c in range(len(stages)):
        unit = _profile(spec, par, rank, stages, [1 if i == c else 0 for i in range(len(stages))])
        act, _, _, graphs = _rank_activations(cfg, unit, tokens, per_layer, dispatch_transient)
        chunk_bytes.append(act + graphs)
    total = sum(items.values())
    static = total - items["activations"] - items["cuda_graphs"] - items["transient"]
    return ScheduleMemory(rank, static, tuple(chunk_bytes), items["transient"],
                          tuple(count for count, _ in prof.chunks), total)


def peak_memory_bytes(cfg: RunConfig, nvlink_domain: int, pipeline: Pipeline) -> float:
    """Total bytes on the most loaded rank (the planner's fast path; no validation): the sum of
    :func:`estimate_memory`'s items, added in their order."""
    return LayoutMemory(cfg, nvlink_domain, pipeline).peak_bytes(cfg.recompute, cfg.optimizer_offload)


def estimate_memory(cfg: RunConfig, capacity_bytes: float, nvlink_domain: int = 8,
                    pipeline: Pipeline | None = None, validated: bool = False) -> MemoryEstimate:
    """Per-GPU memory of every pipeline rank; the estimate is the most loaded one."""
    spec, par, batch = cfg.model, cfg.parallel, cfg.batch
    if not validated:
        validate(spec, par, batch, cfg.mcore_version, cfg.gpu, cfg.te_version)
    pipe = pipeline or build_pipeline(spec, par)
    m = batch.microbatches(par.dp)
    tokens = batch.mbs * batch.seq_len / (par.cp * par.tp)
    state_bytes = ADAM_STATE_BF16_MOMENTS_BYTES if cfg.bf16_moments else ADAM_STATE_BYTES
    ranks = [RankMemory(prof.rank, items, host, prof.inflight) for prof, items, host in _rank_items(cfg, nvlink_domain, pipe)]
    assumptions = {
        "microbatches": m,
        "tokens_per_gpu_per_microbatch": tokens,
        "grad_dtype": "fp32" if cfg.grad_fp32 else "bf16",
        "adam_state_bytes_per_param": state_bytes,
        "distributed_optimizer": cfg.fsdp is None and cfg.optimizer == "adam",
        "megatron_fsdp": cfg.fsdp,
        "fsdp_double_buffer": cfg.fsdp_double_buffer if cfg.fsdp else None,
        "optimizer": cfg.optimizer,
        "moe_rows_factor": cfg.rows_factor,
        # fused attention keeps no s x s scores; TE's unfused path (moeplan.run.attention_backend) keeps them
        "flash_attention": not keeps_unfused_scores(spec, cfg.gpu, cfg.te_version),
        "unfused_attention_saved_bytes_per_layer_microbatch": next(
            (b for b in (_unfused_scores(cfg, layer)[0] for layer in spec.distinct_layers) if b), 0.0),
        "memory_efficient_permutation": True,
    }
    return MemoryEstimate(tuple(ranks), capacity_bytes, assumptions, pipe if par.pp * par.vpp > 1 else None,
                          float(cfg.gpu.host_mem_bytes))


MEMORY_ITEMS = ("weights", "fp8_weight_copies", "gradients", "optimizer_states", "fsdp_buffers", "activations",
                "transient", "dispatcher_buffers", "cuda_graphs", "reserve")
