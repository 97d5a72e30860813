"""Transient bytes of the MoE dispatchers' combine beyond the routed rows' two BF16 copies that
moeplan.engine.memory counts (``_moe_dispatch_transient``): what Megatron-Core's token_dispatcher.py (core_v0.16 ..
0.19) holds at once where it casts before a collective."""

from __future__ import annotations

from moeplan.base.router_dtype import ROUTER_LOGIT_BYTES
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.latent_moe import expert_width
from moeplan.run.config import RunConfig


def holds_many_experts(num_experts: int, ep: int) -> bool:
    """Whether each EP rank holds more than one expert (Megatron-Core ``num_local_experts = num_moe_experts // ep``
    above 1, the guard of the alltoall dispatcher's sort and unsort by local expert)."""
    return num_experts // max(1, ep) > 1


def many_local_experts(cfg: RunConfig) -> bool:
    """:func:`holds_many_experts` for a run's MoE layers (False without any)."""
    moe = cfg.model.first_moe
    return moe is not None and holds_many_experts(moe.num_experts, cfg.parallel.ep)


def alltoall_expert_tp_combine_bytes(cfg: RunConfig, tokens: float) -> float:
    """Bytes live at the alltoall dispatcher's expert-TP reduce-scatter where the probs are wider than BF16 (fp32 /
    fp64 router logits), for ``tokens`` local tokens; 0 otherwise, ETP 1 included. ``combine_preprocess`` casts the
    ETP x top-k expert output rows to the probs' dtype (``hidden_states.to(self.probs.dtype)``) while the BF16
    expert output (held by moe_layer.py routed_experts_compute, which passes it in) and, with more than one local
    expert, its unsort (sort_chunks_by_idxs) are live, and the reduce-scatter writes its top-k rows per token in
    that dtype before the cast back to BF16 (timing.moe.alltoall_expert_tp_cast_bytes costs the casts' time)."""
    moe, par = cfg.model.first_moe, cfg.parallel
    probs_bytes = ROUTER_LOGIT_BYTES[cfg.mcore_router_dtype]
    if moe is None or cfg.dispatcher != "alltoall" or par.etp <= 1 or probs_bytes == BF16_BYTES:
        return 0.0
    rows = tokens * moe.top_k * cfg.rows_factor
    unsort = BF16_BYTES if many_local_experts(cfg) else 0
    return rows * expert_width(moe, cfg.model.hidden) * (par.etp * (BF16_BYTES + unsort + probs_bytes) + probs_bytes)
