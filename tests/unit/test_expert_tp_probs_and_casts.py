"""The alltoall dispatcher with expert TP > 1, what its code runs beside the hidden rows (Megatron-Core
token_dispatcher.py MoEAlltoAllTokenDispatcher, core_v0.16 .. 0.19):
- ``dispatch_postprocess`` all-gathers the probs over the expert-TP group with the rows, one scalar per row in the
  probs' dtype (the router logits': moe_utils.py ``probs.type_as(logits)``);
- ``combine_preprocess`` casts the expert output to the probs' dtype before the reduce-scatter and the result back
  to BF16 (``reduce_scatter_to_sequence_parallel_region(hidden_states.to(self.probs.dtype), ...).to(...)``): two
  HBM passes where the probs are fp32 / fp64, none in BF16, and the fp32 copy is live beside the BF16 rows it casts.
Hand figures: Qwen3-30B-A3B (hidden 2,048, top-8, 128 experts), TP 2, 4K tokens, MBS 1: 2,048 tokens per GPU."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.memory import _moe_dispatch_transient, estimate_memory
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import busbw, make_ctx
from moeplan.engine.timing.moe import alltoall_expert_tp_cast_bytes, alltoall_expert_tp_s
from moeplan.models.spec import MoE

CAL = DEFAULT_CALIBRATION
TOKENS = 2048  # 4,096 x MBS 1 / TP 2


def _setup(model: str = "qwen3-30b-a3b", router: str = "none", **kw):
    base = dict(gpu="h100", gpus=64, seq_len=4096, gbs=512, mbs=1, tp=2, ep=8, etp=2, dispatcher="alltoall")
    base.update(kw)
    cfg, gpu = api.build_config(model, **base)
    cfg = cfg.with_(moe_router_dtype=router)
    moe = next(layer.mlp for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
    assert cfg.rows_factor == 1.0
    return cfg, gpu, make_ctx(cfg, gpu, CAL), moe


def test_the_probs_are_gathered_with_the_rows():
    """BF16 logits: the expert-TP collectives move the 2,048 x 8 rows of 2,048 x 2 B (all-gather and reduce-scatter)
    and the all-gather of their probs, 2,048 x 8 x 2 B, over the 2 ranks' ring (1 x the per-rank bytes); before,
    the probs' all-gather was not costed. fp32 logits: 4 B per prob."""
    cfg, gpu, ctx, moe = _setup()
    assert ctx.tokens == TOKENS
    bw = busbw(gpu, 2, 1, CAL)
    hidden_ring = TOKENS * 8 * 2048 * 2 / bw
    assert alltoall_expert_tp_s(ctx, moe) == pytest.approx(2 * hidden_ring + TOKENS * 8 * 2 / bw)
    fp32 = _setup(router="fp32")[2]
    hbm = gpu.hbm_bw_bytes_per_s * CAL.hbm_eff
    casts = TOKENS * (2 * 8 + 8) * 2048 * (2 + 4) / hbm
    assert alltoall_expert_tp_s(fp32, moe) == pytest.approx(3 * hidden_ring + TOKENS * 8 * 4 / bw + casts)


def test_the_casts_are_passes_only_where_the_probs_are_wider_than_bf16():
    """``.to(self.probs.dtype)`` reads the ETP x top-k BF16 rows and writes them in the probs' dtype; the
    reduce-scatter's top-k rows go back to BF16: (2 + 1) x 8 rows x 2,048 x (2 + 4) B per token at ETP 2 with fp32
    logits, x (2 + 8) with fp64; nothing with BF16 probs (``.to`` of the same dtype returns its input) or at ETP 1."""
    moe = _setup()[3]
    assert alltoall_expert_tp_cast_bytes(moe, 2048, 2, 4) == 3 * 8 * 2048 * 6 == 294_912
    assert alltoall_expert_tp_cast_bytes(moe, 2048, 4, 8) == 5 * 8 * 2048 * 10
    assert alltoall_expert_tp_cast_bytes(moe, 2048, 2, 2) == 0.0
    assert alltoall_expert_tp_cast_bytes(moe, 2048, 1, 4) == 0.0


def test_the_fp32_combine_copy_lands_in_the_transient():
    """fp32 logits at ETP 2: at the reduce-scatter the 16 rows per token are live as the BF16 expert output, its
    unsort (16 local experts) and the fp32 copy (2 + 2 + 4 B), with the fp32 reduce-scatter output's 8 rows:
    2,048 x 2,048 x (16 x 8 + 8 x 4) = 671,088,640 B, above the two BF16 copies the dispatch holds
    (2 x 16 x 2,048 x 2,048 x 2 = 268,435,456 B). BF16 logits, or ETP 1: the two copies, as before."""
    cfg, gpu, *_ = _setup()
    fp32, *_ = _setup(router="fp32")
    assert _moe_dispatch_transient(cfg, TOKENS) == 268_435_456
    assert _moe_dispatch_transient(fp32, TOKENS) == 671_088_640
    one, *_ = _setup(etp=1, gpus=32)
    one32, *_ = _setup(etp=1, gpus=32, router="fp32")
    assert _moe_dispatch_transient(one32, TOKENS) == _moe_dispatch_transient(one, TOKENS) == 2 * 8 * 2048 * 2048 * 2
    # it lands in the estimate's transient peak: PP 2's first rank (no loss peak there) gains that difference beyond
    # what fp32 logits add at ETP 1 (the per-layer saved logits, the same at both ETPs)
    def gain(etp: int) -> float:
        runs = [_setup(router=r, etp=etp, gpus=32 * etp, pp=2)[0] for r in ("none", "fp32")]
        first = [estimate_memory(c, gpu.hbm_bytes, gpu.nvlink_domain).ranks[0].items["transient"] for c in runs]
        return first[1] - first[0]
    assert gain(2) - gain(1) == pytest.approx(671_088_640 - 268_435_456)


def test_one_local_expert_has_no_unsort_copy():
    """Mixtral-8x7B (hidden 4,096, top-2, 8 experts) at EP 8 x ETP 2: one local expert, no unsort
    (``if self.num_local_experts > 1``), so the fp32 copy sits beside the expert output alone: 2,048 x 4,096 x
    (4 x (2 + 4) + 2 x 4) = 268,435,456 B, over the dispatch's 2 x 4 x 2,048 x 4,096 x 2 = 134,217,728 B."""
    cfg, *_ = _setup("mixtral-8x7b", router="fp32", gpus=128)
    assert cfg.model.first_moe.num_experts // cfg.parallel.ep == 1
    assert _moe_dispatch_transient(cfg, TOKENS) == 268_435_456
