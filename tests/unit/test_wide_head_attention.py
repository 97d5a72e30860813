"""What Qwen3-Next has and Qwen3-30B-A3B lacks, costed from the code that runs:
- head-dim-256 gated attention on Blackwell: Transformer Engine (71bbefb, the recipes' TE) has no cuDNN training
  kernel above head dim 128 on sm100+, FlashAttention-3 is sm90-only, so sm100 runs FlashAttention-2
  (timing.attention_kernel ``flash2``, rates from its B200 benchmarks) and sm103 (B300 / GB300), where TE
  allows FlashAttention-2 only up to head dim 192, the unfused path;
- the Gated DeltaNet layer's layout copies and element-wise ops (timing.gdn_glue_bytes), op by op from
  megatron/core/ssm/gated_delta_net.py."""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from moeplan import api
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.models.spec import Attention, GatedDeltaNet
from moeplan.engine.activations import gdn_saved_bytes
from moeplan.engine.timing.attention import attention_efficiency, fused_attention_efficiency
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.gdn import gdn_glue_bytes
from moeplan.run.attention_backend import attention_kernel

from ..kernel_tables import LONG, tensor_core_eff
from ..kernel_tables import rows as kernel_rows

DATA = Path(__file__).resolve().parents[1] / "data" / "fa2_b200.csv"
QN = load_model("qwen3-next-80b-a3b")
QN_ATTN = next(l.mixer for l in QN.layers if isinstance(l.mixer, Attention))
QN_GDN_LAYER = next(l for l in QN.layers if isinstance(l.mixer, GatedDeltaNet))


def _heads(d: int) -> Attention:
    return dataclasses.replace(QN_ATTN, head_dim=d, v_head_dim=d)


def test_kernel_family_by_head_dim_and_compute_capability():
    h100, gb200, gb300 = load_gpu("h100"), load_gpu("gb200"), load_gpu("gb300")
    assert QN_ATTN.head_dim == 256
    assert attention_kernel(QN_ATTN, h100) == "flash"  # Hopper: FA3 / cuDNN train d = 256
    assert attention_kernel(QN_ATTN, gb200) == "flash2"  # sm100: no cuDNN d = 256 backward, FA2 allowed
    assert attention_kernel(QN_ATTN, gb300) == "unfused"  # sm103: FA2 above 192 not allowed
    assert attention_kernel(QN_ATTN, load_gpu("b200")) == "flash2"
    assert attention_kernel(QN_ATTN, load_gpu("b300")) == "unfused"
    # head dim 128 (Qwen3-30B-A3B, Qwen3-235B) keeps cuDNN's Blackwell kernels; 160 fits FA2 on sm103 too
    assert attention_kernel(_heads(128), gb300) == attention_kernel(_heads(128), gb200) == "flash"
    assert attention_kernel(_heads(160), gb300) == "flash2"
    assert attention_kernel(_heads(512), gb200) == "unfused"  # above FA2's 256
    # MLA (192 / 128) stays on cuDNN everywhere; no GPU or no compute capability: the Hopper choice
    mla = next(l.mixer for l in load_model("deepseek-v3").layers if isinstance(l.mixer, Attention))
    assert attention_kernel(mla, gb200) == attention_kernel(mla, gb300) == "cudnn_mla"
    assert attention_kernel(QN_ATTN) == "flash"
    assert attention_kernel(QN_ATTN, dataclasses.replace(gb200, compute_capability=None)) == "flash"


def _fa2_points():
    with DATA.open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return [(r["pass"], int(r["head_dim"]), int(r["seq_len"]), float(r["tflops"]) * 1e12) for r in rows]


def test_flash2_constants_reproduce_its_b200_benchmark():
    """The flash2 efficiencies reproduce FlashAttention-2's own B200 numbers (flash-attn's count: backward
    2.5 x forward, Megatron's 2 x) within 20% at every point and 10% RMS."""
    b200 = load_gpu("b200")
    half = DEFAULT_CALIBRATION.attn_half_tokens
    logs = []
    for p, d, seq, measured in _fa2_points():
        fwd, bwd, _ = fused_attention_efficiency(d, d, "flash2", DEFAULT_CALIBRATION)
        eff = fwd if p == "fwd" else bwd
        est = b200.peak("bf16") * eff * seq / (seq + half) * (1.0 if p == "fwd" else 2.5 / 2)
        logs.append(math.log(est / measured))
        assert est == pytest.approx(measured, rel=0.2), (p, d, seq)
    assert math.sqrt(sum(x * x for x in logs) / len(logs)) < 0.10


def test_wide_heads_on_blackwell_cost_several_times_the_fa3_rate():
    gb200, gb300, h100 = load_gpu("gb200"), load_gpu("gb300"), load_gpu("h100")
    flash = attention_efficiency(QN_ATTN, DEFAULT_CALIBRATION, h100)
    fa2 = attention_efficiency(QN_ATTN, DEFAULT_CALIBRATION, gb200)
    unfused = attention_efficiency(QN_ATTN, DEFAULT_CALIBRATION, gb300)
    assert 2.5 < flash[2] / fa2[2] < 3.5  # ~445 / 310 TFLOP/s on GB200 against FA3-class ~1,100 (fwd + bwd)
    # unfused: full-square bf16 bmm at the matmul rate plus 22 bytes per score element through HBM
    assert unfused[2] < fa2[2]
    peak = gb300.peak("bf16")
    byte = peak / (gb300.hbm_bw_bytes_per_s * DEFAULT_CALIBRATION.hbm_eff)
    mm = (gb300.gemm_bf16_achieved_flops or 0.75 * peak) / peak
    fwd_t = 2 * (4 * 256 / mm + 8 * byte)
    assert unfused[0] == pytest.approx(4 * 256 / fwd_t)


def test_gdn_glue_bytes_op_by_op():
    g = QN_GDN_LAYER.mixer
    k, v, c, h = g.key_dim, g.value_dim, 2 * g.key_dim + g.value_dim, g.num_value_heads
    assert (k, v, c, h) == (2048, 4096, 8192, 32)
    f1, b1 = gdn_glue_bytes(g, 1)
    f2, b2 = gdn_glue_bytes(g, 2)
    # gating per value head: forward alpha.float() 6 + add 8 + softplus 8 + product 8 + sigmoid 4
    gating = 34 * h
    # forward: conv transpose 2C + conv 2C + q/k contiguous 4K + l2norm 4K + repeat_interleave 2K + 4K
    # + value/gate contiguous 4V + gated norm 5V (+ output transpose 2V at MBS > 1), bf16
    assert f1 == pytest.approx((4 * c + 14 * k + 9 * v) * 2 + gating)
    # backward gating: product 8 + A_log grad 16 + softplus 12 + dt_bias 4 + cast 6 + sigmoid 6
    assert b1 - (8 * v + 6 * k + 2 * k + 2 * 2 * k + 7 * c + 2 * (c + v + 2 * h)) * 2 == pytest.approx(52 * h)
    assert f2 - f1 == pytest.approx(2 * v * 2)
    assert b2 - b1 == pytest.approx((2 * v + 2 * (c + v + 2 * h)) * 2)
    assert (f2 + b2) / 1e3 == pytest.approx(559, rel=0.01)  # KB per token at MBS 2 (PR #3168's recipe)
    # the generic charge it replaces: 2 x the 74 KB the mixer saves
    assert gdn_saved_bytes(QN_GDN_LAYER, QN.hidden) == pytest.approx(73856)
    assert f1 + b1 > 3 * DEFAULT_CALIBRATION.elementwise_traffic * gdn_saved_bytes(QN_GDN_LAYER, QN.hidden) / 2


def test_gdn_in_proj_dim_is_the_checkpoints_in_proj_rows_and_every_reader_uses_it():
    """in_proj_dim is the Qwen3-Next checkpoint's in_proj_qkvz [12288, 2048] + in_proj_ba [64, 2048] rows
    (../shared/models/qwen3-next-80b-a3b.json, the dump's tensor shapes); the GEMM, the saved projection
    output and the parameter count read it."""
    from moeplan.engine.activations import layer_tensors
    from moeplan.engine.flops import layer_gemms
    from moeplan.engine.params import gdn_params

    g = QN_GDN_LAYER.mixer
    assert g.in_proj_dim == 12288 + 64
    gemm = next(x for x in layer_gemms(QN_GDN_LAYER, QN.hidden) if x.name == "in_proj")
    assert (gemm.k, gemm.n) == (QN.hidden, g.in_proj_dim)
    saved = next(t for t in layer_tensors(QN_GDN_LAYER, QN.hidden) if t.name == "gdn_in_proj_out")
    assert saved.elems == g.in_proj_dim
    # in_proj + conv1d [8192, 1, 4] + A_log, dt_bias [32] each + norm [128] + out_proj [2048, 4096]
    assert gdn_params(g, QN.hidden) == 12352 * 2048 + 8192 * 4 + 2 * 32 + 128 + 2048 * 4096


def test_gdn_glue_is_wired_into_the_element_wise_time_of_gdn_layers():
    """Per token, a GDN layer's element-wise time at MBS 2 exceeds MBS 1 by exactly the batched copies'
    bytes (the generic per-saved-byte part is the same per token); attention layers have no such step."""
    from moeplan.engine.timing.context import make_ctx
    from moeplan.engine.timing.layer import layer_time

    common = dict(gpu="gb200", gpus=64, seq_len=4096, gbs=1024, pp=2, vpp=4, ep=32, precision="mxfp8",
                  dispatcher="hybridep", grad_fp32=False, mcore_version="0.19")
    per_token = {}
    for mbs in (1, 2):
        cfg, gpu = api.build_config("qwen3-next-80b-a3b", mbs=mbs, **common)
        ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
        hbm = gpu.hbm_bw_bytes_per_s * DEFAULT_CALIBRATION.hbm_eff
        per_token[mbs] = {kind: layer_time(ctx, next(l for l in cfg.model.layers if isinstance(l.mixer, kind)))
                          .elementwise * hbm / ctx.tokens for kind in (GatedDeltaNet, Attention)}
    g = QN_GDN_LAYER.mixer
    c, v, h = 2 * g.key_dim + g.value_dim, g.value_dim, g.num_value_heads
    step = (2 * v + 2 * v + 2 * (c + v + 2 * h)) * 2
    assert per_token[2][GatedDeltaNet] - per_token[1][GatedDeltaNet] == pytest.approx(step, rel=1e-6)
    assert per_token[2][Attention] == pytest.approx(per_token[1][Attention], rel=1e-6)
    # against the generic charge (2 x saved bytes) the GDN layer moves ~0.4 MB more per token
    generic = DEFAULT_CALIBRATION.elementwise_traffic * gdn_saved_bytes(QN_GDN_LAYER, QN.hidden)
    assert sum(gdn_glue_bytes(g, 2)) - generic == pytest.approx(411e3, rel=0.01)


H200_HEADDIM = "attention_headdim_h200.csv"


@pytest.mark.parametrize("family,passes", [("flash", ("bwd",)), ("flash2", ("fwd", "bwd"))])
def test_wide_head_shares_are_the_h200_measurement(family, passes):
    """attn_wide_fwd_share / attn_wide_bwd_share are the median d = 256 / d = 128 efficiency over the measured
    long-block points (tests/kernel_tables.py): wide heads are slower per FLOP, most in cuDNN's backward."""
    eff = tensor_core_eff(H200_HEADDIM)
    shares = {"fwd": DEFAULT_CALIBRATION.attn_wide_fwd_share, "bwd": DEFAULT_CALIBRATION.attn_wide_bwd_share}
    for p in passes:
        ratios = [eff[(family, p, 256, 256, c, s)] / eff[(family, p, 128, 128, c, s)] for c in ("0", "1") for s in LONG]
        assert shares[p][family] == pytest.approx(statistics.median(ratios), abs=0.005), (family, p)
        assert shares[p][family] < 0.9  # the softmax term alone would make d = 256 faster, not slower


def test_cudnn_wide_head_forward_needs_no_share():
    """cuDNN's d = 256 forward at 16K (non-causal, the long-block rate) is FlashAttention-3's 740 TFLOP/s, which the
    flash family's forward share reproduces without a wide-head share (the softmax amortised over wider heads)."""
    assert DEFAULT_CALIBRATION.attn_wide_fwd_share["flash"] == 1.0
    table = {(r["backend"], r["pass"], int(r["head_dim"]), r["causal"], int(r["seq_len"])): float(r["tflops"])
             for r in kernel_rows(H200_HEADDIM)}
    h200, length = load_gpu("h200"), 16384
    fwd = fused_attention_efficiency(256, 256, "flash", DEFAULT_CALIBRATION)[0]
    modelled = h200.peak("bf16") * fwd * length / (length + DEFAULT_CALIBRATION.attn_half_tokens) / 1e12
    assert modelled == pytest.approx(table[("cudnn", "fwd", 256, "0", length)], rel=0.05)


def test_wide_head_share_applies_above_128_only():
    cal = DEFAULT_CALIBRATION
    plain = cal.with_overrides({"attn_wide_fwd_share": {"flash": 1.0, "flash2": 1.0},
                                "attn_wide_bwd_share": {"flash": 1.0, "flash2": 1.0}})
    for kind in ("flash", "flash2"):
        assert fused_attention_efficiency(128, 128, kind, cal) == fused_attention_efficiency(128, 128, kind, plain)
        wide, base = fused_attention_efficiency(256, 256, kind, cal), fused_attention_efficiency(256, 256, kind, plain)
        assert wide[1] < base[1]
        assert (wide[0] < base[0]) if kind == "flash2" else (wide[0] == base[0])  # cuDNN's forward keeps its rate
    # MLA's 192 / 128 heads keep their own cuDNN family constants
    assert fused_attention_efficiency(192, 128, "cudnn_mla", cal) == fused_attention_efficiency(192, 128, "cudnn_mla", plain)


def test_cudnn_wide_head_backward_on_h100_follows_the_measured_ratio():
    """Qwen3-Next's d = 256 attention on Hopper (cuDNN): moeplan's backward rate over its d = 128 rate is the
    H200 measurement's (cuDNN SDPA, 16K, causal) within 10%."""
    table = {(r["backend"], r["pass"], int(r["head_dim"]), r["causal"], int(r["seq_len"])): float(r["tflops"])
             for r in kernel_rows(H200_HEADDIM)}
    h100 = load_gpu("h100")
    wide = attention_efficiency(QN_ATTN, DEFAULT_CALIBRATION, h100)[1]
    narrow = attention_efficiency(_heads(128), DEFAULT_CALIBRATION, h100)[1]
    measured = table[("cudnn", "bwd", 256, "1", 16384)] / table[("cudnn", "bwd", 128, "1", 16384)]
    assert wide / narrow == pytest.approx(measured, rel=0.10)
