"""Knobs that do not work with a run's layout, as typed problems (the Megatron field and one line why).

Megatron-Core rejects these at start-up (transformer_config.py ``__post_init__``); moeplan says so before a
job is queued: cp_comm_type a2a splits the heads over CP, attention sinks take a2a only, DeepSeek sparse attention
allgather only; sync-free dropless MoE needs HybridEP and 0.18+; EP
A2A overlap needs what RunConfig.ep_overlap_blockers lists (EP, several micro-batches, PP 1 or VPP, no full recompute);
delay_wgrad_compute needs EP A2A overlap.
"""

from __future__ import annotations

from moeplan.base.fields import KnobProblem, sync_free_moe
from moeplan.engine.timing.attention import cp_comm_allowed
from moeplan.hardware import GPUSpec
from moeplan.models.spec import Attention
from moeplan.run.attention_backend import SINK_CP_COMM_TYPE, sink_cp_comm_ok
from moeplan.run.config import RunConfig
from moeplan.run.dsa_rules import CP_COMM_TYPE as DSA_CP_COMM_TYPE
from moeplan.run.parallel import hierarchical_cp_inner


def knob_problem(cfg: RunConfig, gpu: GPUSpec | None = None) -> KnobProblem | None:
    """The first knob that does not work with this layout on its GPU (``cfg.gpu`` unless given), or None."""
    gpu = cfg.gpu if gpu is None else gpu
    par = cfg.parallel
    if par.cp > 1:
        for m in cfg.model.distinct_mixers:
            if isinstance(m, Attention) and not sink_cp_comm_ok(m, par.cp, cfg.cp_comm_type):
                return KnobProblem("cp_comm_type",
                                   f"attention sinks (softmax_type learnable): Transformer Engine runs them under context "
                                   f"parallelism only in FusedAttention with cp_comm_type {SINK_CP_COMM_TYPE}, not "
                                   f"{cfg.cp_comm_type} (UnfusedDotProductAttention has no CP): no attention backend")
            if isinstance(m, Attention) and m.sparse is not None and cfg.cp_comm_type != DSA_CP_COMM_TYPE:
                return KnobProblem("cp_comm_type",  # Megatron-Core DSAttention's assertion (moeplan.run.dsa_rules)
                                   f"DeepSeek sparse attention runs context parallelism with cp_comm_type "
                                   f"{DSA_CP_COMM_TYPE} only, not {cfg.cp_comm_type}")
            if isinstance(m, Attention) and not cp_comm_allowed(m, par.tp, par.cp, cfg.cp_comm_type, gpu.nvlink_domain):
                return KnobProblem("cp_comm_type", _cp_comm_reason(m, par.tp, par.cp, cfg.cp_comm_type,
                                                                   gpu.nvlink_domain))
    if cfg.rank_capacity_factor is not None and (cfg.dispatcher != "hybridep" or not sync_free_moe(cfg.mcore_version)):
        return KnobProblem("moe_expert_rank_capacity_factor",
                           "moe_expert_rank_capacity_factor (sync-free dropless MoE) needs the HybridEP dispatcher and "
                           "Megatron-Core 0.18+")
    blockers = cfg.ep_overlap_blockers if cfg.ep_overlap else ()
    if blockers:
        return KnobProblem("overlap_moe_expert_parallel_comm",
                           "EP A2A overlap (overlap_moe_expert_parallel_comm) needs " + "; and ".join(blockers))
    if cfg.delay_wgrad is True and not cfg.ep_overlap:
        # transformer_config.py (core_v0.14.0 .. core_v0.19.0) __post_init__
        return KnobProblem("delay_wgrad_compute",
                           "delay_wgrad_compute needs EP A2A overlap (Megatron-Core asserts "
                           "overlap_moe_expert_parallel_comm with it): only the merged schedule runs the delayed "
                           "weight-gradient GEMMs")
    if cfg.delay_wgrad is True and cfg.delay_wgrad_blocked:
        return KnobProblem("delay_wgrad_compute", cfg.delay_wgrad_blocked)
    return None


def _cp_comm_reason(m: Attention, tp: int, cp: int, comm_type: str, domain: int) -> str:
    """Why ``comm_type`` does not run this layer at TP / CP, in the terms of the rule that fails
    (moeplan.timing.cp_comm_allowed): a2a splits the heads over all of CP; a2a+p2p runs a2a inside the NVLink domain
    and p2p across domains (Megatron-Core hierarchical_context_parallel_sizes [inner, CP / inner])."""
    kv = m.num_heads if m.is_mla else m.num_kv_heads
    heads = f"{m.num_heads} heads / {kv} KV heads over TP {tp}"
    if comm_type == "a2a":
        return f"cp_comm_type a2a splits the heads over CP: {heads} cannot be divided among CP {cp}"
    inner = hierarchical_cp_inner(tp, cp, domain)
    if inner == cp:
        return (f"cp_comm_type a2a+p2p runs a2a inside an NVLink domain and p2p across domains, but CP {cp} at TP {tp} "
                f"lies inside one {domain}-GPU NVLink domain: there is no p2p level (use a2a, or p2p)")
    if inner == 1:
        return (f"cp_comm_type a2a+p2p runs a2a inside an NVLink domain and p2p across domains, but no two of the CP "
                f"{cp} ranks at TP {tp} share a {domain}-GPU NVLink domain: there is no a2a level (use p2p)")
    return (f"cp_comm_type a2a+p2p splits the heads over its a2a group, the {inner} CP ranks inside one {domain}-GPU "
            f"NVLink domain: {heads} cannot be divided among {inner}")


__all__ = ["KnobProblem", "knob_problem"]
