"""Time the step pays for fine-grained activation offload: D2H / H2D over the host link, partly hidden behind
compute (moeplan.engine.timing.offload_act)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.activations import run_offloaded_layer_bytes
from moeplan.engine.memory import _layer_mb_bytes
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import TIME_ITEMS, make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.offload_act import host_link_bytes_per_s, offload_copy_exposed_s
from moeplan.engine.timing.step import estimate_time
from moeplan.hardware import load_gpu

HEAVY = "core_attn,attn_proj,expert_fc1,moe_act"
RUN = dict(gpus=16, seq_len=4096, gbs=256, mbs=2, tp=1, pp=1, ep=8, dispatcher="alltoall")


def _est(gpu: str, **kw):
    cfg, g = api.build_config("qwen3-30b-a3b", gpu=gpu, **(RUN | kw))
    return cfg, g, estimate_time(cfg, g)


def test_copy_exposure_formula():
    """D2H beyond the layer's whole compute, H2D beyond its backward; nothing when both fit."""
    assert offload_copy_exposed_s(0.0, 1e9, 1e-3, 1e-3) == 0.0
    assert offload_copy_exposed_s(1e6, 1e9, 3e-3, 2e-3) == 0.0  # 1 ms copies under 3 ms / 2 ms windows
    # 5 ms copies each way: 2 ms beyond the 3 ms layer, 3 ms beyond the 2 ms backward
    assert offload_copy_exposed_s(5e6, 1e9, 3e-3, 2e-3) == pytest.approx(5e-3)


def test_host_link_rate_is_the_catalogs():
    """The measured rate where the catalog has one (H200: nvbandwidth 55.1 GB/s), else the nominal direction."""
    assert host_link_bytes_per_s(load_gpu("h200")) == pytest.approx(55.1e9)
    assert host_link_bytes_per_s(load_gpu("h100")) == pytest.approx(64.0e9)
    assert host_link_bytes_per_s(load_gpu("gb200")) == pytest.approx(225.0e9)


def test_activation_offload_costs_time_over_pcie_not_over_c2c():
    """Offloading attention and expert activations of Qwen3-30B-A3B at MBS 2: over PCIe (H100, 64 GB/s) the reloads
    outlast the backward they are issued ahead of and the step pays for them; over NVLink-C2C (GB200, 225 GB/s per
    GPU) they hide. Without offload_modules nothing is charged; the item is one of the step's time items."""
    assert "act_offload" in TIME_ITEMS
    _, _, base = _est("h100")
    cfg, gpu, off = _est("h100", offload_modules=HEAVY)
    assert base.breakdown_s["act_offload"] == 0.0
    assert off.breakdown_s["act_offload"] > 0.01 * off.step_time_s
    assert off.step_time_s == pytest.approx(base.step_time_s + off.breakdown_s["act_offload"], rel=1e-6)
    _, _, c2c = _est("gb200", offload_modules=HEAVY)
    assert c2c.breakdown_s["act_offload"] == 0.0


def test_offload_time_reads_the_memory_models_bytes():
    """The copies timed are the bytes the memory model moves to the host, over the catalog's host link, and what
    the step pays for them is bounded by where they hide: the D2H copy behind at most the layer's whole compute, the
    H2D reload behind the backward it is issued ahead of, longer than the forward (dgrad and wgrad against fprop)
    and shorter than the layer. Qwen3-30B-A3B's heavy groups at MBS 2 over H100's PCIe: ~10 ms of copies each way
    against a ~14 ms layer, so only the reload shows; half the groups offloaded move half the bytes and hide."""
    cfg, gpu, _ = _est("h100", offload_modules=HEAVY)
    ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
    layer = cfg.model.layers[0]
    lt = layer_time(ctx, layer)
    moved = run_offloaded_layer_bytes(cfg, layer, ctx.tokens)
    assert moved > 0
    assert moved == pytest.approx(_layer_mb_bytes(cfg, layer, ctx.tokens, frozenset())[1])  # the memory model's
    copy_s = moved / host_link_bytes_per_s(gpu)
    layer_s = lt.total() - lt.act_offload
    assert layer_s / 2 < copy_s < layer_s  # the case at hand: the reload outlasts a half-layer window, not a layer
    fewest = 2 * max(0.0, copy_s - layer_s)  # both directions behind the whole layer: 0 here
    most = max(0.0, copy_s - layer_s) + (copy_s - layer_s / 2)  # the reload behind a backward over half the layer
    assert fewest < lt.act_offload < most
    # a fraction of the groups offloaded moves that share of the bytes, and those copies hide
    half, _, half_time = _est("h100", offload_modules=HEAVY, activation_offload_fraction=0.5, mcore_version="0.19")
    assert run_offloaded_layer_bytes(half, layer, ctx.tokens) == pytest.approx(moved / 2)
    assert layer_time(make_ctx(half, gpu, DEFAULT_CALIBRATION), layer).act_offload == 0.0
    assert half_time.breakdown_s["act_offload"] == 0.0


def test_memory_and_timing_read_one_offload_split():
    """One rule (activations.offload_split_bytes) splits a layer's offload groups into what stays and what leaves:
    the memory model's offloaded bytes are the timing model's copies under selective recompute and a fraction too,
    and the fraction moves bytes between kept and offloaded without changing their sum."""
    from moeplan.engine.activations import offload_split_bytes, run_layer_activation

    kw = dict(offload_modules=HEAVY, recompute="selective:layernorm", mcore_version="0.19")
    sums = []
    for frac in (1.0, 0.5):
        cfg, gpu, _ = _est("h100", activation_offload_fraction=frac, **kw)
        tokens = make_ctx(cfg, gpu, DEFAULT_CALIBRATION).tokens
        modules = cfg.recompute.modules
        for layer in cfg.model.distinct_layers:
            kept, off = _layer_mb_bytes(cfg, layer, tokens, modules)
            assert off == pytest.approx(run_offloaded_layer_bytes(cfg, layer, tokens))
            stays, leaves = offload_split_bytes(cfg, run_layer_activation(cfg, layer, modules), layer, tokens)
            assert leaves == pytest.approx(off) and stays == pytest.approx(off * (1 - frac) / frac)
        sums.append(sum(sum(_layer_mb_bytes(cfg, la, tokens, modules)) for la in cfg.model.distinct_layers))
    assert sums[0] == pytest.approx(sums[1])
