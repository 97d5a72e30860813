"""MoE time: EP dispatch and combine (NVLink and scale-out parts, per dispatcher backend), the merged schedule
of EP all-to-all overlap, expert launches on the host, and the experts' element-wise glue."""

from __future__ import annotations

import math

from moeplan.base.deepep_configs import DEEPEP_NVL_PEERS, deepep_configs, tp_ep_group_ranks
from moeplan.base.fields import version_key
from moeplan.base.router_dtype import ROUTER_LOGIT_BYTES
from moeplan.base.vocab import FLEX_DISPATCHERS
from moeplan.engine import fsdp
from moeplan.engine.moe_transient import holds_many_experts
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.latent_moe import expert_width
from moeplan.engine.timing.calibration import Calibration
from moeplan.engine.timing.context import (EXPERT_LAUNCHES, SPLIT_QUANTIZE_LAUNCH_S, SPLIT_QUANTIZE_PATH, TRAIN, Ctx,
                                          busbw, ring_time)
from moeplan.hardware import GPUSpec
from moeplan.models.spec import MoE
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import Parallel


def expected_ranks_hit(moe: MoE, ep: int) -> float:
    """Expected number of distinct EP ranks that hold at least one of a token's top-k experts (its own
    included), with the model's group-limited routing: the flex dispatchers send a token ONCE per such
    rank (DeepEP ``get_dispatch_layout`` -> ``is_token_in_rank``; HybridEP "no redundant communication",
    Megatron-LM docs/discussions/deepseek-v3-gb200-optimization), then permute it to its local experts.
    The top-k experts are distinct and uniform among those the token may reach (force-balanced routing):
    a rank with ``e`` of the ``n`` reachable experts is missed with probability C(n - e, k) / C(n, k)."""
    k = moe.top_k
    local = moe.num_experts // ep if moe.num_experts % ep == 0 else moe.num_experts / ep
    ranks, reach = float(ep), float(moe.num_experts)
    g, tg = moe.n_group, moe.topk_group
    if g > 1 and ep % g == 0:  # each group spans ep / g ranks: only the topk_group chosen groups' ranks
        ranks, reach = ep * tg / g, moe.num_experts * tg / g
    elif g > 1 and g % ep == 0:  # each rank holds g / ep whole groups: hit if one of them is chosen
        per = g // ep
        return ep * (1.0 - math.comb(g - per, tg) / math.comb(g, tg)) if g - per >= tg else float(ep)
    n, e = int(round(reach)), int(round(local))
    if n - e < k:
        return ranks
    return ranks * (1.0 - math.comb(n - e, k) / math.comb(n, k))


def flex_token_copies(moe: MoE, parallel: Parallel, nvlink_domain: int) -> tuple[float, float]:
    """(ranks, remote NVLink domains) one token reaches through a flex dispatcher (DeepEP / HybridEP / NCCL EP), counted
    over its group of expert TP x EP ranks (base.deepep_configs.tp_ep_group_ranks).

    Megatron-Core's MoEFlexTokenDispatcher hands the backend its tp_ep group with ``router_topk = tp_size x topk`` and
    ``num_experts = tp_size x num_experts`` (tp_size: expert TP), and ``_initialize_metadata`` expands the routing map
    and probs from [tokens, EP, experts per rank] to [tokens, EP x ETP, experts per rank], each EP rank's entries
    copied to its ETP ranks (token_dispatcher.py, core_r0.12 .. 0.19): every token goes to all ETP copies of each
    rank holding one of its experts, ETP x :func:`expected_ranks_hit` ranks, and each rank receives ETP times the
    tokens it would at expert TP 1. The copies of an EP rank are consecutive ranks of the group (the expansion's
    inner axis), so with ETP <= the NVLink domain they share its domain: the remote domains a token reaches are those
    of its top-k experts' EP ranks, (N - 1) x (1 - (1 - 1/N)^k) for N domains under uniform routing, and the
    backends send it once per remote domain and forward it over NVLink inside (DeepSeek-V3 report, 3.2.2;
    deepseek-ai/DeepEP README). With ETP > the domain each EP rank's copies fill ETP / domain whole domains."""
    ep, etp = parallel.ep, parallel.etp
    ranks_hit = expected_ranks_hit(moe, ep)
    span = tp_ep_group_ranks(parallel)
    nodes = math.ceil(span / nvlink_domain)
    if nodes <= 1:
        return etp * ranks_hit, 0.0
    if etp > nvlink_domain:  # each hit EP rank spans etp / domain domains; its own is one of them when it is hit
        return etp * ranks_hit, ranks_hit * etp / nvlink_domain - ranks_hit / ep
    remote = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** moe.top_k)
    if moe.n_group > 1 and moe.n_group % nodes == 0:
        # group-limited routing with groups laid over the domains: a domain holding g groups is
        # reached only if one of its groups is among the token's topk_group
        g = moe.n_group // nodes
        p_hit = 1.0 - math.comb(moe.n_group - g, moe.topk_group) / math.comb(moe.n_group, moe.topk_group)
        remote = min(remote, (nodes - 1) * p_hit)
    return etp * ranks_hit, remote


def ep_kernel_bw_bytes_per_s(gpu: GPUSpec, cal: Calibration, backend: str, kernel: str, peers_in_domain: int,
                             across_domains: bool = False) -> float:
    """Algorithm bandwidth (bytes each rank receives per second, BF16 payload) of a flex-dispatcher kernel
    (``kernel`` dispatch or combine) over NVLink: the smaller of a share of the link rate and the SMs it
    runs on times their copy rate (calibration ``ep_link_share`` / ``ep_sm_bw_bytes_per_s`` / ``ep_sms``, from the
    kernels' own benchmarks). DeepEP's normal kernels are written for at most 8 NVLink peers
    (``NUM_MAX_NVL_PEERS``: base.deepep_configs.DEEPEP_NVL_PEERS); beyond (MNNVL, NVL72) its measured rates are
    those of that regime ("_mnnvl": Megatron-LM deepseek-v3-gb200-optimization, 2.2.1, EP32: ~400 GB/s dispatch, ~190 GB/s
    combine with 24 SMs).

    ``across_domains``: EP spans NVLink domains, so DeepEP runs its internode kernels, whose NVLink leg
    (RDMA -> NVLink forwarding in dispatch, NVLink -> forwarder in combine) has its own per-SM rate
    ("deepep_internode"): each channel (2 SMs) runs one NVLink-sender warp per NVL peer (deepseek-ai/DeepEP
    csrc/kernels/internode.cu, combine ``kNVLSender``: 8 warps on a channel's even SM) where the intranode
    combine runs 24 sender warps per SM (intranode.cu, kNumThreads 768), so it stays near 140-145 GB/s with
    24 SMs whatever the link: H800 (200 GB/s per direction; DeepEP issue #285, the maintainers: at EP16 "the
    NVLink bandwidth will exceed 140 GB/s, making NVLink the bottleneck"), H200 (450 GB/s; issue #493) and
    H20 (issue #361) all measure 140-145. The link share stays the intranode one."""
    regime = "mnnvl" if peers_in_domain > DEEPEP_NVL_PEERS else "nvl8"
    key = f"{backend}_{regime}_{kernel}"
    internode = f"{backend}_internode_{kernel}"  # a backend with its own internode rate (calibration data: DeepEP)
    sm_key = internode if across_domains and regime == "nvl8" and internode in cal.ep_sm_bw_bytes_per_s else key
    return min(gpu.nvlink_bw_bytes_per_s * cal.ep_link_share[key], cal.ep_sms[backend] * cal.ep_sm_bw_bytes_per_s[sm_key])


# Flex backends without calibration data of their own, costed with another's kernel constants: NCCL EP (core_v0.19.0,
# TE transformer_engine.pytorch.ep) runs NCCL's device-side EP kernels, whose high-throughput path is adapted from
# HybridEP/DeepEP (nccl_ep device/hybridep_adapter.cu, as Megatron-Core's token_dispatcher.py cites it); with no
# published rate, it gets DeepEP's normal-kernel rates, SM budget and one permute pass (its receive buffer is
# expert-major, but the expert output is copied back into the static receive-capacity buffer for the combine).
EP_KERNEL_STAND_IN: dict[str, str] = {"ncclep": "deepep"}


def ep_kernels_of(dispatcher: str) -> str:
    """The dispatcher whose calibrated kernel constants cost ``dispatcher`` (itself unless EP_KERNEL_STAND_IN)."""
    return EP_KERNEL_STAND_IN.get(dispatcher, dispatcher)


def ep_comm_sms(cfg: RunConfig, gpu: GPUSpec, cal: Calibration) -> float:
    """SMs the EP dispatch/combine kernels occupy while they run: the flex backends' SM budget
    (Megatron-Core moe_flex_dispatcher_num_sms; unset: DeepEP 20, token_dispatcher.py, HybridEP its
    buffer's 32), NCCL all-to-all its channels (fsdp.COMM_SMS_*)."""
    if cfg.dispatcher in FLEX_DISPATCHERS:
        return cal.ep_sms[ep_kernels_of(cfg.dispatcher)]
    across = tp_ep_group_ranks(cfg.parallel) > gpu.nvlink_domain
    return float(fsdp.COMM_SMS_SCALEOUT if across else fsdp.COMM_SMS_NVLINK)


def ep_comm(ctx: Ctx, moe: MoE) -> tuple[float, float]:
    """(seconds, forward-only seconds) of dispatch + combine for one MoE layer, fwd + bwd, none hidden."""
    total, fwd, _ = ep_totals(*ep_kernels(ctx, moe), routing_map_allgather_s(ctx, moe))
    return total, fwd


def ep_totals(dispatch_s: float, combine_s: float, permute_s: float,
               routing_map_s: float) -> tuple[float, float, float]:
    """(fwd + bwd, forward-only, one direction's kernels) seconds of one MoE layer's EP traffic from its parts:
    dispatch, combine and permutation run once in each direction, the routing-map all-gather only in the
    forward."""
    once = dispatch_s + combine_s + permute_s
    return 2 * once + routing_map_s, once + routing_map_s, once


def routing_map_allgather_s(ctx: Ctx, moe: MoE) -> float:
    """Seconds of HybridEP's routing-map all-gather in one MoE layer's forward (its backward reuses the handle).

    Before each dispatch HybridEP gathers every EP rank's boolean routing map, [tokens x num_experts] at one
    byte per entry, into the global map its metadata scan reads (deepseek-ai/DeepEP hybrid-ep
    ``HybridEPBuffer::metadata_preprocessing`` -> ``Executor::allgather_routing_map``); without a token budget
    (moe_expert_rank_capacity_factor) the host then waits for the received-token count (Megatron-Core
    fused_a2a.py: ``non_blocking = num_permuted_tokens is not None``), so the gather is on the critical path.
    Its size grows with experts x EP: 512 experts at EP 32 gather 31 x 512 bytes per local token, more than
    a third of the 2 x 2,048-byte row each token sends."""
    cfg, gpu = ctx.cfg, ctx.gpu
    ranks = tp_ep_group_ranks(cfg.parallel)
    if cfg.dispatcher != "hybridep" or ranks <= 1:
        return 0.0
    tokens = ctx.tokens * cfg.rows_factor
    # over the flex dispatcher's expert-TP x EP group, whose routing map has expert TP x num_experts columns
    # (token_dispatcher.py _initialize_metadata / _HybridEPManager num_experts = tp_size x num_experts)
    return ring_time(tokens * moe.num_experts * cfg.parallel.etp, ranks, busbw(gpu, ranks, 1, ctx.cal))


def ep_kernels(ctx: Ctx, moe: MoE) -> tuple[float, float, float]:
    """(dispatch, combine, compute-stream) seconds of one MoE layer's forward; the backward runs the same
    kernels with the roles swapped (the gradient of a dispatch is a combine and vice versa). The third part is
    the dispatcher's work on the compute stream: the permutes and, for the alltoall dispatcher with expert TP > 1,
    the expert-TP all-gather and reduce-scatter (:func:`alltoall_expert_tp_s`).

    Megatron-Core dispatches the BF16 hidden states with every backend (fused_a2a.py: HybridEP asserts
    ``not fp8_dispatch``; DeepEP's ``fused_dispatch`` is handed the bf16 tensor), and the gradients
    travel back in BF16 too."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    # every dispatcher moves tokens once its expert-TP x EP group has two ranks, EP 1 included: the flex ones run on
    # that tp_ep group (token_dispatcher.py asserts TP x EP > 1), the allgather dispatcher gathers over it and the
    # alltoall dispatcher all-gathers over the expert-TP ranks after its (then empty) all-to-all
    if tp_ep_group_ranks(par) <= 1:
        return 0.0, 0.0, 0.0
    tokens = ctx.tokens * cfg.rows_factor
    # LatentMoE dispatches latent-wide tokens (token_dispatcher.py hidden_dim = moe_latent_size: moeplan.engine.latent_moe)
    row_bytes = expert_width(moe, cfg.model.hidden) * BF16_BYTES
    # EP peers sit ETP ranks apart (expert rank order: ETP, EP, EDP, PP); count peers, not GPUs
    span = tp_ep_group_ranks(par)
    peers_in_domain = max(1, min(par.ep, gpu.nvlink_domain // par.etp))
    nodes = ep_nodes(par, gpu)
    kernels = ep_kernels_of(cfg.dispatcher)
    so_bw = gpu.scaleout_bw_bytes_per_s * cal.a2a_scaleout_eff[kernels]
    if cfg.dispatcher in ("alltoall", "allgather"):
        # NCCL all-to-all sends every (token, expert) row to its rank (top-k copies, no de-duplication);
        # the routes run one after the other. The allgather dispatcher (token_dispatcher.py
        # MoEAllGatherTokenDispatcher) all-gathers every token of the EP x ETP group (its tp_ep group) to every rank
        # and reduce-scatters the outputs back: each rank receives EP x ETP copies of its token count, whatever the
        # routing (memory._moe_dispatch_transient holds the gathered copy), the group's ranks in its NVLink domain
        # over NVLink and the rest over the NIC
        if cfg.dispatcher == "allgather":
            rows_b, group, in_domain = tokens * span * row_bytes, span, min(span, gpu.nvlink_domain)
        else:
            rows_b, group, in_domain = tokens * moe.top_k * row_bytes, par.ep, peers_in_domain
        nv_bw = gpu.nvlink_bw_bytes_per_s * cal.a2a_eff[cfg.dispatcher]
        remote = (group - in_domain) / group
        local = (in_domain - 1) / group
        one_d = one_c = rows_b * local / nv_bw + rows_b * remote / so_bw
        if cfg.dispatcher == "allgather":
            # its combine reduce-scatters in the probs' dtype, the router logits' (token_dispatcher.py
            # MoEAllGatherTokenDispatcher.token_combine: ``hidden_states.to(self.local_probs.dtype)``, core_v0.16 ..
            # 0.19; moeplan.base.router_dtype), as alltoall's expert-TP reduce-scatter (alltoall_expert_tp_s)
            one_c *= ROUTER_LOGIT_BYTES[cfg.mcore_router_dtype] / BF16_BYTES
        proxy_d = proxy_c = 0.0
    else:
        # DeepEP / HybridEP send a token once to each rank of their expert-TP x EP group that holds one of its
        # experts, and across NVLink domains once per remote domain, forwarded over NVLink inside it
        # (flex_token_copies): every copy a rank receives crosses NVLink once, the remote-domain sends cross
        # the NIC, pipelined. The kernels' NVLink peers are the group's ranks in a domain.
        ranks_hit, remote_domains = flex_token_copies(moe, par, gpu.nvlink_domain)
        group_peers = max(1, min(span, gpu.nvlink_domain))
        recv_b = tokens * ranks_hit * row_bytes
        rdma = tokens * remote_domains * row_bytes / so_bw
        across = nodes > 1
        one_d = max(recv_b / ep_kernel_bw_bytes_per_s(gpu, cal, kernels, "dispatch", group_peers, across), rdma)
        one_c = max(recv_b / ep_kernel_bw_bytes_per_s(gpu, cal, kernels, "combine", group_peers, across), rdma)
        proxy_d, proxy_c = ep_proxy_messages_s(gpu, cal, nodes, cfg.dispatcher, span, tokens * remote_domains)

    call_s = ep_call_s(cfg, gpu, cal)
    one_d, one_c = one_d + call_s + proxy_d, one_c + call_s + proxy_c

    # Permutes on the compute stream, read + write of the routed (token, expert) rows the dispatcher's permute
    # passes move (permute_pass_rows: its dispatch direction's passes, the basis the fit was made on)
    pass_rows, _ = permute_pass_rows(kernels, moe, par)
    perm = 2 * tokens * pass_rows * row_bytes / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
    if cfg.dispatcher == "alltoall":
        perm += alltoall_expert_tp_s(ctx, moe)
    return one_d, one_c, perm


def permute_pass_rows(dispatcher: str, moe: MoE, parallel: Parallel) -> tuple[float, float]:
    """(dispatch, combine) routed rows per local token that the permute passes of one MoE layer's forward read and
    write on the compute stream, in its dispatch and its combine, as Megatron-Core's token_dispatcher.py (core_v0.16
    .. 0.19) calls moe_utils.permute / sort_chunks_by_idxs and their inverses unpermute / the unsort; the backward
    runs each pass's inverse on the same rows. ``dispatcher``: the kernels' owner (:func:`ep_kernels_of`).

    - alltoall (MoEAlltoAllTokenDispatcher): ``dispatch_preprocess`` permutes the top-k rows before the all-to-all
      ("Permutation 1", k) and, only with more than one local expert (``if self.num_local_experts > 1``),
      ``dispatch_postprocess`` sorts the rows it holds after the expert-TP all-gather by local expert
      (sort_chunks_by_idxs, "Permutation 2", ETP x k); the combine unsorts (same guard) and unpermutes the same rows.
    - allgather (MoEAllGatherTokenDispatcher): ``dispatch_postprocess`` permutes the gathered tokens routed to its
      experts, ETP x k rows per local token (the tp_ep group's tokens x its share of the experts);
      ``combine_preprocess`` unpermutes them.
    - deepep: the dispatch kernel sends unpermuted tokens; ``get_permuted_hidden_states_by_experts`` permutes the
      ETP x k copies a rank received (flex_token_copies) to its local experts and
      ``get_restored_hidden_states_by_experts`` unpermutes them (_DeepepManager). NCCL EP is costed with its kernels
      (EP_KERNEL_STAND_IN).
    - hybridep: its kernels permute and unpermute (``dispatch_with_permute`` / ``combine_with_unpermute``, fused_a2a.py);
      the copy is in its benchmarked rate (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, 2.1.1, 2.5).

    :func:`ep_kernels` costs the dispatch direction's passes alone for every dispatcher (one basis): the fitted
    constants were fitted on it; costing the combine's mirror passes too (what the code runs) moves 64 of the 132
    calibration observations at ETP 1, up to 6% (N39's HybridEP / alltoall MoE-layer ratio), a refit's call."""
    k, etp = float(moe.top_k), parallel.etp
    if dispatcher == "alltoall":
        # with one local expert the rows arrive in expert order: no sort
        sort = etp * k if holds_many_experts(moe.num_experts, parallel.ep) else 0.0
        return k + sort, sort + k
    if dispatcher in ("allgather", "deepep"):
        return etp * k, etp * k
    return 0.0, 0.0


def alltoall_expert_tp_s(ctx: Ctx, moe: MoE) -> float:
    """Seconds of the alltoall dispatcher's expert-TP all-gather and reduce-scatter in one MoE layer's forward, with
    the probabilities' all-gather and the casts around the reduce-scatter; 0 at expert TP 1.

    With expert TP > 1, Megatron-Core's MoEAlltoAllTokenDispatcher (token_dispatcher.py, core_v0.12 .. 0.19) runs
    its all-to-all over the EP group only, then ``dispatch_postprocess`` all-gathers the received rows over the
    expert-TP group (``gather_from_sequence_parallel_region(global_input_tokens, group=self.tp_group)``) and the
    probs with them, one scalar per row in the probs' dtype (``gather_from_sequence_parallel_region(global_probs,
    ...)``, a collective of its own), and sorts the ETP x top-k rows by local expert; ``combine_preprocess``
    reduce-scatters the expert outputs back over that group in the probs' dtype
    (``reduce_scatter_to_sequence_parallel_region(hidden_states.to(self.probs.dtype), group=self.tp_group)
    .to(hidden_states.dtype)``). The probs' dtype is the router logits' (moe_utils.py ``probs.type_as(logits)``:
    ``moe_router_dtype``, moeplan.base.router_dtype); where it is wider than BF16 the two casts are HBM passes of
    their own (:func:`alltoall_expert_tp_cast_bytes`), none in BF16 (``.to`` of the same dtype returns its input).
    Each rank holds top-k rows per local token after the all-to-all (balanced routing). The collectives and casts
    run inside the MoE layer's expert computation (moe_layer.py routed_experts_compute), on the compute stream, also
    under EP A2A overlap; the expert-TP ranks are consecutive (expert rank order ETP, EP, EDP, PP), so a ring over
    them at stride 1 (:func:`busbw`). Their backward is the other collective (the all-gathers' gradients are
    reduce-scatters, the reduce-scatter's an all-gather in the probs' dtype) and the casts' gradients the same casts
    the other way round, the same seconds."""
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    etp = cfg.parallel.etp
    if etp <= 1:
        return 0.0
    rows = ctx.tokens * cfg.rows_factor * moe.top_k
    row_elems = rows * expert_width(moe, cfg.model.hidden)
    probs_bytes = ROUTER_LOGIT_BYTES[cfg.mcore_router_dtype]
    bw = busbw(gpu, etp, 1, cal)
    gather_s = ring_time(row_elems * BF16_BYTES, etp, bw) + ring_time(rows * probs_bytes, etp, bw)
    scatter_s = ring_time(row_elems * probs_bytes, etp, bw)
    cast_s = alltoall_expert_tp_cast_bytes(moe, cfg.model.hidden, etp, probs_bytes) * ctx.tokens * cfg.rows_factor \
        / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
    return gather_s + scatter_s + cast_s


def alltoall_expert_tp_cast_bytes(moe: MoE, hidden: int, etp: int, probs_bytes: int) -> float:
    """HBM bytes per local token of the alltoall dispatcher's casts around its expert-TP reduce-scatter in one
    forward (:func:`alltoall_expert_tp_s`): ``hidden_states.to(self.probs.dtype)`` reads the ETP x top-k BF16 expert
    output rows and writes them in the probs' dtype, and the reduce-scatter's top-k rows are cast back to BF16 (read
    probs' dtype, write BF16). 0 at expert TP 1 (no cast there) and where the probs are BF16."""
    if etp <= 1 or probs_bytes == BF16_BYTES:
        return 0.0
    rows = (etp + 1) * moe.top_k
    return rows * expert_width(moe, hidden) * (BF16_BYTES + probs_bytes)


def ep_nodes(parallel: Parallel, gpu: GPUSpec) -> int:
    """NVLink domains a run's expert-TP x EP group spans (base.deepep_configs.tp_ep_group_ranks)."""
    return math.ceil(tp_ep_group_ranks(parallel) / gpu.nvlink_domain)


def ep_call_s(cfg: RunConfig, gpu: GPUSpec, cal: Calibration) -> float:
    """The fixed seconds each of a run's EP dispatch / combine calls pays across host-proxied nodes
    (:func:`ep_proxy_call_s` over :func:`ep_nodes`). The alltoall dispatcher's all-to-all runs on its EP group alone:
    at EP 1 it is a no-op (mappings.py _AllToAll returns its input for a group of one), no call to pay."""
    if cfg.model.first_moe is None or tp_ep_group_ranks(cfg.parallel) <= 1 or (cfg.dispatcher == "alltoall"
                                                                              and cfg.parallel.ep <= 1):
        return 0.0
    return ep_proxy_call_s(gpu, cal, ep_nodes(cfg.parallel, gpu), cfg.dispatcher)


def ep_host_proxied(cfg: RunConfig, gpu: GPUSpec) -> bool:
    """Whether a run's EP calls cross NVLink domains over a fabric without GPU-initiated RDMA (catalog
    ``scaleout_gpu_rdma`` false: AWS EFA), where every message goes through a host proxy (:func:`ep_proxy_call_s`):
    the regime of the AWS campaigns N31-N33, which the fit takes as ratios (their absolute level is not fitted)."""
    if cfg.model.first_moe is None or gpu.scaleout_gpu_rdma is not False:
        return False
    return tp_ep_group_ranks(cfg.parallel) > 1 and ep_nodes(cfg.parallel, gpu) > 1


def ep_proxy_call_s(gpu: GPUSpec, cal: Calibration, nodes: int, dispatcher: str) -> float:
    """Seconds one EP dispatch or combine call adds, whatever its bytes, when EP spans ``nodes`` > 1 NVLink domains
    over a fabric without GPU-initiated RDMA (catalog ``scaleout_gpu_rdma`` false: AWS EFA); 0 otherwise.

    Every message then goes through a host thread, and the call waits on its completions: a host round trip per call
    that does not shrink with the call's bytes, so small micro-batches pay it more often per token.
    - NCCL all-to-all (alltoall / allgather dispatchers): NCCL's network transport is progressed by its host proxy
      thread, which posts each per-peer send / receive through the aws-ofi-nccl libfabric plugin (calibration
      ``a2a_host_call_s``).
    - DeepEP (flex dispatchers): the internode kernels hand every RDMA to host proxy threads (UCCL-EP: GPU -> FIFO
      -> CPU proxy -> NIC; NVSHMEM's libfabric transport; uccl-project/uccl ep/docs: EFA dispatch + combine 1.6x the
      IBGDA latency), and a dispatch first exchanges the token counts (notify_dispatch) while the host busy-waits on
      the host-mapped receive counters before it launches the data kernel (deepseek-ai/DeepEP csrc/deep_ep.cpp
      internode_dispatch) (calibration ``ep_proxy_call_s``).
    Both are a cost per NIC rail (catalog ``scaleout_nics_per_gpu``): aws-ofi-nccl's RDMA protocol stripes each
    message over the GPU's rails (src/nccl_ofi_scheduler.cpp get_num_stripes: min(ceil(size / min_stripe_size),
    rails) stripes of min_stripe_size 128 KiB (include/nccl_ofi_param.h) and NCCL_P2P_NET_CHUNKSIZE 512 KiB on AWS
    (src/platform-aws.c), so each network chunk takes up to 4 rails), each stripe one write whose completion the
    proxy thread reaps from that rail's queue. NVSHMEM's libfabric transport is multi-rail too (one domain per
    selected NIC of a PE, up to 16: NVIDIA/nvshmem src/modules/transport/libfabric ``num_selected_devs``); that
    DeepEP's proxies pay per rail as NCCL does is the data's choice (N33 fits at RMS ~0.22 with it, ~0.4 without,
    the two EFA constants refitted on N31-N33).
    A p5.48xlarge GPU has 4 rails (32 x 100 Gb/s EFA), a p6-b300 GPU 2 (16 x 400 Gb/s): the p5 campaign (N33)
    measures ~2-2.4x p6-b300's fixed cost per NCCL call. Fitted on the AWS groups N31-N33 (dispatcher x MBS)."""
    if nodes <= 1 or gpu.scaleout_gpu_rdma is not False:
        return 0.0
    per_rail = cal.ep_proxy_call_s if dispatcher in FLEX_DISPATCHERS else cal.a2a_host_call_s
    return per_rail * (gpu.scaleout_nics_per_gpu or 1)


def deepep_rdma_chunk_tokens(ranks: int) -> tuple[int, int]:
    """(dispatch, combine) tokens per RDMA message of DeepEP's internode kernels for a DeepEP group of ``ranks`` ranks
    (expert TP x EP: base.deepep_configs.tp_ep_group_ranks): the default configs' ``num_max_rdma_chunked_send_tokens``
    (base.deepep_configs, the table and row rule DeepEP's buffer memory reads too), which Megatron-Core's fused_a2a.py
    runs (it passes no config)."""
    dispatch, combine = deepep_configs(ranks)
    return dispatch.rdma_send_tokens, combine.rdma_send_tokens


def ep_proxy_messages_s(gpu: GPUSpec, cal: Calibration, nodes: int, dispatcher: str, ranks: int,
                        remote_sends: float) -> tuple[float, float]:
    """(dispatch, combine) seconds the host proxies add to one flex-dispatcher (DeepEP) call for its RDMA messages,
    ``remote_sends`` token copies to remote nodes (tokens x expected remote nodes hit), when EP spans ``nodes`` > 1
    NVLink domains over a fabric without GPU-initiated RDMA (catalog ``scaleout_gpu_rdma`` false: AWS EFA); 0
    otherwise.

    DeepEP's internode normal kernels send each channel's tokens for a remote RDMA rank in messages of at most
    ``num_max_rdma_chunked_send_tokens`` tokens (the RDMA sender coordinator issues one put per chunk, then an atomic
    that moves the receiver's tail; the combine sends its chunks back the same way: deepseek-ai/DeepEP
    csrc/kernels/internode.cu), a fixed size per ETP x EP (:func:`deepep_rdma_chunk_tokens`: 20 / 12 tokens at EP16,
    8 / 8 at EP32). Without IBGDA each message is a command a host proxy thread posts and completes (UCCL-EP: GPU ->
    FIFO -> CPU proxy -> NIC; NVSHMEM's libfabric transport), so the proxies' work is the messages: a 4-node EP32
    group sends ~2.7 remote copies per token in chunks of 8, a 2-node EP16 ~1.0 in chunks of 20 / 12, ~5x the
    messages per token (top-8 routing), where DeepEP measures 0.94-1.06x NCCL's speed at EP16 and 0.77-0.85x at EP32
    (N31, p6-b300, MBS 4). Paid per NIC rail as :func:`ep_proxy_call_s` (calibration ``ep_proxy_message_s``, fitted on
    N31-N33). The other flex backends have no EFA data and are costed as DeepEP."""
    if nodes <= 1 or gpu.scaleout_gpu_rdma is not False or dispatcher not in FLEX_DISPATCHERS:
        return 0.0, 0.0
    per_message_s = cal.ep_proxy_message_s * (gpu.scaleout_nics_per_gpu or 1)
    chunk_d, chunk_c = deepep_rdma_chunk_tokens(ranks)
    return per_message_s * remote_sends / chunk_d, per_message_s * remote_sends / chunk_c


EP_CHUNK_EDGE = "ep_chunk_edge"  # layer-cache key: a model chunk's first-layer EP exposure beyond steady state
# Steady state of the merged schedule: layers simulated, and the later half of them measured (the first
# layers of a chain start with both streams idle; the per-layer increment settles within a few layers).
MERGED_LAYERS = 8


def merged_layer_s(d: float, c: float, attn_s: float, experts_s: float, attn_wgrad_s: float = 0.0,
                   experts_wgrad_s: float = 0.0, carry: bool = True) -> float:
    """Seconds per MoE layer of Megatron-Core's merged 1F1B under EP A2A overlap (one forward and one backward
    micro-batch, layer by layer), node by node as it runs.

    model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run issues, per layer: combine_bwd (comm stream),
    attn_fwd (comp), mlp_bwd (comp), dispatch_fwd (comm), mlp backward_dw (comp), dispatch_bwd (comm), mlp_fwd
    (comp), combine_fwd (comm), attn_bwd (comp), attn backward_dw (comp). Two CUDA streams (pipeline_parallel/
    utils.py set_streams: comp = the current stream, comm a new one); each node waits on and then records its
    model chunk's CUDA event (ScheduleNode.stream_acquire_context), so the forward and the backward micro-batch
    are one chain each, and a node starts when its stream and its chain are free. ``backward_dw`` runs outside
    that context on the compute stream: with ``delay_wgrad_compute`` the TE linears keep their weight-gradient
    GEMMs out of the node's backward (extensions/transformer_engine.py, delay_wgrad_compute; TE
    GroupedLinear / Linear backward_dw), so dispatch_bwd waits for the experts' dgrad only and runs beside
    their wgrad (``experts_wgrad_s``), and the next layer's combine_bwd waits for attention's dgrad only and
    runs beside attention's and the shared experts' wgrad (``attn_wgrad_s``, fine_grained_callables.py
    _BackwardDWWrapper). Without it both wgrad arguments are 0 and the wgrad stays inside mlp_bwd / attn_bwd.
    Forward is 1/TRAIN of each part; the backward of dispatch moves what combine moves and back. ``carry``:
    the layers follow each other inside a model chunk (steady state); False: one layer from idle streams, as
    a chunk's first layer starts (the chunk run ends by waiting on both events; its last attention
    backward_dw goes beside the PP send / recv instead)."""
    fwd = 1 / TRAIN
    # the wgrad part comes from its own roofline (gemm_time), the backward from the 1/TRAIN split: where few rows
    # per expert make the wgrad shallower than 2/3 of the whole, the backward node would go negative, so the
    # delayed part is at most the backward (review 2026-12-03)
    experts_wgrad_s = min(experts_wgrad_s, experts_s * (1 - fwd))
    attn_wgrad_s = min(attn_wgrad_s, attn_s * (1 - fwd))
    nodes = ((0, 1, d), (1, 2, attn_s * fwd), (1, 1, experts_s * (1 - fwd) - experts_wgrad_s), (0, 2, d),
             (1, 0, experts_wgrad_s), (0, 1, c), (1, 2, experts_s * fwd), (0, 2, c),
             (1, 1, attn_s * (1 - fwd) - attn_wgrad_s), (1, 0, attn_wgrad_s))
    free = [0.0, 0.0]  # comm, comp stream
    event = [0.0, 0.0, 0.0]  # chain 0: none (backward_dw), 1: backward micro-batch, 2: forward micro-batch
    layers = MERGED_LAYERS if carry else 1
    mark = 0.0
    for i in range(layers):
        if i == layers // 2:
            mark = max(free)
        for stream, chain, dur in nodes:
            start = free[stream] if free[stream] > event[chain] else event[chain]
            free[stream] = start + dur
            if chain:
                event[chain] = free[stream]
    return (max(free) - mark) / (layers - layers // 2)


def ep_overlap_exposed_s(d: float, c: float, perm: float, attn_s: float, experts_s: float,
                         stolen: float, eff: float, attn_wgrad_s: float = 0.0, experts_wgrad_s: float = 0.0,
                         carry: bool = True) -> float:
    """Exposed seconds of one MoE layer's dispatch / combine (fwd + bwd) under EP A2A overlap: the merged
    schedule (:func:`merged_layer_s`, the attention block ``attn_s`` and the expert MLP ``experts_s`` fwd +
    bwd, their delayed weight-gradient GEMMs where ``delay_wgrad_compute`` runs) less the compute. Compute
    hides at most ``eff`` of its time; while a kernel runs behind compute it holds ``stolen`` of the GPU's
    SMs, which that compute loses. Permutes run on the compute stream and stay exposed."""
    layer = merged_layer_s(d, c, eff * attn_s, eff * experts_s, eff * attn_wgrad_s, eff * experts_wgrad_s, carry)
    exposed = max(0.0, layer - eff * (attn_s + experts_s))
    hidden = max(0.0, 2 * (d + c) - exposed)
    return exposed + hidden * stolen + 2 * perm


def expert_host_s(local_experts: float, rows: float, precision: str, scopes: frozenset[str] | set[str],
                  cal: Calibration, grouped: bool = False) -> tuple[float, float]:
    """(forward, backward) host seconds of one MoE layer's per-expert launches (EXPERT_LAUNCHES) for one
    micro-batch: GEMM launches x ``cal.expert_launch_host_s`` and split quantizes x :func:`split_quantize_host_s`,
    per local expert with rows, or once with ``grouped`` (TE's grouped-tensor path,
    :attr:`RunConfig.experts_grouped_tensor`: one call per linear for all experts, each a round trip).

    Under a quantized recipe each per-expert GEMM is a host round trip through TE's pybind tensor wrappers and
    cuBLASLt set-up (each block-scaled GEMM sets up its layouts, scale pointers and heuristic query): TE PR #3134
    ran 8 experts' multi-stream cuBLASLt GEMMs in 0.267 ms on SM100 against 0.069 ms for one kernel of the
    same work, ~30 us each (the source value; the fit pins it near there). Each split's quantize is a round trip
    too where TE allocates and quantizes every split on its own (current scaling); where split_quantize
    bulk-allocates (SPLIT_QUANTIZE_PATH "bulk": MXFP8, FP8 block scaling) each split is a bare kernel launch, and
    none where one fused cast serves every split ("fused"); the one split_quantize call per linear, as any
    layer's per-call host work, is in ``launch_overhead_per_layer_s``. Megatron-LM's GB200 DeepSeek-V3
    notes (docs/discussions/deepseek-v3-gb200-optimization, 2.3) find the routed experts the one part still
    host-bound after CUDA graphs, and a larger EP (fewer local experts) cutting "quantization and other
    overheads". BF16 experts pass plain tensor views to the GEMMs; their few-us launches stay in
    ``launch_overhead_per_layer_s`` (G09: 32 local BF16 experts on H100 leave no room for ~30 us each).
    Experts without rows launch nothing (te_general_grouped_gemm skips empty splits); a CUDA graph of the
    experts (scopes ``moe`` or ``full_iteration``, which need static shapes) launches none."""
    if precision == "bf16" or "moe" in scopes or "full_iteration" in scopes or local_experts <= 0:
        return 0.0, 0.0
    if grouped:  # one group_quantize and one grouped GEMM per linear, each a round trip
        called = min(1.0, rows)
        fused_cast = SPLIT_QUANTIZE_PATH[precision] == "fused"
        per = {p: n["gemm"] + (0 if fused_cast else n["quantize"]) for p, n in EXPERT_LAUNCHES.items()}
        return called * per["fwd"] * cal.expert_launch_host_s, called * per["bwd"] * cal.expert_launch_host_s
    active = min(local_experts, rows)
    per = {p: n["gemm"] * cal.expert_launch_host_s + n["quantize"] * split_quantize_host_s(precision, cal)
           for p, n in EXPERT_LAUNCHES.items()}
    return active * per["fwd"], active * per["bwd"]


def split_quantize_host_s(precision: str, cal: Calibration) -> float:
    """Host seconds of one expert split's quantize inside TE's tex.split_quantize, by its path (SPLIT_QUANTIZE_PATH):
    none where one fused cast serves every split, one C++ kernel launch where the splits are bulk-allocated and
    quantized in a C++ loop (SPLIT_QUANTIZE_LAUNCH_S), else a round trip of its own (``cal.expert_launch_host_s``)."""
    path = SPLIT_QUANTIZE_PATH[precision]
    if path == "fused":
        return 0.0
    if path == "bulk":
        return SPLIT_QUANTIZE_LAUNCH_S
    return cal.expert_launch_host_s


def experts_recomputed(rc: Recompute) -> bool:
    """Whether the routed experts' forward runs again in backward: full recompute, or selective ``moe``
    (the whole MoE block; ``moe_act`` recomputes only the activation, no GEMM)."""
    return rc.granularity == "full" or (rc.granularity == "selective" and "moe" in rc.modules)


# Bytes per element of the autograd ops of the clamp in weighted_bias_quick_geglu_impl (below), backward:
# clamp_backward (torch derivatives.yaml) is where(self <= max, grad, 0) for the gate's one-sided clamp (compare:
# read 2, write a 1-byte mask; where: read mask, grad, write 2) and where((self >= min).logical_and_(self <= max),
# grad, 0) for the linear half's two-sided one (two compares, the in-place and, the where).
CLAMP_BWD_BYTES = {"one_sided": 2 + 1 + 1 + 2 + 2, "two_sided": 2 * (2 + 1) + 3 + (1 + 2 + 2)}


# Megatron-Core release from which the routed experts skip their own quantization padding where the dispatcher
# already pads (moe_utils.skip_routed_expert_padding, Megatron-LM 6815c0f, first in core_v0.18.0)
EXPERT_PAD_SKIP_FROM = (0, 18)


def expert_quant_padded(cfg: RunConfig, router_pads: bool = True) -> bool:
    """Whether TEGroupedMLP copies its rows into a padded buffer before the grouped GEMMs: a quantized run (FP8 / FP4
    GEMMs want each expert's rows a multiple of 16, 32 for MXFP8; dropless routing's counts are not) pads them through
    Fp8Padding / Fp8Unpadding (megatron/core/transformer/moe/experts.py, TEGroupedMLP.forward, core_v0.16), which
    copy only where a count is not aligned yet (TransformerEngine fp8_padding.py: "no padding needed" returns the
    input). ``router_pads``: the router already pads each expert's count (moe_router_padding_for_quantization /
    _for_fp8: true in the quantized recipes, Megatron-LM examples/moe_recipes' FP8 / MXFP8 YAMLs and Megatron Bridge's
    performance configs), so nothing is copied; moeplan assumes it (no knob), the MoE-layer benchmark (N38 / N39)
    leaves it off. From EXPERT_PAD_SKIP_FROM HybridEP / NCCL EP, and DeepEP's fused permute feeding the
    grouped-tensor experts, write padded segments themselves (skip_routed_expert_padding)."""
    if router_pads:
        return False
    if not cfg.fp8:
        return False
    if version_key(cfg.mcore_version) < EXPERT_PAD_SKIP_FROM:
        return True
    if cfg.dispatcher in ("hybridep", "ncclep"):
        return False
    return not (cfg.dispatcher == "deepep" and cfg.experts_grouped_tensor)


def expert_quant_padding_bytes(moe: MoE, hidden: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per routed row of TEGroupedMLP's quantization padding (:func:`expert_quant_padded`):
    forward Fp8Padding copies the permuted input into the padded buffer (tex.fused_multi_row_padding: read and write
    one bf16 row of the experts' input width) and Fp8Unpadding copies the output back (the same); backward the two
    gradients the other way (TransformerEngine pytorch/module/fp8_padding.py, fp8_unpadding.py)."""
    row = expert_width(moe, hidden) * BF16_BYTES
    return 2 * 2 * row, 2 * 2 * row


def expert_glue_bytes(moe: MoE, hidden: int, etp: int = 1, probs_bytes: int = BF16_BYTES) -> tuple[float, float]:
    """(forward, backward) HBM bytes per routed row of the eager ops Megatron-Core's unfused TEGroupedMLP runs
    around its two grouped GEMMs for a clamped GLU and expert biases (gpt-oss), beside the fused activation
    the generic element-wise term already charges. Source: megatron/core/transformer/moe/experts.py and
    megatron/core/fusions/fused_bias_geglu.py (Megatron-Core 0.17 2edffad .. 0.19 cd4afff, the pins of the
    recipes that ran gpt-oss); activations bf16, the probabilities ``probs_bytes`` (:func:`expert_probs_bytes`).
    F = expert FFN width / ETP, H = hidden:
    - clamp (``act_clamp``; bias_activation_fusion on: weighted_bias_quick_geglu_impl): outside the fused
      jit kernel it chunks the fc1 output, clamps the gate half (max) and the linear half (+-limit) and
      torch.cat's them back: forward 2 x (read F, write F) + (read 2F, write 2F) = 16F bytes; backward each
      clamp's clamp_backward (CLAMP_BWD_BYTES per element) and the chunk's gradient concatenation (8F);
    - expert biases (``expert_bias``): linear_fc1 adds its bias inside TE GroupedLinear (GEMM epilogue; dbias
      fused with the wgrad GEMM in BF16, with the quantize in bgrad_quantize under FP8), no extra pass;
      linear_fc2 is built with skip_bias_add=True and TEGroupedMLP._apply_bias adds p x b per expert in eager
      torch: torch.cat([t + b * p ...]).to(dtype), in the probabilities' dtype s (type promotion): forward b x p
      (write sH), the add (read 2H + sH, write sH), the cat (read sH, write sH) and, s = 4, the cast back to
      bf16 (read 4H, write 2H): 12H bf16, 28H fp32; backward the bias's and the prob's gradients, each a product
      over [rows, H] (read sH, write sH) and its reduction (read sH), and, s = 4, the cast's gradient (read 2H,
      write 4H) and fc2 output's (read 4H, write 2H): 12H bf16, 36H fp32.
    Under the op fuser (``RunConfig.experts_op_fused``) none of these run."""
    fwd = bwd = 0.0
    if moe.clamped_glu:
        f = moe.expert_ffn_hidden / etp
        fwd += expert_glue_clamp_fwd_bytes(moe, etp)
        bwd += f * (CLAMP_BWD_BYTES["one_sided"] + CLAMP_BWD_BYTES["two_sided"]) + (2 * f + 2 * f) * BF16_BYTES
    if moe.expert_bias:
        sb = float(probs_bytes)
        cast = probs_bytes != BF16_BYTES
        fwd += hidden * (sb + (BF16_BYTES + 2 * sb) + 2 * sb + ((sb + BF16_BYTES) if cast else 0.0))
        bwd += hidden * (2 * 3 * sb + (2 * (sb + BF16_BYTES) if cast else 0.0))
    return fwd, bwd


def fused_grouped_mlp_removed_bytes(moe: MoE) -> dict[str, tuple[float, float]]:
    """HBM bytes per routed row that TE's CuTe DSL fused grouped MLP (moeplan.base.te_release.FusedGroupedMLP) does
    not move against the unfused path moeplan otherwise charges, as (forward, backward) by where moeplan counts them.
    F = expert FFN width (ETP 1), W = fc1's output width (2F, gated), activations BF16. Source:
    transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py and backward_grouped_mlp.py (v2.14; grouped_mlp.py
    from v2.17, the same MXFP8 GLU path):

    - ``activation``: the scaled SwiGLU as its own pass. Forward it reads fc1's output (W) and writes its own (F);
      fused, fc1's grouped GEMM applies it in its epilogue (grouped_gemm_glu_wrapper_sm100), still writing the BF16
      pre-activation it saves for backward (``c_tensor``). Backward it reads fc2's dgrad output (F) and writes the
      gradient of fc1's output (W); fused, fc2's dgrad GEMM applies dSwiGLU and the prob gradient in its epilogue
      (grouped_gemm_dglu_wrapper_sm100), which still reads the saved pre-activation. Forward 2(W + F), backward
      2(F + W).
    - ``cast``: the MXFP8 quantizes of fc2's input (F) and of fc1's output gradient (W) no longer read a BF16
      tensor: both kernels write the row- and column-wise MXFP8 copies and their scales from the accumulator
      (``d_tensor`` / ``d_col_tensor``); the writes stay. Forward 2F, backward 2W (of QUANTIZE_BYTES_PER_ELEM).
    - ``gemm``: fc2's dgrad writes no BF16 output (the dglu epilogue consumes it): backward 2F (of the GEMM traffic).

    fc1's input quantize (one tex.group_quantize), fc2's output-gradient quantize, fc2's BF16 output and fc1's dgrad
    output are unchanged. SwiGLU (W = 2F): 8F forward, 12F backward."""
    f = float(moe.expert_ffn_hidden)
    w = 2 * f
    b = BF16_BYTES
    return {"activation": (b * (w + f), b * (f + w)), "cast": (b * f, b * w), "gemm": (0.0, b * f)}


def expert_glue_clamp_fwd_bytes(moe: MoE, etp: int = 1) -> float:
    """Forward bytes per routed row of :func:`expert_glue_bytes`'s clamp alone: what selective ``moe_act``
    recompute runs again (its checkpoint wraps bias_act_func, clamp included; fc2's bias is outside it)."""
    # the clamp's two outputs (read and write the 2f-wide fc1 output: 2 x (f + f)) and their cat (read and write 2f)
    return (8 * moe.expert_ffn_hidden / etp) * BF16_BYTES if moe.clamped_glu else 0.0


def dispatch_before_host_sync(dispatcher: str) -> bool:
    """Whether the dropless forward's last host sync before the experts comes after the dispatch kernel, so that the
    expert launches cannot run ahead of the dispatch. HybridEP without a token budget: HybridEPBuffer's dispatch
    launches the dispatch kernel (Executor::dispatch_core), then Executor::dispatch_postprocess runs the permute
    preprocessing and copies tokens_per_expert to pinned host memory with a blocking copy and sums it on the host
    (deepseek-ai/DeepEP csrc/hybrid_ep/executor/executor.cu; Megatron-Core fused_a2a.py passes non_blocking only
    with num_permuted_tokens), so the host waits for the dispatch itself. DeepEP's normal dispatch and the
    all-to-all dispatcher read the counts before their dispatch (DeepEP waits on its notify kernel's counter,
    alltoall syncs at cuda_sync_point before the token all-to-all), so their dispatch runs in that window.

    That is hybrid-ep's order up to f4f2c10. From 83e0d15 (2025-12; the 7febc6e the 2026 recipes pin) HybridEP syncs the
    stream at the end of its metadata preprocessing, BEFORE dispatch_core, as the others do. Modelled so (this
    function false for every dispatcher), the refit moves CV 0.1037 -> 0.1042 over 127, N41's CP sweep shape leaves
    its bound (max / min 1.288 against 1.433 measured, bound 1.29) and PR 3168's GB200 gap grows to 1.64x: the
    expert launches this order exposes stand in for a host cost moeplan does not locate (docs/calibration.md, known
    gaps: partial vs full-iteration graphs, Grace's host time), so the older order is kept, and said, until a
    measurement separates the two (2026-12-05)."""
    return dispatcher == "hybridep"


def expert_launch_exposed_s(host_fwd_s: float, host_bwd_s: float, gpu_fwd_s: float, gpu_bwd_s: float) -> float:
    """Seconds the per-expert launches add to one MoE layer and micro-batch: the host time beyond the GPU
    work it can run ahead of. Forward: the dropless dispatch waits on the host for the received-token counts
    (tokens per expert, D2H: HybridEP's permute preprocessing, DeepEP's dispatch, alltoall's splits), which
    drains the launch queue, so the expert launches can only overlap the GPU work issued after that sync
    and before the experts' results are needed (``gpu_fwd_s``: the dispatch kernel where it follows the sync,
    :func:`dispatch_before_host_sync`, and the experts' forward GEMMs). Backward: no host sync (m_splits and the dispatch handle are saved from the forward), so the host
    runs ahead of the layer's whole backward (``gpu_bwd_s``)."""
    return max(0.0, host_fwd_s - gpu_fwd_s) + max(0.0, host_bwd_s - gpu_bwd_s)
