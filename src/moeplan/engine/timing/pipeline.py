"""Pipeline and data-parallel communication: the layers each pipeline rank runs, the interleaved 1F1B bubble,
PP send/recv, and the sharded DP collectives with the optimizer step they surround."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from moeplan.base.fields import muon_dp_overlap
from moeplan.engine import fsdp, muon
from moeplan.engine.activations import BF16_BYTES, FP32_BYTES
from moeplan.engine.param_shards import rank_params
from moeplan.engine.timing.context import Ctx, busbw, gemm_rate, ring_time
from moeplan.engine.timing.optimizer import offload_s
from moeplan.models.spec import Layer, ModelSpec
from moeplan.run.parallel import Parallel, Pipeline, stage_groups


@lru_cache(maxsize=4096)
def pipeline_rank_work(spec: ModelSpec, pipe: Pipeline) -> tuple[tuple[tuple[tuple[Layer, int], ...], tuple[tuple[bool, int], ...]], ...]:
    """Per pipeline rank: distinct layers with counts over its chunks, and its (loss, MTP) heads. Ranks
    with the same work share one tuple object (step_parts costs each distinct work once)."""
    out = []
    same: dict[object, Any] = {}
    for stages in pipe.rank_stages:
        counts: dict[Layer, int] = {}
        for st in stages:
            for layer, n in stage_groups(spec, st):
                counts[layer] = counts.get(layer, 0) + n
        heads = tuple((st.loss, st.mtp) for st in stages if st.loss or st.mtp)
        work = (tuple(counts.items()), heads)
        out.append(same.setdefault(work, work))
    return tuple(out)


def bubble_microbatches(par: Parallel) -> float:
    """Pipeline bubble of (interleaved) 1F1B in micro-batch times of the slowest rank: (PP - 1) / VPP
    (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters", section 2.2)."""
    return (par.pp - 1) / par.vpp if par.pp > 1 else 0.0


def pp_comm_s(ctx: Ctx) -> float | None:
    """Seconds of one micro-batch's PP send / recv on a rank: activations forward and gradients backward
    at each of its VPP chunk boundaries (None without PP), each hand-off its bytes over the link plus a fixed
    ``cal.pp_handoff_s`` (NCCL's send / receive latency and, at VPP 1, batch_p2p_sync's device synchronize:
    Megatron-Core p2p_communication.py)."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    if par.pp <= 1:
        return None
    p2p = ctx.tokens * cfg.model.hidden * BF16_BYTES
    bw = gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff if par.gpus > gpu.nvlink_domain else gpu.nvlink_bw_bytes_per_s
    return 2 * par.vpp * (p2p / bw + cal.pp_handoff_s)


def pp_exposed_s(pp_comm: float, vpp: int, rank_s: float) -> float:
    """The exposed part of :func:`pp_comm_s` on a rank whose micro-batch takes ``rank_s``. With VPP > 1
    Megatron Bridge turns on overlap_p2p_comm (training/comm_overlap.py): the interleaved schedule posts
    each chunk's send / receive asynchronously and waits only before that chunk's compute, so a transfer
    shows only where it outlasts one chunk's compute; with VPP = 1 they are batched (batch_p2p_comm) in
    the critical path."""
    if vpp <= 1:
        return pp_comm
    one, chunk = pp_comm / (2 * vpp), rank_s / (2 * vpp)
    return 2 * vpp * max(0.0, one - chunk)


def sharded_dp_and_optimizer_s(ctx: Ctx, pipe: Pipeline, t_mb: float, bubble: float, dense_p: float,
                                expert_p: float, dense_bw: float, expert_bw: float,
                                ) -> tuple[dict[str, float], tuple[float, float, float, float]]:
    """dp_comm, optimizer and offload seconds with Megatron-FSDP (moeplan.engine.fsdp.dp_comm_s) or Muon's
    layer-wise distributed optimizer (moeplan.engine.muon): DDP all-reduces the gradients (2 x a
    reduce-scatter), the updated weights are all-gathered after the step, and each rank runs Newton-Schulz
    on its share of the matrices at the bf16 matmul rate (muon_fp32_matmul_prec 'medium'). Also the
    (reduce, gather, reduce exposed, gather exposed) seconds StepParts carries."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    spec, par = cfg.model, cfg.parallel
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    dp_group, edp = par.dp * par.cp, par.edp
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    out: dict[str, float] = {}
    sh = fsdp.shards(cfg)
    if cfg.fsdp is not None:
        mean_unit = (dense_p + expert_p) * par.pp / max(1, spec.num_layers)
        across = max(dp_group * par.tp, edp * par.ep * par.etp) > gpu.nvlink_domain
        sms = fsdp.COMM_SMS_SCALEOUT if across else fsdp.COMM_SMS_NVLINK
        exposed, raw = fsdp.dp_comm_s(cfg, dense_p, expert_p, mean_unit, t_mb, bubble, dense_bw, expert_bw,
                                      grad_b, ring_time, sms / gpu.sms)
        rs, ag = raw["grad_reduce_s"], raw["param_all_gather_s"]
        share = rs / (rs + ag) if rs + ag else 1.0
        dp_parts = (rs, ag, exposed * share, exposed * (1 - share))
    else:  # Muon with DDP (no distributed optimizer): all-reduce, then the layer-wise gather
        rs = 2 * (ring_time(dense_p * grad_b / dp_group, dp_group, dense_bw)
                  + ring_time(expert_p * grad_b / edp, edp, expert_bw))
        ag = (ring_time(dense_p * BF16_BYTES / dp_group, dp_group, dense_bw)
              + ring_time(expert_p * BF16_BYTES / edp, edp, expert_bw)) if sh.optimizer else 0.0
        if cfg.dp_overlap and cfg.muon_layer_wise and muon_dp_overlap(cfg.mcore_version):
            dp_parts = (rs, ag, max(0.0, rs - (2 * t_mb / 3 + bubble)), max(0.0, ag - (t_mb / 3 + bubble)))
        else:  # core_v0.16 (any Muon) and plain muon: overlap_grad_reduce / overlap_param_gather asserted off
            dp_parts = (rs, ag, rs, ag)
        exposed = dp_parts[2] + dp_parts[3]
    out["dp_comm"] = exposed
    # --- optimizer step on this GPU's shard (slowest pipeline rank); CPU offload of the Adam state
    d_div = dp_group if sh.optimizer else 1
    e_div = edp if sh.optimizer else 1
    worst_opt = worst_off = 0.0
    for (groups, heads), stages in zip(pipeline_rank_work(spec, pipe), pipe.rank_stages):
        dense, expert, _ = rank_params(spec, stages, par.tp, par.ep * par.etp)
        ns_s = muon_shard = m_dense = m_expert = 0.0
        if cfg.optimizer == "muon":
            mats = muon.rank_matrices(spec, groups, sum(mtp for _, mtp in heads), par.tp, par.ep, par.etp)
            m_dense, m_expert = muon.matrix_params(mats)
            m_dense, m_expert = min(m_dense, dense), min(m_expert, expert)
            ns = muon.newton_schulz(mats, cfg.muon_ns_steps, cfg.muon_tp_mode)
            ns_s = ((ns.dense_flops / d_div + ns.expert_flops / e_div) / gemm_rate(gpu, "bf16")
                    + (ns.dense_bytes / d_div + ns.expert_bytes / e_div) / hbm)
            if ns.tp_gather_bytes:
                ns_s += ns.tp_gather_bytes / d_div / busbw(gpu, par.tp, 1, cal)
            muon_shard = m_dense / d_div + m_expert / e_div
        adam_shard = (dense - m_dense) / d_div + (expert - m_expert) / e_div
        opt = (adam_shard * (1.0 - cfg.optimizer_offload) * cal.optimizer_bytes_per_param
               + muon_shard * (cal.optimizer_bytes_per_param - muon.MOMENT_TRAFFIC_BYTES)) / hbm + ns_s
        off = offload_s(cfg, gpu, cal, adam_shard * cfg.optimizer_offload) if cfg.optimizer_offload > 0 else 0.0
        if opt + off > worst_opt + worst_off:
            worst_opt, worst_off = opt, off
    out["optimizer"] = worst_opt
    if worst_off:
        out["offload"] = worst_off
    return out, dp_parts
