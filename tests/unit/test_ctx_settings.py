"""The settings of how a module is timed outside a training step (timing.context.Ctx.wgrad_accumulate /
router_pads_experts: the MoE-layer benchmark N38 / N39 turns both off) survive every context derived from a run's:
the BF16 layers' context (timing.step._bf16_ctx) is made by context.derived_ctx, which passes them on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.quant_map import bf16_config
from moeplan.engine.timing.step import _bf16_ctx

OFF = dict(wgrad_accumulate=False, router_pads_experts=False)


def _run():
    return api.build_config("qwen3-30b-a3b", gpu="h100", gpus=8, seq_len=4096, gbs=8, mbs=1, ep=8,
                            dispatcher="alltoall", precision="fp8", bf16_end_layers=2)


def test_the_bf16_layers_context_keeps_the_modules_settings():
    cfg, gpu = _run()
    ctx = replace(make_ctx(cfg, gpu, CAL), **OFF)
    bf16 = _bf16_ctx(ctx)
    assert bf16.cfg.precision == "bf16"
    assert (bf16.wgrad_accumulate, bf16.router_pads_experts) == (False, False)
    layer = cfg.model.layers[-1]
    want = layer_time(make_ctx(bf16_config(cfg), gpu, CAL, **OFF), layer).total()
    assert layer_time(bf16, layer).total() == pytest.approx(want)
    # the settings matter for the layer (the weight gradients written once, not accumulated): the check can fail.
    # The main grad's read-modify-write is epilogue traffic, which shows only beyond the GEMM's compute
    # (timing.gemm.gemm_call_s): at a slow HBM it does
    slow = CAL.with_overrides({"hbm_eff": 0.02})
    off = layer_time(make_ctx(bf16_config(cfg), gpu, slow, **OFF), layer).total()
    assert layer_time(make_ctx(bf16_config(cfg), gpu, slow), layer).total() > off


def test_make_ctx_takes_the_settings_and_derived_ctx_passes_them_on():
    from moeplan.engine.timing.context import derived_ctx

    cfg, gpu = _run()
    assert (make_ctx(cfg, gpu, CAL).wgrad_accumulate, make_ctx(cfg, gpu, CAL).router_pads_experts) == (True, True)
    ctx = make_ctx(cfg, gpu, CAL, **OFF)
    for c in (ctx, derived_ctx(ctx, bf16_config(cfg)), derived_ctx(ctx, cfg)):
        assert (c.wgrad_accumulate, c.router_pads_experts) == (False, False)
