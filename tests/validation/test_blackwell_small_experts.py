"""Qwen3-30B-A3B (hidden 2,048, expert ffn 768, 128 experts top-8) on Blackwell: the BF16 rows N01 (16 GB200, EP16,
no CUDA graphs) and N30 (8 B200, EP8, TE-scoped graphs), both MBS 4 x 4,096 with HybridEP, taken apart per layer
(docs/calibration.md, known gaps: "Qwen3-30B-A3B on Blackwell"). What the tests pin:

- each modelled kernel item is no faster than what its kernels reach in their own benchmarks (the grouped expert
  GEMMs below the GPU's measured best-shape matmul rate, HybridEP's dispatch / combine at or below the DeepEP hybrid-ep
  README's GB200 Torch-API rates), so the rows' shortfall is not a kernel costed too fast;
- the shortfall itself: once the same ~2 ms per layer and micro-batch (16,384 tokens) on GB200 and on B200 (a strict
  xfail); at the bulk split-quantize refit (gemm_epilogue_s 2.08e-10 -> 2.24e-10, which slows Blackwell's small GEMMs)
  ~0.7-0.8 ms, each row within 8%. Its cause is still not found in the code that runs. Rows and items are printed."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import ep_kernels, expected_ranks_hit
from moeplan.engine.timing.step import estimate_time
from moeplan.models.spec import MoE
from tests.measured_variants import n_variants

ROOT = Path(__file__).resolve().parents[2]
TRAIN = 3  # forward + dgrad + wgrad


@pytest.fixture(scope="module")
def bf16_rows():
    """(variant, config, gpu, estimate, measured step seconds, layer time) of N01's and N30's BF16 rows."""
    out = {}
    for v in n_variants():
        if v.group in ("N01", "N30") and v.label == "BF16":
            cfg, gpu = api.build_config(v.model, **v.kwargs)
            est = estimate_time(cfg, gpu, DEFAULT_CALIBRATION)
            measured_step_s = est.step_time_s * est.tflops_per_gpu / float(v.tflops)
            ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
            layer = cfg.model.layers[0]
            out[v.group] = (v, cfg, gpu, est, measured_step_s, ctx, layer, layer_time(ctx, layer))
    assert set(out) == {"N01", "N30"}
    return out


def _hybridep_torch_gbps(ranks: int) -> dict[str, float]:
    """The README's GB200 Torch-API rates at 32 SMs (HybridEP's default budget) for ``ranks`` ranks."""
    with open(ROOT / "tests" / "data" / "hybridep_gb200.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return {r["kernel"]: float(r["torch_gbps"]) for r in rows if r["ranks"] == str(ranks) and r["sms"] == "32"}


@pytest.mark.parametrize("group", ["N01", "N30"])
def test_layer_items_are_no_faster_than_their_kernels(bf16_rows, group):
    """The routed-expert GEMMs (3 x 2 x rows x (h x 2f + f x h) FLOPs) run at most at 60% of the GPU's best-shape BF16
    matmul rate (catalog MAMF; measured on one H200, the same shapes at 4,096 rows per expert reach 77-93% of its
    MAMF: tests/data/expert_gemms_h200.csv), and each HybridEP dispatch / combine moves its received copies at most at
    the README's Torch-API rate (EP32 rows for EP16 on NVL72, EP8 rows for NVL8; the B200 table's EP8 rate is within
    3% of GB200's at 16 SMs)."""
    _, cfg, gpu, _, _, ctx, layer, lt = bf16_rows[group]
    moe = layer.mlp
    assert isinstance(moe, MoE)
    h, f = cfg.model.hidden, moe.expert_ffn_hidden
    rows = ctx.tokens * moe.top_k
    expert_flops = TRAIN * 2 * rows * (h * 2 * f + f * h)
    rate = expert_flops / lt.grouped_gemm
    print(f"{group}: {lt.total() * 1e3:.2f} ms per layer and micro-batch: "
          + ", ".join(f"{k} {getattr(lt, k) * 1e3:.3f}" for k in lt.__dataclass_fields__ if getattr(lt, k)))
    print(f"{group}: grouped expert GEMMs at {rate / 1e12:.0f} TFLOP/s, {rate / ctx.gemm_rate:.0%} of MAMF")
    assert rate < 0.6 * ctx.gemm_rate
    recv_bytes = ctx.tokens * expected_ranks_hit(moe, cfg.parallel.ep) * h * 2
    dispatch_s, combine_s, _ = ep_kernels(ctx, moe)
    bench = _hybridep_torch_gbps(32 if cfg.parallel.ep > 8 else 8)
    for kernel, s in (("dispatch", dispatch_s), ("combine", combine_s)):
        print(f"{group}: HybridEP {kernel} {s * 1e3:.3f} ms, {recv_bytes / s / 1e9:.0f} GB/s (README {bench[kernel]})")
        assert recv_bytes / s <= bench[kernel] * 1e9 * 1.001


def test_blackwell_bf16_rows_within_8_percent(bf16_rows):
    """Each BF16 row within 8% (log) of its measured TFLOP/s; the per-layer shortfall is printed."""
    misses = []
    for group, (v, cfg, _, est, measured_step_s, *_rest) in sorted(bf16_rows.items()):
        layers = est.microbatches * cfg.model.num_layers
        gap_ms = (measured_step_s - est.step_time_s) / layers * 1e3
        r = math.log(est.tflops_per_gpu / float(v.tflops))
        print(f"{group} {v.label}: measured {float(v.tflops):.0f}, moeplan {est.tflops_per_gpu:.0f} TFLOP/s ({r:+.1%}); "
              f"{gap_ms:.2f} ms per layer and micro-batch short")
        if abs(r) > 0.08:
            misses.append(group)
    assert not misses, misses
