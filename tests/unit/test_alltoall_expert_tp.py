"""The alltoall and allgather dispatchers with expert TP > 1 (Megatron-Core token_dispatcher.py, core_v0.12 .. 0.19).

MoEAlltoAllTokenDispatcher runs its all-to-all over the EP group, then all-gathers the received top-k rows over the
expert-TP group and sorts the ETP x top-k rows by local expert; the combine reduce-scatters them back in the probs'
(router logits') dtype. MoEAllGatherTokenDispatcher gathers over the whole expert-TP x EP (tp_ep) group, at EP 1 too.
moeplan.engine.timing.moe.ep_kernels costs both (alltoall_expert_tp_s); at ETP 1 nothing changes."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import busbw, make_ctx
from moeplan.engine.timing.moe import alltoall_expert_tp_s, ep_kernels
from moeplan.models.spec import MoE

MODEL = "qwen3-30b-a3b"  # 128 experts, top-8, hidden 2048; Bridge leaves moe_router_dtype unset (bf16 logits)
CAL = DEFAULT_CALIBRATION


def _setup(dispatcher: str, gpu: str = "gb200", **kw):
    base = dict(gpu=gpu, gpus=64, seq_len=4096, gbs=512, mbs=1, tp=2)
    base.update(kw)
    cfg, gpu_spec = api.build_config(MODEL, dispatcher=dispatcher, **base)
    moe = next(layer.mlp for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
    return cfg, gpu_spec, make_ctx(cfg, gpu_spec, CAL), moe


def _row_bytes(cfg) -> float:
    return cfg.model.hidden * BF16_BYTES


def _perm_s(ctx, rows_per_token: float) -> float:
    """Read + write of ``rows_per_token`` hidden rows per local token at the calibrated HBM rate."""
    gpu = ctx.gpu
    return 2 * ctx.tokens * rows_per_token * _row_bytes(ctx.cfg) / (gpu.hbm_bw_bytes_per_s * CAL.hbm_eff)


def _probs_ring_s(ctx, gpu, k: int, probs_bytes: int = BF16_BYTES) -> float:
    """The probs' all-gather over 2 expert-TP ranks: one scalar per top-k row, in the probs' dtype."""
    return ctx.tokens * k * probs_bytes / busbw(gpu, 2, 1, CAL)


def test_alltoall_gathers_and_scatters_over_expert_tp():
    """EP 16 x ETP 2 on GB200 (one NVLink domain): the all-to-all is EP 16's, as at ETP 1 with the same tokens per
    GPU; on the compute stream ETP 2 adds the sort of the twice-as-many gathered rows and the ring all-gather +
    reduce-scatter of the top-k rows over the 2 expert-TP ranks. Before, ETP 2 cost what ETP 1 does."""
    *_, ctx1, moe = _setup("alltoall", ep=16)
    cfg2, gpu, ctx2, _ = _setup("alltoall", ep=16, etp=2)
    assert ctx1.tokens == ctx2.tokens
    d1, c1, p1 = ep_kernels(ctx1, moe)
    d2, c2, p2 = ep_kernels(ctx2, moe)
    assert (d2, c2) == (pytest.approx(d1), pytest.approx(c1))
    k = moe.top_k
    ring = ctx2.tokens * k * _row_bytes(cfg2) * (2 - 1) / busbw(gpu, 2, 1, CAL)
    probs = _probs_ring_s(ctx2, gpu, k)  # the probs' all-gather (bf16 logits: no casts)
    assert alltoall_expert_tp_s(ctx2, moe) == pytest.approx(2 * ring + probs)  # all-gather + reduce-scatter, bf16
    assert p1 == pytest.approx(_perm_s(ctx1, 2 * k))
    assert p2 == pytest.approx(_perm_s(ctx2, k + 2 * k) + 2 * ring + probs)
    assert p2 > p1


def test_the_reduce_scatter_runs_in_the_router_dtype():
    """combine_preprocess casts the expert outputs to the probs' dtype before the reduce-scatter: fp32 router logits
    (moe_router_dtype fp32) double its bytes, not the all-gather's (the probs' all-gather is in fp32 too, and the
    casts around the reduce-scatter are HBM passes: test_expert_tp_probs_and_casts)."""
    cfg, gpu, ctx, moe = _setup("alltoall", ep=16, etp=2)
    ring = ctx.tokens * moe.top_k * _row_bytes(cfg) / busbw(gpu, 2, 1, CAL)
    fp32 = cfg.with_(moe_router_dtype="fp32")
    assert fp32.mcore_router_dtype == "fp32"
    hbm = gpu.hbm_bw_bytes_per_s * CAL.hbm_eff
    casts = ctx.tokens * (2 + 1) * moe.top_k * cfg.model.hidden * (2 + 4) / hbm
    assert alltoall_expert_tp_s(make_ctx(fp32, gpu, CAL), moe) == pytest.approx(
        ring + 2 * ring + _probs_ring_s(ctx, gpu, moe.top_k, 4) + casts)


def test_alltoall_at_ep1_with_expert_tp_costs_the_expert_tp_collectives():
    """EP 1 x ETP 2: the all-to-all over a group of one is a no-op (mappings.py _AllToAll), the expert-TP all-gather
    and reduce-scatter are not; before, ep_kernels returned zeros below EP 2."""
    cfg, gpu, ctx, moe = _setup("alltoall", ep=1, etp=2)
    d, c, perm = ep_kernels(ctx, moe)
    assert (d, c) == (0.0, 0.0)
    ring = ctx.tokens * moe.top_k * _row_bytes(cfg) / busbw(gpu, 2, 1, CAL)
    assert perm == pytest.approx(_perm_s(ctx, 3 * moe.top_k) + 2 * ring + _probs_ring_s(ctx, gpu, moe.top_k))
    *_, ctx_one, _ = _setup("alltoall", ep=1, etp=1, tp=1)
    assert ep_kernels(ctx_one, moe) == (0.0, 0.0, 0.0)


def test_allgather_at_ep1_with_expert_tp_gathers_over_the_group():
    """EP 1 x ETP 2: MoEAllGatherTokenDispatcher gathers over its tp_ep group (2 ranks), half of the 2 x tokens rows
    from the peer over NVLink, and permutes the ETP x top-k local rows (its dispatch direction's pass,
    timing.moe.permute_pass_rows); before, nothing was costed."""
    cfg, gpu, ctx, moe = _setup("allgather", ep=1, etp=2)
    d, c, perm = ep_kernels(ctx, moe)
    want = ctx.tokens * 2 * _row_bytes(cfg) * (1 / 2) / (gpu.nvlink_bw_bytes_per_s * CAL.a2a_eff["allgather"])
    assert (d, c) == (pytest.approx(want), pytest.approx(want))
    assert perm == pytest.approx(_perm_s(ctx, 2 * moe.top_k))


def test_allgather_counts_its_group_ranks_in_the_nvlink_domain():
    """EP 4 x ETP 2 on 8-GPU H100 nodes: the 8-rank group sits in one domain, so 7/8 of the gathered rows cross
    NVLink; before, the fractions were EP's (3/4), as if the group had 4 ranks."""
    cfg, gpu, ctx, moe = _setup("allgather", gpu="h100", gpus=16, ep=4, etp=2)
    d, c, _ = ep_kernels(ctx, moe)
    want = ctx.tokens * 8 * _row_bytes(cfg) * (7 / 8) / (gpu.nvlink_bw_bytes_per_s * CAL.a2a_eff["allgather"])
    assert d == pytest.approx(want) and c == pytest.approx(want)


@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather"])
def test_etp1_is_as_before(dispatcher):
    """ETP 1: no expert-TP collectives, the dispatch direction's permute passes of top-k rows (alltoall's permute
    and sort, allgather's permute: timing.moe.permute_pass_rows), the EP group's fractions."""
    cfg, gpu, ctx, moe = _setup(dispatcher, gpu="h100", gpus=32, ep=16)
    assert alltoall_expert_tp_s(ctx, moe) == 0.0
    d, c, perm = ep_kernels(ctx, moe)
    assert perm == pytest.approx(_perm_s(ctx, (2 if dispatcher == "alltoall" else 1) * moe.top_k))
    rows = ctx.tokens * (16 if dispatcher == "allgather" else moe.top_k) * _row_bytes(cfg)
    nv = gpu.nvlink_bw_bytes_per_s * CAL.a2a_eff[dispatcher]
    so = gpu.scaleout_bw_bytes_per_s * CAL.a2a_scaleout_eff[dispatcher]
    assert d == pytest.approx(rows * 7 / 16 / nv + rows * 8 / 16 / so)


def test_the_allgather_combine_runs_in_the_router_dtype():
    """MoEAllGatherTokenDispatcher.token_combine reduce-scatters ``hidden_states.to(self.local_probs.dtype)``: fp32
    router logits double the combine's bytes, not the dispatch's (before, both were costed in BF16)."""
    cfg, gpu, ctx, moe = _setup("allgather", ep=8, etp=1, tp=1)
    d, c, _ = ep_kernels(ctx, moe)
    fp32 = cfg.with_(moe_router_dtype="fp32")
    d32, c32, _ = ep_kernels(make_ctx(fp32, gpu, CAL), moe)
    assert c == pytest.approx(d) and d32 == pytest.approx(d) and c32 == pytest.approx(2 * c)
