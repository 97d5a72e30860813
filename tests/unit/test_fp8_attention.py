"""FP8 attention (Megatron's fp8_dot_product_attention) and the softmax exponential rate per architecture.

Sources: Megatron Bridge v0.6.0 perf_recipes (deepseek/gb300/deepseek_v3.py passes fp8_dot_product_attention=True to
its MXFP8 full-iteration helper, deepseek/gb200/deepseek_v3.py does not; qwen/common.py sets it); NVIDIA technical blog
"Making Softmax More Efficient with NVIDIA Blackwell Ultra" (GB300 doubles GB200's MUFU.EX2 rate: ~35% more FP8
attention forward throughput on DeepSeek-V3's MLA); the CUDA C++ Programming Guide's instruction throughputs and the
catalog's tensor-core peaks (Blackwell doubled the tensor cores per SM and clock over Hopper, not the SFU)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.engine.timing.attention import attention_rate, fused_attention_efficiency, softmax_exp_share
from moeplan.engine.timing.step import estimate_time
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.quant_map import bf16_config
from moeplan.hardware import load_gpu
from moeplan.megatron import export
from moeplan.megatron.to_run import run_config_from_settings
from tests.reference_runs import bridge_runs, estimate_kwargs

H100, GB200, GB300 = load_gpu("h100"), load_gpu("gb200"), load_gpu("gb300")


def test_softmax_exponential_costs_follow_tensor_cores_over_sfu():
    # Blackwell doubled the tensor cores per SM and clock, not the SFU; Blackwell Ultra doubled the SFU too
    assert softmax_exp_share(H100) == 1.0
    assert softmax_exp_share(GB200) == 2.0 and softmax_exp_share(load_gpu("b200")) == 2.0
    assert softmax_exp_share(GB300) == 1.0 and softmax_exp_share(load_gpu("b300")) == 1.0
    assert softmax_exp_share(None) == 1.0


def test_fp8_mla_forward_on_gb300_is_the_blogs_third_faster_than_gb200():
    """NVIDIA's Blackwell Ultra softmax blog: ~35% more FP8 forward throughput for DeepSeek-V3's MLA on GB300 (same
    tensor-core peak as GB200, twice the exponentials)."""
    fwd = {g.name: fused_attention_efficiency(192, 128, "cudnn_mla", gpu=g, fp8=True)[0] for g in (GB200, GB300)}
    assert fwd["gb300"] / fwd["gb200"] == pytest.approx(1.35, abs=0.05)
    # in BF16 the exponentials weigh less: a smaller gain
    bf16 = {g.name: fused_attention_efficiency(192, 128, "cudnn_mla", gpu=g)[0] for g in (GB200, GB300)}
    assert 1.0 < bf16["gb300"] / bf16["gb200"] < fwd["gb300"] / fwd["gb200"]


def test_fp8_attention_runs_the_matmuls_on_the_fp8_tensor_cores_only_in_cudnn_kernels():
    for kind, d in (("flash", 128), ("cudnn_mla", 192)):
        d_v = 128
        bf16 = fused_attention_efficiency(d, d_v, kind, gpu=GB200)
        fp8 = fused_attention_efficiency(d, d_v, kind, gpu=GB200, fp8=True)
        assert all(f > b for f, b in zip(fp8, bf16))
        assert all(f < 2 * b for f, b in zip(fp8, bf16))  # the exponentials stay at their rate
    # FlashAttention-2 has no FP8 path in TE (FusedAttention only)
    assert fused_attention_efficiency(256, 256, "flash2", gpu=GB200, fp8=True) == fused_attention_efficiency(
        256, 256, "flash2", gpu=GB200)


RUN = dict(gpu="gb200", gpus=256, seq_len=4096, gbs=4096, mbs=1, tp=1, pp=4, vpp=4, ep=64, precision="mxfp8",
           dispatcher="hybridep")


def test_fp8_attention_shortens_only_the_attention_item():
    cfg, gpu = api.build_config("deepseek-v3", **RUN)
    cfg8, _ = api.build_config("deepseek-v3", **RUN, fp8_attention=True)
    a, b = estimate_time(cfg, gpu, DEFAULT_CALIBRATION), estimate_time(cfg8, gpu, DEFAULT_CALIBRATION)
    assert b.breakdown_s["attention"] < 0.8 * a.breakdown_s["attention"]
    for item, s in a.breakdown_s.items():
        if item not in ("attention", "pp_bubble", "launch_overhead"):
            assert b.breakdown_s[item] == pytest.approx(s), item


def test_fp8_attention_needs_an_fp8_recipe():
    with pytest.raises(MoeplanError, match="FP8 attention .* needs an FP8 precision"):
        api.build_config("deepseek-v3", **(RUN | {"precision": "bf16"}), fp8_attention=True)
    # NVFP4 is not an FP8 recipe either: the export writes fp8_dot_product_attention for FP8 recipes only
    with pytest.raises(MoeplanError, match="needs an FP8 precision; got nvfp4"):
        api.build_config("deepseek-v3", **(RUN | {"precision": "nvfp4"}), fp8_attention=True)


def test_the_bf16_layers_of_an_fp8_attention_run_are_a_valid_bf16_run():
    """The layers an FP8 run keeps in BF16 (bf16_start_layers / bf16_end_layers) leave TE's FP8 autocast, and FP8
    attention with it: quant_map.bf16_config turns it off itself (a run RunConfig accepts), so the attention rate
    reads the run's flag alone and those layers' attention runs at the BF16 rate."""
    cfg8, gpu = api.build_config("deepseek-v3", **RUN, fp8_attention=True, bf16_end_layers=2)
    plain, _ = api.build_config("deepseek-v3", **RUN, bf16_end_layers=2)
    bf16 = bf16_config(cfg8)
    assert not bf16.fp8_attention and not bf16.fp8
    replace(bf16)  # re-runs RunConfig's checks: FP8 attention needs an FP8 precision
    mla = next(layer.mixer for layer in cfg8.model.distinct_layers)
    assert attention_rate(bf16, gpu, mla) == attention_rate(bf16_config(plain), gpu, mla) == attention_rate(
        plain.with_(precision="bf16"), gpu, mla)
    assert attention_rate(cfg8, gpu, mla) > attention_rate(plain, gpu, mla)


def test_fp8_attention_is_exported_and_read_back():
    cfg, _ = api.build_config("deepseek-v3", **RUN, mcore_version="0.19", fp8_attention=True)
    settings = export.to_settings(cfg, "0.19")
    assert settings["fp8_dot_product_attention"] is True
    back = run_config_from_settings(settings, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version="0.19")
    assert back.fp8_attention
    plain, _ = api.build_config("deepseek-v3", **RUN, mcore_version="0.19")
    assert "fp8_dot_product_attention" not in export.to_settings(plain, "0.19")


def _bridge(model: str, system: str) -> dict[str, str]:
    return next(r for r in bridge_runs() if r["model"] == model and r["system"] == system)


def test_deepseek_v3_gb300_over_gb200_is_near_the_measured_ratio():
    """Bridge 26.08's DeepSeek-V3 MXFP8 rows: GB300 6,288 and GB200 4,912 tokens/s per GPU (1.28x). The GB300 recipe
    trains FP8 attention and the GB200 one does not (the recipes' columns); with BF16 attention everywhere and one
    exponential rate for every GPU moeplan put the pair at ~1.06x."""
    runs = {s: _bridge("deepseek-v3", s) for s in ("gb200", "gb300")}
    assert runs["gb300"]["fp8_attention"] == "1" and runs["gb200"]["fp8_attention"] == "0"
    est = {}
    for s, r in runs.items():
        cfg, gpu = api.build_config("deepseek-v3", **estimate_kwargs(r))
        est[s] = estimate_time(cfg, gpu, DEFAULT_CALIBRATION).tokens_per_s_per_gpu
    measured = float(runs["gb300"]["tokens_per_s_per_gpu"]) / float(runs["gb200"]["tokens_per_s_per_gpu"])
    assert abs(math.log(est["gb300"] / est["gb200"] / measured)) < 0.12
