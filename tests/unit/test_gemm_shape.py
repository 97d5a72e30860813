"""GEMM shape factors (timing._gemm_time): the per-output-element epilogue against the main loop."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.flops import Gemm
from moeplan.hardware import load_gpu
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.gemm import gemm_time as _gemm_time, gemm_k_half


def test_k_half_grows_with_the_sm_matmul_rate():
    """The epilogue (load/store of C, main_grad accumulate) takes the same time per output element whatever
    the tensor cores do, so the depth at half rate scales with the per-SM matmul rate (catalog MAMF / SMs):
    GB200 MXFP8 (3,615.6e12 / 148) is ~4.1x H100 BF16 (794.5e12 / 132); H100 FP8 ~1.8x."""
    cal = DEFAULT_CALIBRATION
    h100, gb200 = load_gpu("h100"), load_gpu("gb200")
    base = gemm_k_half(h100.gemm_bf16_achieved_flops, h100.sms, cal)
    assert gemm_k_half(gb200.gemm_fp8_achieved_flops, gb200.sms, cal) / base == pytest.approx(
        (3615.6e12 / 148) / (794.5e12 / 132))
    assert gemm_k_half(h100.gemm_fp8_achieved_flops, h100.sms, cal) / base == pytest.approx(1402.6 / 794.5)


@pytest.mark.xfail(strict=True, reason="the fit takes gemm_epilogue_s to 2.2e-10 (k_half on H100 BF16 ~680, source "
                   "value 128): the one global knob that slows small-K GEMMs stands in for costs moeplan lacks. "
                   "Located (benchmarks/epilogue_pull.py): with it pinned at its source value, 95% of what pulls it "
                   "up are the HybridEP rows, ~94% Blackwell (GB200 49%, GB300 26%, B200 19%; MXFP8 / NVFP4 ~78%); "
                   "measured GEMMs imply 4.7e-11 (batched H100) to 1.06e-10 (single B200 BF16 launches; "
                   "tests/unit/test_gemm_depth_tables.py), so it is not a GEMM property: docs/calibration.md known "
                   "gaps")
def test_k_half_is_a_few_k_steps_on_h100_bf16():
    base = gemm_k_half(load_gpu("h100").gemm_bf16_achieved_flops, load_gpu("h100").sms, DEFAULT_CALIBRATION)
    assert 50 < base < 500  # a few 64-deep K-steps on H100 BF16


def _tflops(model: str, gpu: str, precision: str, k: int, n: int) -> float:
    cfg, spec = api.build_config(model, gpu=gpu, gpus=8, seq_len=4096, gbs=64, precision=precision)
    ctx = make_ctx(cfg, spec, DEFAULT_CALIBRATION)
    t = _gemm_time(ctx, Gemm("x", "attn", k, n, split=""), 0.0, 1)[0]
    return 3 * 2 * ctx.tokens * k * n / t / 1e12


def test_shallow_gemms_lose_more_on_faster_tensor_cores():
    """A hidden-2,048 projection to 512 (Qwen3-Next's shapes) against a 7,168 x 7,168 one: the share of the
    best rate it keeps is lower on GB200 MXFP8 than on H100 BF16, by at least 10% (how much more depends on the
    fitted gemm_epilogue_s: ~15% at 5.7e-11 s)."""
    kept = {}
    for gpu, prec in (("h100", "bf16"), ("gb200", "mxfp8")):
        kept[gpu] = (_tflops("qwen3-next-80b-a3b", gpu, prec, 2048, 512)
                     / _tflops("qwen3-next-80b-a3b", gpu, prec, 7168, 7168))
    assert kept["gb200"] < 0.9 * kept["h100"] < kept["h100"] < 1
