"""HybridEP's fixed work per (token, destination rank) copy (timing.moe.hybridep_copy_extra_s): narrow rows pay what
the benchmark's 14 KB rows amortise; other backends and rows at least as wide as the benchmark's pay nothing."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.moe import (HYBRIDEP_BENCH_ROW_BYTES, ep_kernels, expected_ranks_hit,
                                       hybridep_copy_extra_s)

GB300_EP64 = dict(gpu="gb300", gpus=64, seq_len=8192, gbs=512, mbs=1, tp=1, pp=1, ep=64, precision="mxfp8",
                  dispatcher="hybridep", mtp_layers=2, mcore_version="0.19")


def test_only_hybridep_rows_narrower_than_the_benchmark_pay():
    assert HYBRIDEP_BENCH_ROW_BYTES == 7168 * 2  # docs/README_Hybrid-EP.md: hidden 7168, BF16
    assert hybridep_copy_extra_s(CAL, "deepep", 64, 2048) == 0.0
    assert hybridep_copy_extra_s(CAL, "hybridep", 64, HYBRIDEP_BENCH_ROW_BYTES) == 0.0
    assert hybridep_copy_extra_s(CAL, "hybridep", 64, 2 * 7168 + 2048) == 0.0
    # LatentMoE's 1,024-wide BF16 rows pay 6/7 of the fixed part, per regime
    assert hybridep_copy_extra_s(CAL, "hybridep", 64, 2048) == pytest.approx(CAL.hybridep_copy_s["mnnvl"] * 6 / 7)
    assert hybridep_copy_extra_s(CAL, "hybridep", 8, 2048) == pytest.approx(CAL.hybridep_copy_s["nvl8"] * 6 / 7)


def test_nemotron_ep64_dispatch_pays_it_per_received_copy():
    cfg, gpu = api.build_config("nemotron-3-super-120b", **GB300_EP64)
    moe = next(layer.mlp for layer in cfg.model.layers if layer.is_moe)
    off = CAL.with_overrides({"hybridep_copy_s": {"mnnvl": 1e-18}})
    d_on, c_on, _ = ep_kernels(make_ctx(cfg, gpu, CAL), moe)
    d_off, c_off, _ = ep_kernels(make_ctx(cfg, gpu, off), moe)
    copies = 8192 * expected_ranks_hit(moe, 64)  # ~19 of 64 ranks a token at 8 local experts of 512, top-22
    assert 18.5 < copies / 8192 < 19.5
    extra = copies * CAL.hybridep_copy_s["mnnvl"] * 6 / 7
    assert d_on - d_off == pytest.approx(extra, rel=1e-6) and c_on - c_off == pytest.approx(extra, rel=1e-6)
