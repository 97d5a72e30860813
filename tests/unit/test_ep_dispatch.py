"""EP dispatch / combine physics (timing._ep_kernels and friends): what each dispatcher backend moves and
at what rate, how EP A2A overlap hides it, and what the hiding costs."""

from __future__ import annotations

import dataclasses
import math

import pytest

from moeplan import api
from moeplan.hardware import load_gpu
from moeplan.models.catalog import load_model
from moeplan.models.spec import MoE
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.moe import (ep_kernels as _ep_kernels, routing_map_allgather_s, ep_comm_sms,
    ep_kernel_bw_bytes_per_s, ep_overlap_exposed_s, expected_ranks_hit)


def _moe(model: str) -> MoE:
    spec = load_model(model)
    return next(layer.mlp for layer in spec.layers if isinstance(layer.mlp, MoE))


def test_flex_dispatchers_send_a_token_once_per_rank():
    """DeepSeek-V3 (256 experts, 8 groups, top-4 groups, top-8): a token's 8 experts lie among the 128 of
    its 4 chosen groups; at EP8 each rank holds one group (32 experts), so it reaches at most 4 ranks, fewer
    when a chosen group gets none of the 8; at EP32 the ranks of its 4 groups (16) that hold one of them.
    Without groups (Qwen3-30B-A3B, 128 experts) the same hypergeometric count over all ranks."""
    dsv3 = _moe("deepseek-v3")
    assert (dsv3.n_group, dsv3.topk_group, dsv3.top_k) == (8, 4, 8)
    assert expected_ranks_hit(dsv3, 8) == pytest.approx(4 * (1 - math.comb(96, 8) / math.comb(128, 8)))
    assert expected_ranks_hit(dsv3, 32) == pytest.approx(16 * (1 - math.comb(120, 8) / math.comb(128, 8)))
    qwen = _moe("qwen3-30b-a3b")
    assert expected_ranks_hit(qwen, 8) == pytest.approx(8 * (1 - math.comb(112, 8) / math.comb(128, 8)))
    for ep in (2, 4, 8, 16, 32, 64, 128):
        assert 1.0 <= expected_ranks_hit(qwen, ep) <= min(ep, qwen.top_k)


def _kernels(model: str, **kw) -> tuple[float, float, float]:
    cfg, gpu = api.build_config(model, **kw)
    ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
    return _ep_kernels(ctx, _moe(model))


def test_megatron_dispatches_bf16_with_every_backend():
    """Megatron-Core hands the bf16 hidden states to DeepEP and HybridEP (fused_a2a.py asserts no FP8
    dispatch for HybridEP): FP8 GEMMs do not shrink the dispatch."""
    kw = dict(gpu="gb200", gpus=256, seq_len=4096, gbs=2048, tp=1, pp=8, vpp=4, ep=32)
    for d in ("deepep", "hybridep"):
        a = _kernels("deepseek-v3", precision="mxfp8", dispatcher=d, **kw)
        b = _kernels("deepseek-v3", precision="bf16", dispatcher=d, **kw)
        assert a[:2] == pytest.approx(b[:2])


def test_deepep_beyond_eight_nvlink_peers_is_the_slow_mnnvl_path():
    """DeepEP's normal kernels are built for <= 8 NVLink peers; EP32 on NVL72 ran at ~400 / ~190 GB/s
    (dispatch / combine, 24 SMs) where HybridEP reaches ~484 / ~465 GB/s (its GB200 benchmark)."""
    gb200 = load_gpu("gb200")
    cal = DEFAULT_CALIBRATION
    deep = {k: ep_kernel_bw_bytes_per_s(gb200, cal, "deepep", k, 32) for k in ("dispatch", "combine")}
    hyb = {k: ep_kernel_bw_bytes_per_s(gb200, cal, "hybridep", k, 32) for k in ("dispatch", "combine")}
    assert deep["combine"] < 0.5 * hyb["combine"] and deep["dispatch"] < hyb["dispatch"]
    assert deep["combine"] == pytest.approx(cal.ep_sms["deepep"] * 190e9 / 24, rel=0.01)
    # inside 8 peers DeepEP is the faster-per-link intranode kernel; on NVLink4 (H100) it is link-bound
    h100 = load_gpu("h100")
    assert ep_kernel_bw_bytes_per_s(h100, cal, "deepep", "dispatch", 8) == pytest.approx(0.765 * h100.nvlink_bw_bytes_per_s)
    assert ep_kernel_bw_bytes_per_s(gb200, cal, "deepep", "combine", 8) > 2 * deep["combine"]


def test_g05_dispatcher_order_on_nvl72():
    """G05 (DeepSeek-V3, 256 GB200, EP32): HybridEP measured +14% over DeepEP; moeplan orders them so."""
    kw = dict(gpu="gb200", gpus=256, seq_len=4096, gbs=2048, mbs=1, tp=1, pp=8, vpp=4, ep=32, precision="mxfp8",
              recompute="selective:mlp,moe_act", cuda_graphs="attn,moe_router,moe_preprocess", grad_fp32=False,
              bf16_moments=True)
    deep = api.estimate("deepseek-v3", dispatcher="deepep", **kw)["tokens_per_s_per_gpu"]
    hyb = api.estimate("deepseek-v3", dispatcher="hybridep", **kw)["tokens_per_s_per_gpu"]
    assert hyb > 1.05 * deep


@pytest.mark.parametrize("gpus,ep", [(64, 8), (256, 32)])
def test_flex_dispatchers_beat_nccl_alltoall_on_nvl8(gpus, ep):
    """On H100 nodes the flex dispatchers send a token once per rank (and once per remote node over
    RDMA) where NCCL all-to-all sends one row per (token, expert) and permutes twice: in node (EP8) and
    across nodes (EP32), DeepEP and HybridEP estimate faster than alltoall (G11 measured HybridEP 244 vs
    alltoall 133 TFLOP/s at EP16)."""
    kw = dict(gpu="h100", gpus=gpus, seq_len=4096, gbs=gpus * 4, tp=1, pp=4, ep=ep, precision="fp8")
    a2a = api.estimate("qwen3-235b-a22b", dispatcher="alltoall", **kw)["tokens_per_s_per_gpu"]
    for d in ("deepep", "hybridep"):
        assert api.estimate("qwen3-235b-a22b", dispatcher=d, **kw)["tokens_per_s_per_gpu"] > a2a


def test_overlap_follows_the_merged_1f1b_schedule():
    """The merged layer as model_chunk_schedule_plan.py runs it (timing.merged_layer_s): dispatch_bwd waits for
    the experts' backward, so without delay_wgrad_compute it hides behind mlp_fwd (1/3 of the experts) only;
    with it the experts' wgrad runs beside it too. The next combine_bwd waits for attention's backward, so it
    hides behind attn_fwd only; with delay_wgrad_compute attention's wgrad runs beside it too, inside a model
    chunk (not in the chunk's first layer). Hidden time costs the stolen SMs; permutes always count."""
    # d = c = 1 s, attention 6 s, experts 2 s: dispatch_bwd (1 s) beside mlp_fwd (2/3 s) exposes 1/3 s
    assert ep_overlap_exposed_s(1.0, 1.0, 0.0, attn_s=6.0, experts_s=2.0, stolen=0.0, eff=1.0) == pytest.approx(1 / 3)
    # ... and nothing once the experts' wgrad (2/3 s) moves beside it
    assert ep_overlap_exposed_s(1.0, 1.0, 0.0, attn_s=6.0, experts_s=2.0, stolen=0.0, eff=1.0,
                                experts_wgrad_s=2 / 3) == pytest.approx(0.0, abs=1e-12)
    # a 3 s dispatch (combine_bwd moves as much): combine_bwd beside attn_fwd (2 s) exposes 1 s, dispatch_fwd
    # beside mlp_bwd (8/3 s) 1/3 s
    assert ep_overlap_exposed_s(3.0, 1.0, 0.0, attn_s=6.0, experts_s=4.0, stolen=0.0, eff=1.0) == pytest.approx(4 / 3)
    # attention's wgrad (1 s) beside the next combine_bwd hides one more second in the steady state, not in
    # a chunk's first layer
    steady = ep_overlap_exposed_s(3.0, 1.0, 0.0, attn_s=6.0, experts_s=4.0, stolen=0.0, eff=1.0, attn_wgrad_s=1.0)
    first = ep_overlap_exposed_s(3.0, 1.0, 0.0, attn_s=6.0, experts_s=4.0, stolen=0.0, eff=1.0, attn_wgrad_s=1.0,
                                 carry=False)
    assert steady == pytest.approx(1 / 3) and first == pytest.approx(4 / 3)
    # hidden time costs the stolen share of the SMs; permutes fwd + bwd always count
    assert ep_overlap_exposed_s(1.0, 1.0, 0.5, attn_s=6.0, experts_s=2.0, stolen=0.25, eff=1.0) == pytest.approx(
        1 / 3 + 0.25 * (4.0 - 1 / 3) + 1.0)


def test_hidden_dispatch_costs_the_sms_it_holds():
    """EP overlap: the compute that runs beside the dispatch / combine kernels loses their SMs, so giving
    the flex backend more SMs makes an overlapped layer slower when the link is not the limit."""
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16, dispatcher="hybridep", ep_overlap=True)
    cfg, gpu = api.build_config("qwen3-30b-a3b", **kw)
    base = api.estimate("qwen3-30b-a3b", **kw)["time_breakdown_s"]["ep_comm"]
    more = DEFAULT_CALIBRATION.with_overrides({"ep_sms": {"hybridep": 2 * DEFAULT_CALIBRATION.ep_sms["hybridep"]}})
    assert ep_comm_sms(cfg, gpu, more) == 2 * ep_comm_sms(cfg, gpu, DEFAULT_CALIBRATION)
    # EP16 on H100 crosses nodes: the RDMA leg is the limit, so the extra SMs only cost compute
    assert api.estimate("qwen3-30b-a3b", cal=more, **kw)["time_breakdown_s"]["ep_comm"] > base


def test_pp_send_recv_hides_behind_a_chunk_with_interleaving():
    """Megatron Bridge sets overlap_p2p_comm when VPP > 1 (training/comm_overlap.py): the chunk-boundary
    send / receive runs behind the next chunk's compute; with VPP = 1 it is batched in the critical path."""
    kw = dict(gpu="gb200", gpus=256, seq_len=4096, gbs=2048, mbs=1, tp=1, ep=32, precision="mxfp8",
              dispatcher="hybridep")
    flat = api.estimate("qwen3-235b-a22b", pp=8, vpp=1, **kw)["time_breakdown_s"]["pp_comm"]
    inter = api.estimate("qwen3-235b-a22b", pp=8, vpp=3, **kw)["time_breakdown_s"]["pp_comm"]
    assert flat > 0 and inter < 0.1 * flat


def test_flex_dispatchers_fuse_the_preprocess_launches():
    """Router + EP preprocess launch 17 kernels with DeepEP's fused layout kernel instead of 31 (Megatron-LM
    deepseek-v3-gb200-optimization, 2.2.1): less host launch time per layer, none left once those scopes
    are graph-captured."""
    from moeplan.engine.timing.context import FLEX_PREPROCESS_FUSED, GRAPH_LAUNCH_SHARE

    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    # the host floor (engine.timing.host: max(host, GPU), shown in launch_overhead too) off: the additive rule alone
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, tp=2, pp=2, ep=4,
              cal=DEFAULT_CALIBRATION.with_overrides({"host_layer_pass_s": 1e-15}))
    lo = {d: api.estimate("qwen3-30b-a3b", dispatcher=d, **kw)["time_breakdown_s"]["launch_overhead"]
          for d in ("alltoall", "deepep")}
    share = FLEX_PREPROCESS_FUSED * (GRAPH_LAUNCH_SHARE["moe_router"] + GRAPH_LAUNCH_SHARE["moe_preprocess"])
    assert lo["deepep"] == pytest.approx(lo["alltoall"] * (1 - share), rel=1e-6)
    graphs = dict(kw, cuda_graphs="moe_router,moe_preprocess")
    assert (api.estimate("qwen3-30b-a3b", dispatcher="deepep", **graphs)["time_breakdown_s"]["launch_overhead"]
            == pytest.approx(api.estimate("qwen3-30b-a3b", dispatcher="alltoall", **graphs)["time_breakdown_s"]["launch_overhead"]))


def _internode_reported(gpu, ep: int, kernel: str) -> tuple[float, float]:
    """(RDMA, NVL) GB/s as DeepEP's tests/legacy/test_internode.py reports them for ``kernel`` at ``ep`` with
    24 SMs, routed as it routes (256 experts in one group per NODE, top-8 inside the top min(nodes, 4)
    groups): ``num_rdma_token_sent`` (tokens x nodes reached, its own included) and ``recv_x`` (tokens x
    ranks reached, its own included) x BF16 row bytes per second."""

    cal = DEFAULT_CALIBRATION.with_overrides({"ep_sms": {"deepep": 24.0}})
    cfg, _ = api.build_config("deepseek-v3", gpu="h100", gpus=ep * 8, seq_len=4096, gbs=ep * 8, tp=1, pp=8,
                              ep=ep, dispatcher="deepep")
    ctx = make_ctx(cfg, gpu, cal)
    nodes, groups = ep // 8, min(ep // 8, 4)
    moe = dataclasses.replace(_moe("deepseek-v3"), n_group=nodes, topk_group=groups)
    dispatch_s, combine_s, _ = _ep_kernels(ctx, moe)
    t = combine_s if kernel == "combine" else dispatch_s
    per_node, reach = 256 // nodes, groups * 256 // nodes
    reached = groups * (1 - math.comb(reach - per_node, 8) / math.comb(reach, 8))
    row = 7168 * 2
    return 4096 * reached * row / t, 4096 * expected_ranks_hit(moe, ep) * row / t


@pytest.mark.parametrize("ep,measured", [(16, 43e9), (32, 57e9), (64, 50e9)])
def test_deepep_internode_benchmark_is_reproduced(ep, measured):
    """deepseek-ai/DeepEP docs/legacy.md, normal kernels on H800 (200 GB/s NVLink per direction, CX7 400G):
    BF16 combine "RDMA bottleneck bandwidth" 43 / 57 / 50 GB/s at EP16 / 32 / 64, 4096 tokens, hidden 7168,
    24 SMs. EP32 and EP64 are RDMA-bound. At EP16 (2 nodes) half of what the benchmark counts never leaves the
    node (its own node's tokens: 1.99 nodes reached per token, 1.0 remote), so the NIC carries ~21 GB/s and
    the NVLink leg binds (DeepEP issue #285, the maintainers: "the NVLink bandwidth will exceed 140 GB/s").
    That leg runs at the internode kernel's own per-SM rate (one NVLink-sender warp per peer per channel,
    ~145 GB/s at 24 SMs on H200 too, issue #493), not at the intranode kernel's 158 GB/s: with the intranode
    rate moeplan was 12% fast here (48 GB/s)."""
    h800 = dataclasses.replace(load_gpu("h100"), nvlink_bw_bytes_per_s=200e9, scaleout_bw_bytes_per_s=50e9)
    rdma, _ = _internode_reported(h800, ep, "combine")
    assert rdma == pytest.approx(measured, rel=0.10)


def test_deepep_internode_nvlink_leg_is_kernel_bound():
    """Two nodes of H200 (450 GB/s NVLink, CX7 400G), 24 SMs (deepseek-ai/DeepEP issue #493): best combine
    44.37 GB/s (RDMA) / 145.16 GB/s (NVL), BF16 dispatch 40.89 / 133.78. The NVLink leg of the internode
    kernels is no faster on H200's 450 GB/s links than on H800's 200 (issue #285: > 140 GB/s), so it is the
    kernel's SMs, not the link, that bind; and the RDMA : NVL ratio of what the benchmark counts (nodes
    reached : ranks reached per token, 3.27 measured) follows from the routing. Intranode (EP8) the same
    H200 keeps the intranode kernel's rate."""
    h200 = load_gpu("h200")
    h800 = dataclasses.replace(load_gpu("h100"), nvlink_bw_bytes_per_s=200e9, scaleout_bw_bytes_per_s=50e9)
    for kernel, rdma_gbs, nvl_gbs in (("combine", 44.37e9, 145.16e9), ("dispatch", 40.89e9, 133.78e9)):
        rdma, nvl = _internode_reported(h200, 16, kernel)
        assert rdma == pytest.approx(rdma_gbs, rel=0.05) and nvl == pytest.approx(nvl_gbs, rel=0.05)
        assert _internode_reported(h800, 16, kernel)[1] == pytest.approx(nvl, rel=0.01)
    cal = DEFAULT_CALIBRATION.with_overrides({"ep_sms": {"deepep": 24.0}})
    assert ep_kernel_bw_bytes_per_s(h200, cal, "deepep", "combine", 8) > 2 * ep_kernel_bw_bytes_per_s(
        h200, cal, "deepep", "combine", 8, across_domains=True)


HYBRIDEP_EP16_GAP = (
    "HybridEP's internode NVLink leg: its H100 benchmark at EP16 (2 nodes, 16 SMs) puts it at ~177-180 GB/s "
    "(0.39-0.40 of 450; 8 SMs measure more, so not SM-bound) where moeplan uses the intranode link share (284 "
    "GB/s): EP16 83 / 86 GB/s against 54 / 53 measured. Modelled as a link share of its own it reproduces the "
    "table and the refit improves (CV 0.140 -> 0.134, G11 overlap-off +20% -> +6%, Qwen3-30B-A3B H100 gap "
    "+53% -> +40%), but G11's overlap gain becomes 1.28 against 1.175 measured "
    "(test_g11_overlap_gain_is_the_measured_one): the overlap model hides too much of the larger leg, so it is "
    "not adopted until that is found (docs/calibration.md, known gaps)")


@pytest.mark.parametrize("ep,dispatch_gbs,combine_gbs,rel", [
    pytest.param(16, 54.47e9, 53.35e9, 0.10, marks=pytest.mark.xfail(strict=True, reason=HYBRIDEP_EP16_GAP), id="16-gap"),
    (32, 47.36e9, 52.53e9, 0.30), (64, 41.24e9, 46.57e9, 0.30)])
def test_hybridep_internode_benchmark_is_reproduced(ep, dispatch_gbs, combine_gbs, rel):
    """deepseek-ai/DeepEP docs/README_Hybrid-EP.md, H100 table: 4096 tokens, hidden 7168, top-8 random uniform,
    8 local experts, 16 SMs, Torch API, counted as tests/test_hybrid_ep.py counts (``count_rdma_send_from_routing_map``:
    tokens x nodes reached, its own node included). EP32 / EP64 are RDMA-bound at DeepEP's fitted NIC share,
    11-27% above HybridEP's table (no shared training row separates HybridEP's NIC share from DeepEP's). At
    EP16 the NVLink leg binds (6.6 ranks but 2.0 nodes reached per token): see HYBRIDEP_EP16_GAP."""
    h100 = load_gpu("h100")
    cal = DEFAULT_CALIBRATION.with_overrides({"ep_sms": {"hybridep": 16.0}})
    cfg, _ = api.build_config("deepseek-v3", gpu="h100", gpus=ep * 8, seq_len=4096, gbs=ep * 8, tp=1, pp=8,
                              ep=ep, dispatcher="hybridep")
    moe = dataclasses.replace(_moe("deepseek-v3"), num_experts=8 * ep, n_group=1, topk_group=1)
    dispatch_s, combine_s, _ = _ep_kernels(make_ctx(cfg, h100, cal), moe)
    nodes = ep // 8
    counted = 4096 * nodes * (1 - math.comb(8 * ep - 64, 8) / math.comb(8 * ep, 8)) * 7168 * 2
    assert counted / dispatch_s == pytest.approx(dispatch_gbs, rel=rel)
    assert counted / combine_s == pytest.approx(combine_gbs, rel=rel)


def test_hybridep_gathers_the_routing_map_before_each_dispatch():
    """HybridEP all-gathers every EP rank's boolean routing map ([tokens x experts], one byte each) before
    its metadata scan (DeepEP hybrid-ep metadata_preprocessing -> allgather_routing_map), once per MoE
    layer forward: (EP - 1) x tokens x experts bytes received at the NVLink all-gather rate. DeepEP and
    the NCCL dispatchers exchange only counts."""
    kw = dict(gpu="gb200", gpus=64, seq_len=4096, gbs=1024, mbs=2, pp=2, vpp=4, ep=32, mcore_version="0.19")
    moe = _moe("qwen3-next-80b-a3b")
    cfg, gpu = api.build_config("qwen3-next-80b-a3b", dispatcher="hybridep", **kw)
    ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
    want = 31 * 8192 * 512 / gpu.nvlink_busbw_bytes_per_s  # 130 MB per layer and micro-batch
    assert routing_map_allgather_s(ctx, moe) == pytest.approx(want)
    assert 1e-4 < want < 1e-3
    cfg, gpu = api.build_config("qwen3-next-80b-a3b", dispatcher="deepep", **kw)
    assert routing_map_allgather_s(make_ctx(cfg, gpu, DEFAULT_CALIBRATION), moe) == 0.0
    # it grows with experts x EP: Qwen3-30B-A3B's 128 experts at EP8 gather 30x less per token
    cfg, gpu = api.build_config("qwen3-30b-a3b", dispatcher="hybridep", gpu="gb200", gpus=8, seq_len=4096,
                                gbs=512, mbs=2, ep=8)
    small = routing_map_allgather_s(make_ctx(cfg, gpu, DEFAULT_CALIBRATION), _moe("qwen3-30b-a3b"))
    assert small == pytest.approx(7 * 8192 * 128 / gpu.nvlink_busbw_bytes_per_s)


def test_the_allgather_dispatcher_moves_ep_copies_of_the_tokens():
    """MoEAllGatherTokenDispatcher all-gathers every token of the EP group and reduce-scatters back: EP copies of a
    rank's tokens where alltoall moves top-k (it was costed as alltoall: same time, same memory)."""
    from moeplan import api

    kw = dict(gpu="h100", gpus=16, seq_len=32768, gbs=64, cp=8, ep=16)
    a2a = api.estimate("qwen3-30b-a3b", dispatcher="alltoall", **kw)
    ag = api.estimate("qwen3-30b-a3b", dispatcher="allgather", **kw)
    ratio = ag["time_breakdown_s"]["ep_comm"] / a2a["time_breakdown_s"]["ep_comm"]
    assert ratio == pytest.approx(16 / 8, rel=0.05)  # EP 16 copies against top-8 (the permutes aside)
    assert ag["memory_gib"]["total"] >= a2a["memory_gib"]["total"]
    # the gathered copy lives while the MoE layer runs: on a rank without the loss (whose forward peak, the bf16
    # logits beside their fp32 copy, is larger than a Qwen3-30B-A3B layer's working set) it is the peak's transient
    kw = dict(gpu="h100", gpus=16, seq_len=32768, gbs=64, cp=4, pp=2, ep=8)
    a2a = api.estimate("qwen3-30b-a3b", dispatcher="alltoall", **kw)
    ag = api.estimate("qwen3-30b-a3b", dispatcher="allgather", **kw)
    assert ag["memory_gib"]["total"] > a2a["memory_gib"]["total"]


def test_allgather_time_and_memory_gather_the_same_group():
    """The gather runs over EP x ETP (the tp_ep group) in both the time and the memory model (review)."""
    from moeplan import api

    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=8, dispatcher="allgather")
    one = api.estimate("qwen3-30b-a3b", etp=1, **kw)
    two = api.estimate("qwen3-30b-a3b", etp=2, **kw)
    assert two["time_breakdown_s"]["ep_comm"] > one["time_breakdown_s"]["ep_comm"]
