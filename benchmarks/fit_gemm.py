"""Check moeplan's GEMM charge against per-expert cuBLAS GEMMs measured on one H200; fit the kernel-only reading.

    python benchmarks/fit_gemm.py

Data: tests/data/expert_gemms_h200.csv (benchmarks/gpu/expert_gemms.py: the six GEMMs of an MoE layer's routed
experts for DeepSeek-V3, Qwen3-30B-A3B and Qwen3-Next-80B-A3B shapes at 256-5,120 rows per expert, one cuBLASLt
matmul per local expert over 4 streams as TE GroupedLinear issues them; BF16, FP8, and BF16 weight gradients
accumulating into an fp32 main_grad). Model: what moeplan.engine.timing._gemm_time_uncached charges one pass over the
local experts, timing.gemm_call_s (the FLOPs at timing.grouped_gemm_rate of the catalog's matmul rate, slowed by
the reduction depth through timing.gemm_k_half, plus or, ``overlapped``, at most the bytes at the achievable HBM
rate). Printed: the calibrated constants' error on the table, then least squares on log time (Gauss-Newton with
numerical derivatives) of grouped_gemm_eff, gemm_epilogue_s and a fixed time per expert call (which the tool
does not charge) to the kernels alone, in both forms. docs/calibration.md (known gaps, "GEMMs against kernel
measurements") says why the tool keeps the run fit's additive form.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moeplan.hardware import load_gpu  # noqa: E402
from moeplan.engine.activations import BF16_BYTES, FP32_BYTES
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.context import GROUPED_TILE_ROWS
from moeplan.engine.timing.gemm import gemm_call_s, gemm_k_half, gemm_moved_bytes, grouped_gemm_rate

DATA = ROOT / "tests" / "data" / "expert_gemms_h200.csv"
# bytes per operand element and per output element (fp32 main_grad read and written under bf16-accum)
OPERAND_BYTES = {"bf16": BF16_BYTES, "fp8": 1, "bf16-accum": BF16_BYTES}
OUTPUT_BYTES = {"bf16": BF16_BYTES, "fp8": BF16_BYTES, "bf16-accum": 2 * FP32_BYTES}


def rows() -> list[dict[str, str]]:
    with DATA.open(encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def predict_s(r: dict[str, str], cal: Calibration, overlapped: bool = False, fixed_s: float = 0.0) -> float:
    """moeplan's seconds for one measured pass over the local experts (plus ``fixed_s`` per expert call)."""
    gpu = load_gpu("h200")
    p = r["precision"]
    m, n, k, experts, per_expert = (int(r[c]) for c in ("m", "n", "k", "experts", "rows"))
    best = gpu.gemm_fp8_achieved_flops if p == "fp8" else gpu.gemm_bf16_achieved_flops
    assert best is not None
    moved = gemm_moved_bytes(m * k, k * n, m * n, OPERAND_BYTES[p], OUTPUT_BYTES[p]) * experts
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    rate = grouped_gemm_rate(best, per_expert, cal, tile_aligned=per_expert % GROUPED_TILE_ROWS == 0)
    return gemm_call_s(2.0 * m * n * k * experts, k, moved, rate, hbm, gemm_k_half(best, gpu.sms, cal),
                       overlapped) + fixed_s * experts


EPILOGUE_FLOOR_S = 1e-14  # the fit may drive the epilogue to nothing; the constant must stay positive


def _cal(p: np.ndarray) -> Calibration:
    return DEFAULT_CALIBRATION.with_overrides({"grouped_gemm_eff": 1 / (1 + math.exp(-p[0])),
                                               "gemm_epilogue_s": max(EPILOGUE_FLOOR_S, math.exp(p[1]))})


def residuals(p: np.ndarray, data: list[dict[str, str]], overlapped: bool) -> np.ndarray:
    cal = _cal(p)
    return np.array([math.log(predict_s(r, cal, overlapped, math.exp(p[2])) / float(r["seconds"])) for r in data])


def fit(data: list[dict[str, str]], overlapped: bool, iters: int = 40) -> np.ndarray:
    p = np.array([math.log(0.9 / 0.1), math.log(2e-11), math.log(2e-6)])
    lam = 1e-2
    r = residuals(p, data, overlapped)
    for _ in range(iters):
        J = np.empty((len(r), len(p)))
        for j in range(len(p)):
            dp = np.zeros_like(p)
            dp[j] = 1e-4
            J[:, j] = (residuals(p + dp, data, overlapped) - r) / 1e-4
        A, g = J.T @ J, J.T @ r
        step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
        rn = residuals(p + step, data, overlapped)
        if rn @ rn < r @ r:
            p, r, lam = p + step, rn, lam / 3
        else:
            lam *= 4
        if float(np.abs(step).max()) < 1e-5:
            break
    return p


def rms(x: np.ndarray) -> float:
    return math.sqrt(float(np.mean(x * x)))


def _by_precision(res: np.ndarray, data: list[dict[str, str]]) -> str:
    out = []
    for prec in ("bf16", "fp8", "bf16-accum"):
        sel = np.array([r["precision"] == prec for r in data])
        out.append(f"{prec} {math.expm1(float(np.mean(res[sel]))):+.0%} (RMS {rms(res[sel]):.3f})")
    return ", ".join(out)


def calibrated_residuals(data: list[dict[str, str]]) -> np.ndarray:
    """log(moeplan / measured) with the calibrated constants and the tool's additive form."""
    return np.array([math.log(predict_s(r, DEFAULT_CALIBRATION) / float(r["seconds"])) for r in data])


def main() -> int:
    data = rows()
    res = calibrated_residuals(data)
    print(f"calibrated constants (additive, as the tool runs): RMS {rms(res):.3f} over {len(data)} rows; "
          f"mean by precision: {_by_precision(res, data)}")
    for overlapped in (False, True):
        p = fit(data, overlapped)
        cal, res = _cal(p), residuals(p, data, overlapped)
        print(f"kernel-only fit, {'overlapped (max)' if overlapped else 'additive (sum)'}: grouped_gemm_eff "
              f"{cal.grouped_gemm_eff:.3f}, gemm_epilogue_s {cal.gemm_epilogue_s:.2e}, fixed per expert call "
              f"{math.exp(p[2]):.2e} s: RMS {rms(res):.3f}; {_by_precision(res, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
