"""Megatron-FSDP: what each sharding strategy keeps on a GPU and what it communicates.

Sources (NVIDIA/Megatron-LM, core_v0.16.1; same logic core_v0.14.0 .. core_v0.19.0):
- megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py
  ``_init_each_parameter_group_buffers``: per ``data_parallel_sharding_strategy`` which buffers are
  distributed over the data-parallel group: no_shard none; optim the fp32 main weights (and so the
  optimizer state); optim_grads also the gradients; optim_grads_params also the bf16 model weights.
  Dense parameters shard over DP x CP, expert parameters over the expert-data-parallel group
  (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py, dp_cp and expt_dp groups).
- megatron_fsdp.py: each TransformerLayer is one FSDP unit; with optim_grads_params its parameters are
  all-gathered before its forward and again before its backward (resharded after forward), and for
  optim_grads / optim_grads_params its gradients are reduce-scattered after every backward
  (``grad_reduce_every_bprop``), overlapped on side streams (overlap_grad_reduce / overlap_param_gather are
  forced on). no_shard / optim delay the reduction to the last micro-batch (``is_delay_grad_reduce``);
  no_shard all-reduces, the others reduce-scatter (``_bucket_group_gradient_reduce``).
- Buffers live at once: ``suggested_communication_unit_size`` defaults to max(1e9, 2 x mean unit
  elements) for optim_grads_params (else max(1e9, bucket_size)); the all-gather prefetches ahead of the
  current unit until half of it (``suggested_AG_prefetch_size``) is in flight; the reduce-scatter queue
  frees a gradient bucket only once the queued elements exceed the whole unit size
  (``wait_for_previous_grad_reduce``). With ``fsdp_double_buffer`` a fixed pool of two buffers per unit
  size holds parameters and gradients (``FixedPoolAllocator``, size 2) and prefetch stops at it.
No code is taken from those files; only the rules above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from moeplan.base.vocab import FSDP_STRATEGIES
from moeplan.engine.activations import BF16_BYTES
from moeplan.run.config import RunConfig

# megatron_fsdp.py: suggested_communication_unit_size = max(1_000_000_000, default) (elements)
COMM_UNIT_FLOOR_ELEMENTS = 1_000_000_000
FULL_SHARD = "optim_grads_params"  # what Megatron Bridge's perf scripts set with --use_megatron_fsdp
DOUBLE_BUFFER_UNITS = 2  # FixedPoolAllocator size


def label(strategy: str | None) -> str:
    """How a plan that needs Megatron-FSDP is marked beside its layout: '' without it, 'FSDP' for the full
    shard, else 'FSDP <strategy>' (the plan and sweep tables, the HTML report, explain)."""
    if not strategy:
        return ""
    return "FSDP" if strategy == FULL_SHARD else f"FSDP {strategy}"


# SMs an all-gather / reduce-scatter kernel occupies while it overlaps compute: NVLink only 4 / 5, NVLink +
# InfiniBand 16 / 16 without SHARP (megatron/core/distributed/distributed_data_parallel_config.py, nccl_ub
# docstring table, core_v0.16.1; with NCCL user buffers, so a lower bound without them).
COMM_SMS_NVLINK = 5
COMM_SMS_SCALEOUT = 16


@dataclass(frozen=True)
class Shards:
    """Which per-parameter state a strategy distributes over the data-parallel group."""

    optimizer: bool
    gradients: bool
    params: bool


SHARDS: dict[str, Shards] = {
    "no_shard": Shards(False, False, False),
    "optim": Shards(True, False, False),
    "optim_grads": Shards(True, True, False),
    "optim_grads_params": Shards(True, True, True),
}
assert tuple(SHARDS) == FSDP_STRATEGIES


def shards(cfg: RunConfig) -> Shards:
    """What the run distributes: Megatron-FSDP per strategy; the distributed optimizer and Muon's
    layer-wise distributed optimizer shard the optimizer state only (gradient buffer and bf16 weights
    are whole)."""
    if cfg.fsdp is not None:
        return SHARDS[cfg.fsdp]
    if cfg.optimizer == "muon" and not cfg.muon_layer_wise:  # plain 'muon': no distributed optimizer
        return Shards(False, False, False)
    return Shards(True, False, False)


@dataclass(frozen=True)
class ModelState:
    """Bytes of weights, gradients, optimizer state and FSDP communication buffers on one GPU."""

    weights: float
    gradients: float
    optimizer_gpu: float
    optimizer_host: float
    fsdp_buffers: float
    weight_fraction: float  # share of the rank's parameters present in full at the peak (FP8 copies)


def gathered_peak(units: Sequence[float], prefetch_elements: float, double_buffer: bool) -> float:
    """Most parameter elements all-gathered at once walking the units in forward order: the current
    unit plus the following ones until ``prefetch_elements`` are in flight (at least one); with double
    buffering, the current and the next unit."""
    peak = 0.0
    for i, u in enumerate(units):
        ahead = 0.0
        for nxt in units[i + 1:]:
            if ahead >= prefetch_elements or (double_buffer and ahead > 0):
                break
            ahead += nxt
        peak = max(peak, u + ahead)
    return peak


def reduce_queue_peak(units: Sequence[float], capacity_elements: float, double_buffer: bool) -> float:
    """Most unsharded gradient elements alive walking the units in backward order: a unit's buckets join
    the reduce-scatter queue once its gradients are ready, after the queue is drained to at most
    ``capacity_elements``; the next unit accumulates meanwhile. Double buffering keeps two."""
    order = list(reversed(units))
    if double_buffer:
        return max((a + b for a, b in zip(order, order[1:])), default=sum(order))
    queue: list[float] = []
    queued = peak = 0.0
    for u in order:
        peak = max(peak, queued + u)  # unit accumulating while earlier ones reduce
        while queue and queued > capacity_elements:
            queued -= queue.pop(0)
        queue.append(u)
        queued += u
    return max(peak, queued)


def buffer_bytes(cfg: RunConfig, units: Sequence[float], grad_bytes: float) -> tuple[float, float]:
    """(all-gathered parameter buffers, unsharded gradient buffers) live at the peak, bytes.

    ``units``: per-GPU parameter elements of each FSDP unit on the rank, in forward order."""
    if cfg.fsdp is None or not units:
        return 0.0, 0.0
    sh = shards(cfg)
    gathered, queued = _peaks(tuple(units), cfg.fsdp, cfg.fsdp_double_buffer)
    return gathered * BF16_BYTES if sh.params else 0.0, queued * grad_bytes if sh.gradients else 0.0


@lru_cache(maxsize=4096)
def _peaks(units: tuple[float, ...], strategy: str, double_buffer: bool) -> tuple[float, float]:
    """(gathered, queued) peak elements of a rank's units (cached: the planner asks per ladder step)."""
    base = 2 * sum(units) / len(units) if strategy == FULL_SHARD else COMM_UNIT_FLOOR_ELEMENTS
    unit = max(COMM_UNIT_FLOOR_ELEMENTS, base)
    return gathered_peak(units, unit / 2, double_buffer), reduce_queue_peak(units, unit, double_buffer)


def model_state(cfg: RunConfig, dense: float, expert: float, units: Sequence[float], state_dense: float,
                state_expert: float, offload_dense: float, offload_expert: float,
                grad_bytes: float) -> ModelState:
    """Model state of one pipeline rank.

    ``dense``/``expert``: parameters per GPU; ``state_*``: optimizer bytes (fp32 master + moments) of
    those parameters before sharding; ``offload_*``: the part of that state CPU offload moves to host."""
    par = cfg.parallel
    dp_dense, edp = par.dp * par.cp, par.edp
    sh = shards(cfg)

    def split(d: float, e: float, sharded: bool) -> float:
        return d / dp_dense + e / edp if sharded else d + e

    weights = split(dense, expert, sh.params) * BF16_BYTES
    gradients = split(dense, expert, sh.gradients) * grad_bytes
    opt_total = split(state_dense, state_expert, sh.optimizer)
    host = split(offload_dense, offload_expert, sh.optimizer)
    ag, rs = buffer_bytes(cfg, units, grad_bytes)
    total = dense + expert
    fraction = 1.0
    if sh.params and total > 0:
        fraction = min(1.0, ag / BF16_BYTES / total + (dense / dp_dense + expert / edp) / total)
    return ModelState(weights, gradients, opt_total - host, host, ag + rs, fraction)


Ring = Callable[[float, int, float], float]


def dp_comm_s(cfg: RunConfig, dense: float, expert: float, mean_unit: float, t_mb: float, bubble_s: float,
              dense_bw: float, expert_bw: float, grad_bytes: float, ring: Ring,
              comm_sm_share: float = 0.0) -> tuple[float, dict[str, float]]:
    """Exposed data-parallel communication of a step under Megatron-FSDP, and its raw parts (seconds).

    ``dense``/``expert``: parameters per GPU (averaged over pipeline ranks); ``mean_unit``: elements of
    one FSDP unit; ``t_mb``: one micro-batch on the slowest rank (fwd 1/3, bwd 2/3); ``bubble_s``: the
    pipeline bubble; ``ring(bytes_per_rank, n, busbw)``: ring all-gather / reduce-scatter time;
    ``comm_sm_share``: the share of the GPU's SMs the collectives take while they hide behind compute,
    which slows that compute by share / (1 - share) of the hidden time."""
    exposed, parts = _dp_comm_exposed(cfg, dense, expert, mean_unit, t_mb, bubble_s, dense_bw, expert_bw,
                                      grad_bytes, ring)
    hidden = max(0.0, parts["param_all_gather_s"] + parts["grad_reduce_s"] - exposed)
    parts["sm_contention_s"] = hidden * comm_sm_share / (1 - comm_sm_share) if comm_sm_share < 1 else 0.0
    return exposed + parts["sm_contention_s"], parts


def _dp_comm_exposed(cfg: RunConfig, dense: float, expert: float, mean_unit: float, t_mb: float, bubble_s: float,
                     dense_bw: float, expert_bw: float, grad_bytes: float, ring: Ring) -> tuple[float, dict[str, float]]:
    """Exposed seconds and raw parts of :func:`dp_comm_s`, before SM contention."""
    par = cfg.parallel
    m = cfg.batch.microbatches(par.dp)
    dp_dense, edp = par.dp * par.cp, par.edp

    def coll(d_bytes: float, e_bytes: float) -> float:
        return ring(d_bytes / dp_dense, dp_dense, dense_bw) + ring(e_bytes / edp, edp, expert_bw)

    ag = coll(dense * BF16_BYTES, expert * BF16_BYTES)  # all model weights gathered once
    rs = coll(dense * grad_bytes, expert * grad_bytes)  # all gradients reduce-scattered once
    t_fwd, t_bwd = t_mb / 3, 2 * t_mb / 3
    share = dense / (dense + expert) if dense + expert else 1.0
    first_unit_ag = coll(mean_unit * share * BF16_BYTES, mean_unit * (1 - share) * BF16_BYTES)
    parts = {"param_all_gather_s": 0.0, "grad_reduce_s": 0.0}
    if cfg.fsdp == "optim_grads_params":
        # per micro-batch: gather before forward and again before backward, reduce-scatter after
        # backward, hidden behind that pass's compute except the first unit's gather of each pass
        per_mb = max(0.0, ag - t_fwd) + max(0.0, ag + rs - t_bwd) + 2 * first_unit_ag
        parts["param_all_gather_s"], parts["grad_reduce_s"] = 2 * ag * m, rs * m
        # exposed time lengthens every micro-batch, so the bubble too ((PP - 1) / VPP micro-batches)
        return per_mb * (m + (par.pp - 1) / par.vpp), parts
    if cfg.fsdp == "optim_grads":
        parts["param_all_gather_s"], parts["grad_reduce_s"] = ag, rs * m
        per_mb = max(0.0, rs - t_bwd)
        return per_mb * (m + (par.pp - 1) / par.vpp) + max(0.0, ag - (t_fwd + bubble_s)), parts
    reduce = 2 * rs if cfg.fsdp == "no_shard" else rs  # all-reduce = reduce-scatter + all-gather
    gather = 0.0 if cfg.fsdp == "no_shard" else ag
    parts["param_all_gather_s"], parts["grad_reduce_s"] = gather, reduce
    # delayed to the last micro-batch's backward and the cool-down; gather during the first forward
    return max(0.0, reduce - (t_bwd + bubble_s)) + max(0.0, gather - (t_fwd + bubble_s)), parts


def unit_elements(layer_elements: Sequence[float], embedding: float, output: float) -> tuple[float, ...]:
    """FSDP units of a rank: one per decoder/MTP layer; the embedding and output layer are gathered
    as modules of their own (megatron_fsdp.py: non-unit modules gather their direct parameters)."""
    return tuple(x for x in (embedding, *layer_elements, output) if x > 0)


__all__ = ["COMM_UNIT_FLOOR_ELEMENTS", "FULL_SHARD", "label", "ModelState", "SHARDS", "Shards", "buffer_bytes",
           "dp_comm_s", "gathered_peak", "model_state", "reduce_queue_peak", "shards", "unit_elements"]
