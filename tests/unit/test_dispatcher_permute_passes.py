"""The dispatchers' permute passes on one basis (moeplan.engine.timing.moe.permute_pass_rows): the rows each
dispatcher's permute / sort_chunks_by_idxs calls move in its dispatch and its combine, as Megatron-Core's
token_dispatcher.py (core_v0.16 .. 0.19) runs them; ep_kernels costs the dispatch direction's for every dispatcher."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan import api
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.moe import ep_kernels, permute_pass_rows
from moeplan.models.spec import MoE

CAL = DEFAULT_CALIBRATION


def _setup(model: str, dispatcher: str, **kw):
    base = dict(gpu="h100", gpus=64, seq_len=4096, gbs=512, mbs=1, tp=2)
    base.update(kw)
    cfg, gpu = api.build_config(model, dispatcher=dispatcher, **base)
    moe = next(layer.mlp for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
    return cfg, gpu, make_ctx(cfg, gpu, CAL), moe


def _perm_s(ctx, rows_per_token: float) -> float:
    """Read + write of ``rows_per_token`` hidden rows per local token at the calibrated HBM rate."""
    hbm = ctx.gpu.hbm_bw_bytes_per_s * CAL.hbm_eff
    return 2 * ctx.tokens * rows_per_token * ctx.cfg.model.hidden * BF16_BYTES / hbm


def test_each_dispatcher_counts_its_calls_per_direction():
    """Qwen3-30B-A3B (128 experts, top-8) at EP 8 x ETP 2: alltoall permutes top-k rows and sorts the ETP x top-k
    gathered ones, then unsorts and unpermutes them; allgather permutes / unpermutes the ETP x top-k rows of its
    experts; DeepEP (and NCCL EP on its kernels) the ETP x top-k copies it received; HybridEP's kernels do it."""
    cfg, *_ = _setup("qwen3-30b-a3b", "alltoall", ep=8, etp=2)
    par = cfg.parallel
    moe = cfg.model.first_moe
    assert permute_pass_rows("alltoall", moe, par) == (8 + 16, 16 + 8)
    assert permute_pass_rows("allgather", moe, par) == (16, 16)
    assert permute_pass_rows("deepep", moe, par) == (16, 16)
    assert permute_pass_rows("hybridep", moe, par) == (0, 0)


def test_allgather_is_costed_on_the_dispatch_basis_as_alltoall():
    """ep_kernels charges the dispatch direction's passes for every dispatcher: allgather's permute of its ETP x
    top-k rows (2 x 8 at ETP 2), as alltoall's permute + sort (8 + 16); before, allgather counted its unpermute too
    (2 x ETP x top-k) where alltoall and DeepEP count their dispatch side alone."""
    *_, ctx, moe = _setup("qwen3-30b-a3b", "allgather", ep=8, etp=2)
    assert ep_kernels(ctx, moe)[2] == pytest.approx(_perm_s(ctx, 16))
    *_, ctx_a, _ = _setup("qwen3-30b-a3b", "alltoall", ep=8, etp=1)
    *_, ctx_g, _ = _setup("qwen3-30b-a3b", "allgather", ep=8, etp=1)
    assert ep_kernels(ctx_g, moe)[2] == pytest.approx(_perm_s(ctx_g, 8))
    assert ep_kernels(ctx_a, moe)[2] == pytest.approx(_perm_s(ctx_a, 16))  # ETP 1: alltoall unchanged


@pytest.mark.parametrize("etp", [1, 2])
def test_alltoall_does_not_sort_one_local_expert(etp):
    """Mixtral-8x7B (8 experts, top-2) at EP 8: one local expert, so dispatch_postprocess / combine_preprocess skip
    sort_chunks_by_idxs (``if self.num_local_experts > 1``): the permute and unpermute of the top-k rows alone, at
    ETP 2 too (the gathered rows are all that expert's). At EP 4 (two local experts) the sort is back. Before, the
    sort of ETP x top-k rows was costed with one local expert too."""
    cfg, _, ctx, moe = _setup("mixtral-8x7b", "alltoall", ep=8, etp=etp, gpus=64 * etp)
    assert moe.num_experts // cfg.parallel.ep == 1
    assert permute_pass_rows("alltoall", moe, cfg.parallel) == (2, 2)
    assert permute_pass_rows("alltoall", moe, replace(cfg.parallel, ep=4)) == (2 + 2 * etp, 2 * etp + 2)
    assert permute_pass_rows("deepep", moe, cfg.parallel) == (2 * etp, 2 * etp)  # its permute is not guarded
    if etp == 1:
        assert ep_kernels(ctx, moe)[2] == pytest.approx(_perm_s(ctx, 2))
