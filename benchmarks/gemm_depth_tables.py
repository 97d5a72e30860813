"""The GEMM depth penalty (gemm_epilogue_s) that measured dense GEMMs imply on Hopper and Blackwell, against the fit.

    python benchmarks/gemm_depth_tables.py

Data: tests/data/xla_matmul_depth.csv (XLA's default matmul performance tables: cuBLAS GEMMs of M = N = 4,096 at
K = 256-4,096 on sm_90 BF16 and sm_100 BF16 / FP8). For each architecture, precision and batch, the one
``gemm_epilogue_s`` that makes moeplan's charge of those GEMMs reproduce them, least squares on log time: the FLOPs at
the catalog's matmul rate slowed by the depth (timing.gemm.gemm_k_half), or the bytes at the achievable HBM rate
where longer (timing.gemm.gemm_call_s ``overlapped``: how GEMMs measure in isolation, benchmarks/fit_gemm.py).
Printed beside the source value (calibrate.PRIOR) and the fitted one (calibration.yaml): the depth at half rate
(k_half) each sweep implies, each constant's error on the sweeps, and the share of the K = 256 rate the fit keeps.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moeplan.engine.activations import BF16_BYTES  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration  # noqa: E402
from moeplan.engine.timing.gemm import gemm_call_s, gemm_k_half, gemm_moved_bytes  # noqa: E402
from moeplan.hardware import load_gpu  # noqa: E402

DATA = ROOT / "tests" / "data" / "xla_matmul_depth.csv"
OPERAND_BYTES = {"bf16": BF16_BYTES, "fp8": 1.0}  # BF16 out in both


def rows() -> list[dict[str, str]]:
    with DATA.open(encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def groups() -> dict[tuple[str, str, int], list[dict[str, str]]]:
    """The table's rows by (arch, precision, batch): one K sweep each."""
    out: dict[tuple[str, str, int], list[dict[str, str]]] = {}
    for r in rows():
        out.setdefault((r["arch"], r["precision"], int(r["b"])), []).append(r)
    return out


def predict_s(r: dict[str, str], cal: Calibration) -> float:
    """moeplan's seconds for one measured entry (b GEMMs of m x k by k x n) at ``cal``, in the overlapped form
    (timing.gemm.gemm_call_s): an isolated GEMM takes the longer of its FLOPs and its bytes."""
    gpu = load_gpu(r["gpu"])
    p = r["precision"]
    best = gpu.gemm_fp8_achieved_flops if p == "fp8" else gpu.gemm_bf16_achieved_flops
    assert best is not None
    b, m, n, k = (int(r[c]) for c in ("b", "m", "n", "k"))
    moved = b * gemm_moved_bytes(m * k, k * n, m * n, OPERAND_BYTES[p], BF16_BYTES)
    return gemm_call_s(2.0 * b * m * n * k, k, moved, best, gpu.hbm_bw_bytes_per_s * DEFAULT_CALIBRATION.hbm_eff,
                       gemm_k_half(best, gpu.sms, cal), overlapped=True)


def measured_s(r: dict[str, str]) -> float:
    return 2.0 * int(r["b"]) * int(r["m"]) * int(r["n"]) * int(r["k"]) / float(r["flops_per_s"])


def log_rms(sweep: list[dict[str, str]], cal: Calibration) -> float:
    return math.sqrt(sum(math.log(predict_s(r, cal) / measured_s(r)) ** 2 for r in sweep) / len(sweep))


def implied_epilogue_s(sweep: list[dict[str, str]]) -> float:
    """The gemm_epilogue_s that fits one K sweep best (log least squares; golden-section search on log seconds)."""
    def cost(log_eps: float) -> float:
        return log_rms(sweep, DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": math.exp(log_eps)}))
    lo, hi = math.log(1e-13), math.log(1e-8)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if cost(a) < cost(b) else (a, hi)
    return math.exp((lo + hi) / 2)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.fit_prior import prior_calibration  # the source values, where the fit starts

    PRIOR = prior_calibration()
    fitted = DEFAULT_CALIBRATION
    print("arch    prec  b  implied gemm_epilogue_s  k_half  | RMS at source / fitted | rate kept at K=256, fitted")
    for (arch, prec, b), sweep in groups().items():
        eps = implied_epilogue_s(sweep)
        gpu = load_gpu(sweep[0]["gpu"])
        best = gpu.gemm_fp8_achieved_flops if prec == "fp8" else gpu.gemm_bf16_achieved_flops
        assert best is not None
        kh = gemm_k_half(best, gpu.sms, DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": eps}))
        r256 = next(r for r in sweep if r["k"] == "256")
        kept = measured_s(r256) / predict_s(r256, fitted)
        print(f"{arch:7s} {prec:5s} {b}  {eps:.2e}                 {kh:6.0f}  | "
              f"{log_rms(sweep, PRIOR):.3f} / {log_rms(sweep, fitted):.3f}          | {kept:.2f}")
    h100 = load_gpu("h100")
    kh_src = gemm_k_half(h100.gemm_bf16_achieved_flops, h100.sms, PRIOR)
    kh_fit = gemm_k_half(h100.gemm_bf16_achieved_flops, h100.sms, fitted)
    print(f"source gemm_epilogue_s {PRIOR.gemm_epilogue_s:.2e} (k_half {kh_src:.0f} on H100 BF16); "
          f"fitted {fitted.gemm_epilogue_s:.2e} (k_half {kh_fit:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
