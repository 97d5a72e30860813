"""A Grace host (GPUs behind NVLink-C2C) runs the same PyTorch / Transformer Engine host work slower than an x86 host
(timing.context.GRACE_HOST_TIME_SCALE, TransformerEngine issue #2053): the host-time constants the fit reads as x86
time are scaled by it on GB200 / GB300 and nowhere else."""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
from moeplan.engine.timing.context import GRACE_HOST_TIME_SCALE, grace_host, host_time_scale, make_ctx
from moeplan.engine.timing.gdn import gdn_host
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import expert_host_s

# Qwen3-30B-A3B on 16 GB200, EP16 MBS 4, HybridEP (N01's recipes)
N01 = dict(gpu="gb200", gpus=16, seq_len=4096, gbs=512, mbs=4, tp=1, pp=1, ep=16, dispatcher="hybridep")


def _on_x86(gpu):
    """The same GPU behind PCIe (an x86 host): every other figure kept."""
    return dataclasses.replace(gpu, host_link="pcie5")


def test_scale_is_the_measured_cpu_time_ratio():
    """torch.nn.Linear forward, BF16, hidden 2,048, 8,192 tokens: 37.08 us of CPU on GB200, 13.48 us on H100 DGX."""
    assert GRACE_HOST_TIME_SCALE == pytest.approx(2.75, abs=0.01)
    for name, grace in (("gb200", True), ("gb300", True), ("b200", False), ("h100", False), ("b300", False)):
        gpu = api.build_config("qwen3-30b-a3b", gpu=name, gpus=8, seq_len=4096, gbs=64)[1]
        assert grace_host(gpu) is grace
        assert host_time_scale(gpu) == (GRACE_HOST_TIME_SCALE if grace else 1.0)
        assert gdn_host(gpu) == ("grace" if grace else "x86")


def test_eager_layer_launches_scale_with_the_host():
    """BF16 without CUDA graphs (N01's BF16 row): the layer's host launches cost GRACE_HOST_TIME_SCALE times on Grace
    what they cost the same GPU on an x86 host; nothing else in the layer moves."""
    cfg, gpu = api.build_config("qwen3-30b-a3b", precision="bf16", **N01)
    layer = cfg.model.layers[0]
    grace = layer_time(make_ctx(cfg, gpu, CAL), layer)
    x86 = layer_time(make_ctx(cfg, _on_x86(gpu), CAL), layer)
    assert x86.launch_overhead > 0
    assert grace.launch_overhead == pytest.approx(GRACE_HOST_TIME_SCALE * x86.launch_overhead)
    assert grace.total() - grace.launch_overhead == pytest.approx(x86.total() - x86.launch_overhead)


def test_expert_host_time_scales():
    fwd, bwd = expert_host_s(8, 1e5, "mxfp8", frozenset(), CAL)
    fwd_g, bwd_g = expert_host_s(8, 1e5, "mxfp8", frozenset(), CAL, host_scale=GRACE_HOST_TIME_SCALE)
    assert (fwd_g, bwd_g) == pytest.approx((GRACE_HOST_TIME_SCALE * fwd, GRACE_HOST_TIME_SCALE * bwd))
    assert expert_host_s(8, 1e5, "mxfp8", frozenset(), CAL, grouped=True, host_scale=2.0) == pytest.approx(
        tuple(2.0 * t for t in expert_host_s(8, 1e5, "mxfp8", frozenset(), CAL, grouped=True)))


def test_te_scoped_mxfp8_experts_exposed_on_grace_not_on_x86():
    """N01's TE-scoped MXFP8 recipe: on an x86 host the 8 local experts' per-expert launches hide behind their GEMMs
    (the post-sync window); on Grace they do not, so the layer's exposed host time grows by more than the scale
    alone gives the captured-share launches."""
    cfg, gpu = api.build_config("qwen3-30b-a3b", precision="mxfp8", cuda_graphs="attn,moe_router,moe_preprocess",
                                **N01)
    layer = cfg.model.layers[0]
    grace = layer_time(make_ctx(cfg, gpu, CAL), layer).launch_overhead
    x86 = layer_time(make_ctx(cfg, _on_x86(gpu), CAL), layer).launch_overhead
    assert grace > GRACE_HOST_TIME_SCALE * x86 * 1.5
