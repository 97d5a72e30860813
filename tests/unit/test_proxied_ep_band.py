"""Estimates whose EP crosses nodes over a fabric without GPU-initiated RDMA (AWS EFA: timing.moe.ep_host_proxied)
carry a band below them that reaches the fitted AWS campaigns' absolute level (calibration.yaml
proxied_ep_shortfall_log, written by benchmarks/calibrate.py): the fit takes those campaigns as ratios inside each,
so their level is not pinned (docs/calibration.md, known gaps), and the estimate says so."""

from __future__ import annotations

import math

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.moe import ep_host_proxied
from tests.measured_variants import n_variants

RUN = dict(gpus=64, seq_len=4096, gbs=256, mbs=4, tp=8, pp=4, ep=16)


def test_efa_ep_across_nodes_widens_the_band_below_and_says_so():
    efa = api.estimate("qwen3-30b-a3b", gpu="h100-efa", **RUN)
    ib = api.estimate("qwen3-30b-a3b", gpu="h100", **RUN)
    low, high = efa["tflops_range"]
    t = efa["tflops_per_gpu"]
    assert DEFAULT_CALIBRATION.proxied_ep_shortfall_log > DEFAULT_CALIBRATION.error_band_log
    assert low == pytest.approx(t * math.exp(-DEFAULT_CALIBRATION.proxied_ep_shortfall_log))
    assert high == pytest.approx(t * math.exp(DEFAULT_CALIBRATION.error_band_log))  # above: the fit's band
    assert "EFA" in efa["outside_fit_note"] and efa["outside_fit"] == []
    assert ib["outside_fit_note"] is None
    assert ib["tflops_range"][0] == pytest.approx(ib["tflops_per_gpu"] * math.exp(-DEFAULT_CALIBRATION.error_band_log))


def test_ep_inside_one_node_is_not_proxied():
    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100-efa", gpus=64, seq_len=4096, gbs=256, tp=1, pp=1, ep=8)
    assert not ep_host_proxied(cfg, gpu)
    assert api.estimate("qwen3-30b-a3b", gpu="h100-efa", gpus=64, seq_len=4096, gbs=256, tp=1, pp=1,
                        ep=8)["outside_fit_note"] is None
    dense, gpu = api.build_config("llama3-8b", gpu="h100-efa", gpus=64, seq_len=4096, gbs=256)
    assert not ep_host_proxied(dense, gpu)


def test_the_shipped_shortfall_is_the_campaigns_and_covers_every_fitted_row(calibrate_script):
    # the script computes it at the fitted constants, the data file keeps them to 4 digits: equal to the rounding
    assert calibrate_script.proxied_ep_shortfall(DEFAULT_CALIBRATION) == pytest.approx(
        DEFAULT_CALIBRATION.proxied_ep_shortfall_log, abs=2e-4)
    rows = [v for v in n_variants() if v.group in ("N31", "N32", "N33") and not v.extra["why"]]
    assert len(rows) >= 30
    for v in rows:
        low, high = api.estimate(v.model, **v.kwargs)["tflops_range"]
        assert low <= float(v.tflops), v.label
