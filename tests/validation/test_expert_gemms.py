"""moeplan's GEMM charge against per-expert cuBLAS GEMMs measured on one H200 (tests/data/expert_gemms_h200.csv,
benchmarks/gpu/expert_gemms.py; benchmarks/fit_gemm.py prints the same numbers). The kernels in isolation take
the longer of their FLOPs and their bytes, not the sum the run fit calibrates; with the calibrated constants the
tool charges them ~1.2-1.4x what they measure. That is a named gap (docs/calibration.md, known gaps: "GEMMs
against kernel measurements"): pinned to the kernels, the run fit's cross-validated error worsens, since the
over-charge stands in for a per-layer cost of the hidden-2,048 models that is not yet modelled."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fit_gemm  # noqa: E402

DATA = fit_gemm.rows()


def test_the_table_covers_the_expert_shapes_and_precisions():
    assert {r["precision"] for r in DATA} == {"bf16", "fp8", "bf16-accum"}
    assert {r["model"] for r in DATA} == {"deepseek-v3", "qwen3-30b-a3b", "qwen3-next-80b-a3b"}
    assert len(DATA) == 196


def test_kernels_take_the_longer_of_flops_and_bytes_not_the_sum():
    """Fitted to the kernels alone, the overlapped (max) form reproduces them within 12% RMS with a share of the
    matmul rate near 0.92, little depth penalty and ~2.7 us per expert call; the additive form stays ~2x as far
    (~20% RMS: it charges the small-row weight gradients into an fp32 main_grad twice)."""
    rms = {}
    for overlapped in (False, True):
        p = fit_gemm.fit(DATA, overlapped)
        rms[overlapped] = fit_gemm.rms(fit_gemm.residuals(p, DATA, overlapped))
        if overlapped:
            cal = fit_gemm._cal(p)
            assert 0.9 < cal.grouped_gemm_eff < 1.0
            assert 1e-6 < math.exp(p[2]) < 5e-6
    assert rms[True] < 0.12 and rms[False] > 1.8 * rms[True]


@pytest.mark.xfail(strict=True, reason="named gap (docs/calibration.md, known gaps: 'GEMMs against kernel "
                   "measurements'): the run fit's additive GEMM charge is ~1.2-1.4x the H200 kernels; pinned to "
                   "them the cross-validated error goes 0.140 -> 0.188 (0.165 with a fitted per-layer GPU floor)")
def test_calibrated_gemm_charge_is_within_15_percent_of_the_kernels():
    res = fit_gemm.calibrated_residuals(DATA)
    assert abs(math.expm1(statistics.mean(res))) < 0.15
    assert fit_gemm.rms(np.asarray(res)) < 0.20
