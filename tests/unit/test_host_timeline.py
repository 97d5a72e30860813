"""engine.timing.host: a MoE layer takes at least the host time to issue it eagerly, max(host, GPU) per layer and
micro-batch, with the EFA per-call waits (timing.moe.ep_proxy_call_s) outside the max."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.host import ep_wait_s, host_bound_s, host_passes, layer_host_s
from moeplan.engine.timing.layer import launch_share, layer_time
from moeplan.models.spec import MoE

OFF = DEFAULT_CALIBRATION.with_overrides({"host_layer_pass_s": 1e-15})

# N31's EP16 PP4 layout on p6-b300 (tests/measured_variants.py: TP8, sequence parallel, GBS 256, NCCL all-to-all)
N31 = dict(gpu="b300-efa", gpus=64, seq_len=4096, gbs=256, tp=8, pp=4, ep=16, dispatcher="alltoall",
           recompute="selective:core_attn")


def _moe_layer(cfg, gpu, cal):
    ctx = make_ctx(cfg, gpu, cal)
    layer = next(la for la in cfg.model.layers if isinstance(la.mlp, MoE))
    return ctx, layer


@pytest.mark.parametrize("mbs, bound", [(1, True), (4, False)])
def test_small_layer_takes_the_host_time(mbs, bound):
    """At MBS 1 N31's layer finishes its kernels before the host has issued them: the layer takes the host time plus
    its EFA call waits; at MBS 4 the GPU work is longer and the host time hides under it."""
    cfg, gpu = api.build_config("qwen3-235b-a22b", mbs=mbs, **N31)
    ctx, layer = _moe_layer(cfg, gpu, DEFAULT_CALIBRATION)
    share = launch_share(layer, cfg)
    host = layer_host_s(ctx, layer, share)
    assert host == pytest.approx(DEFAULT_CALIBRATION.host_layer_pass_s * 2 * share)
    total = sum(vars(layer_time(ctx, layer)).values())
    off_ctx, off_layer = _moe_layer(cfg, gpu, OFF)
    gpu_total = sum(vars(layer_time(off_ctx, off_layer)).values())
    if bound:
        assert total == pytest.approx(host + ep_wait_s(ctx, layer), rel=1e-9)
        assert total > 1.5 * gpu_total
    else:
        assert total == pytest.approx(gpu_total, rel=1e-12)


def test_full_recompute_issues_the_forward_again():
    cfg, gpu = api.build_config("qwen3-235b-a22b", mbs=1, **{**N31, "recompute": "full"})
    ctx, _ = _moe_layer(cfg, gpu, DEFAULT_CALIBRATION)
    assert host_passes(ctx) == 3.0
    cfg, gpu = api.build_config("qwen3-235b-a22b", mbs=1, **N31)
    ctx, _ = _moe_layer(cfg, gpu, DEFAULT_CALIBRATION)
    assert host_passes(ctx) == 2.0


def test_no_floor_without_moe_or_with_gpu_work_beyond_it():
    cfg, gpu = api.build_config("qwen3-235b-a22b", mbs=1, **N31)
    ctx, layer = _moe_layer(cfg, gpu, DEFAULT_CALIBRATION)
    long_gpu = {"gemm": 1.0}
    assert host_bound_s(ctx, layer, long_gpu, 1.0) == 0.0
    short_gpu = {"gemm": 1e-4}
    expected = DEFAULT_CALIBRATION.host_layer_pass_s * 2 - (1e-4 - ep_wait_s(ctx, layer))
    assert host_bound_s(ctx, layer, short_gpu, 1.0) == pytest.approx(expected)
    assert host_bound_s(ctx, layer, short_gpu, 0.0) == 0.0  # every launch in a CUDA graph


def test_no_ep_wait_inside_one_node():
    """The EFA per-call waits only where EP spans nodes over a fabric without GPU-initiated RDMA."""
    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=8, seq_len=4096, gbs=64, mbs=1, tp=1, ep=8,
                                dispatcher="alltoall")
    ctx, layer = _moe_layer(cfg, gpu, DEFAULT_CALIBRATION)
    assert ep_wait_s(ctx, layer) == 0.0
