"""FP8 costs beside the GEMM itself, per recipe (issue 31, item 4, second bullet): the quantize passes each GEMM input
pays (current scaling's extra amax read), blockwise-scaled GEMMs on Hopper, the routed experts' quantization padding
copies, and a weight gradient written once (no fp32 main_grad) where nothing accumulates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan import api
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.flops import layer_gemms
from moeplan.engine.latent_moe import expert_width
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import BLOCKWISE_FP8_GEMM_SHARE, gemm_rate, make_ctx
from moeplan.engine.timing.gemm import QUANTIZE_BYTES_PER_ELEM, gemm_time
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import expert_quant_padded
from moeplan.hardware import load_gpu

MODEL = "qwen3-30b-a3b"
RUN = dict(gpu="h100", gpus=8, seq_len=4096, gbs=8, mbs=1, ep=8)


def _ctx(**kw):
    cfg, gpu = api.build_config(MODEL, **{**RUN, **kw})
    return cfg, make_ctx(cfg, gpu, DEFAULT_CALIBRATION)


def _expert_gemm(cfg):
    layer = next(x for x in cfg.model.layers if x.is_moe)
    return layer, next(g for g in layer_gemms(layer, cfg.model.hidden) if g.kind == "expert")


def test_current_scaling_reads_its_input_twice():
    """Float8CurrentScaling runs nvte_compute_amax over each input before the cast (one more bf16 read than delayed
    scaling's fused cast-transpose): its quantize seconds are 6 / 4 of delayed scaling's, for the same GEMM."""
    assert QUANTIZE_BYTES_PER_ELEM["fp8-cs"] == QUANTIZE_BYTES_PER_ELEM["fp8-ds"] + BF16_BYTES
    casts = {}
    for p in ("fp8-cs", "fp8-ds", "fp8"):
        cfg, ctx = _ctx(precision=p)
        layer, g = _expert_gemm(cfg)
        casts[p] = gemm_time(ctx, g, ctx.tokens * layer.mlp.top_k, layer.mlp.num_experts / 8)[1]
    assert casts["fp8-cs"] / casts["fp8-ds"] == pytest.approx(6 / 4)
    # blockwise: one pass like delayed scaling, plus an fp32 scale per 128 elements each way
    assert casts["fp8"] / casts["fp8-ds"] == pytest.approx((4 + 2 * 4 / 128) / 4)


def test_blockwise_fp8_gemm_rate_on_hopper_only():
    """Blockwise FP8 (moeplan's "fp8") on Hopper runs cuBLASLt's block-scaled GEMMs, at BLOCKWISE_FP8_GEMM_SHARE of the
    per-tensor FP8 rate (TE's GEMM profiling guide, H200); per-tensor recipes keep the FP8 rate, and Blackwell (MXFP8
    tensor cores, which TE runs the block recipe on) keeps its own."""
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    assert BLOCKWISE_FP8_GEMM_SHARE == pytest.approx(16.79 / (22.88 - (18.98 - 16.79)), abs=0.005)
    assert gemm_rate(h100, "fp8") == pytest.approx(h100.gemm_fp8_achieved_flops * BLOCKWISE_FP8_GEMM_SHARE)
    assert gemm_rate(h100, "fp8-cs") == pytest.approx(h100.gemm_fp8_achieved_flops)
    assert gemm_rate(h100, "fp8-ds") == gemm_rate(h100, "fp8-cs")
    assert gemm_rate(b200, "fp8") == gemm_rate(b200, "fp8-cs")


@pytest.mark.parametrize("dispatcher,version,padded", [
    ("alltoall", "0.16", True), ("hybridep", "0.16", True), ("deepep", "0.16", True),
    ("alltoall", "0.18", True), ("hybridep", "0.18", False), ("deepep", "0.18", True)])
def test_expert_padding_copies_by_release(dispatcher, version, padded):
    """Without router padding TEGroupedMLP copies each quantized run's expert rows (Fp8Padding) before core_v0.18; from
    0.18 HybridEP / NCCL EP pad inside the dispatch (skip_routed_expert_padding); BF16 never pads, and a router that
    pads the counts (the quantized recipes' moe_router_padding_for_quantization, moeplan's assumption) leaves nothing
    to copy."""
    cfg, _ = api.build_config(MODEL, **RUN, precision="fp8", dispatcher=dispatcher, mcore_version=version)
    assert expert_quant_padded(cfg, router_pads=False) is padded
    assert not expert_quant_padded(cfg)
    cfg, _ = api.build_config(MODEL, **RUN, precision="bf16", dispatcher=dispatcher, mcore_version=version)
    assert not expert_quant_padded(cfg, router_pads=False)


def test_expert_padding_costs_four_row_copies_each_way():
    """Without router padding, the padded (0.16) and the unpadded (0.18) hybridep FP8 layer differ, in element-wise
    seconds, by the padding copies alone: forward pad + unpad and backward the same, each a read and a write of one bf16
    row of the experts' input width."""
    times = {}
    for version in ("0.16", "0.18"):
        cfg, ctx = _ctx(precision="fp8", dispatcher="hybridep", mcore_version=version)
        layer = next(x for x in cfg.model.layers if x.is_moe)
        assert layer_time(ctx, layer).elementwise == layer_time(replace(ctx, cache={}), layer).elementwise
        times[version] = layer_time(replace(ctx, cache={}, router_pads_experts=False), layer).elementwise
        if version == "0.16":  # the router's padding leaves nothing to copy
            assert layer_time(ctx, layer).elementwise < times[version]
    rows = ctx.tokens * layer.mlp.top_k
    hbm = ctx.gpu.hbm_bw_bytes_per_s * DEFAULT_CALIBRATION.hbm_eff
    pad_s = 2 * 2 * 2 * expert_width(layer.mlp, cfg.model.hidden) * BF16_BYTES * rows / hbm  # (fwd, bwd) x 2 copies x (r, w)
    assert times["0.16"] - times["0.18"] == pytest.approx(pad_s, rel=1e-6)


def test_wgrad_written_once_without_main_grad():
    """Outside Megatron's DDP wrapper (the MoE-layer benchmark) the weight gradient is written once in bf16 instead of
    read and written in fp32 main_grad: the expert GEMM saves the weights' elements x (8 - 2) bytes of HBM time where
    that epilogue traffic outlasts the GEMM's compute (at a slow HBM: timing.gemm.gemm_call_s), at most that where the
    compute hides part of it (the calibrated HBM)."""
    cfg, ctx = _ctx(precision="bf16")
    layer, g = _expert_gemm(cfg)
    local = layer.mlp.num_experts / 8
    rows = ctx.tokens * layer.mlp.top_k
    cfg2, _ = api.build_config(MODEL, **RUN, precision="bf16", grad_fp32=False)
    for cal, exposed in ((DEFAULT_CALIBRATION.with_overrides({"hbm_eff": 0.02}), True), (DEFAULT_CALIBRATION, False)):
        accum = gemm_time(make_ctx(cfg, ctx.gpu, cal), g, rows, local)
        once = gemm_time(replace(make_ctx(cfg2, ctx.gpu, cal), wgrad_accumulate=False), g, rows, local)
        saved_s = g.k * g.n * local * (2 * 4 - 2) / (ctx.gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
        for total, wgrad in ((accum[0], accum[2]), (once[0], once[2])):
            assert total > wgrad > 0
        if exposed:
            assert accum[0] - once[0] == pytest.approx(saved_s, rel=1e-9)
            assert accum[2] - once[2] == pytest.approx(saved_s, rel=1e-9)
        else:
            assert 0 <= accum[2] - once[2] <= saved_s * (1 + 1e-9)
