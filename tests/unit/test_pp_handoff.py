"""A fixed cost per pipeline hand-off beside its bytes (moeplan.engine.timing.pipeline.pp_comm_s)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.pipeline import pp_comm_s
from moeplan.engine.timing.step import estimate_time


def test_each_pipeline_handoff_pays_a_fixed_latency():
    """pp_comm_s: per micro-batch 2 x VPP hand-offs, each its bytes over the link plus pp_handoff_s (NCCL send /
    receive latency and batch_p2p_sync's device synchronize at VPP 1); at VPP 1 it is exposed in full."""
    cal0 = DEFAULT_CALIBRATION.with_overrides({"pp_handoff_s": 1e-12})
    cal1 = DEFAULT_CALIBRATION.with_overrides({"pp_handoff_s": 1e-4})
    for vpp in (1, 4):
        cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, mbs=1, tp=1,
                                    pp=4, vpp=vpp, ep=4, dispatcher="alltoall")
        d = pp_comm_s(make_ctx(cfg, gpu, cal1)) - pp_comm_s(make_ctx(cfg, gpu, cal0))
        assert d == pytest.approx(2 * vpp * 1e-4, rel=1e-6)
    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, mbs=1, tp=1, pp=4,
                                ep=4, dispatcher="alltoall")
    t0, t1 = estimate_time(cfg, gpu, cal0), estimate_time(cfg, gpu, cal1)
    m = t0.microbatches
    assert t1.breakdown_s["pp_comm"] - t0.breakdown_s["pp_comm"] == pytest.approx(m * 2 * 1e-4, rel=1e-6)
