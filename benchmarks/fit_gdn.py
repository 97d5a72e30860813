"""Fit the Gated DeltaNet kernel constants to fla-org's own GB200 benchmark; print them and the residuals.

    python benchmarks/fit_gdn.py

Data: tests/data/fla_gdn_gb200.csv (fla-org/flash-linear-attention README "Benchmarks": chunk_gdn forward
and forward + backward on one GB200). Model: timing.gdn_chunk_kernels_s (chunk-parallel FLOPs at
gdn_eff[fwd|bwd] of BF16 peak, the state recurrence's chunk steps in waves over the SMs) plus the host
launch time gdn_launch_s[fwd|bwd] of a standalone call. Least squares on log time (Gauss-Newton with
numerical derivatives, in log parameters). The values go to src/moeplan/hardware/calibration.yaml by hand
(they are kernel constants, not part of benchmarks/calibrate.py's throughput fit).
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moeplan.flops import delta_rule_fwd_flops  # noqa: E402
from moeplan.hardware import load_gpu  # noqa: E402
from moeplan.timing import DEFAULT_CALIBRATION, TRAIN, gdn_chunk_kernels_s  # noqa: E402

NAMES = ("gdn_eff.fwd", "gdn_eff.bwd", "gdn_chunk_step_s", "gdn_launch_s.fwd", "gdn_launch_s.bwd")


def rows() -> list[dict[str, str]]:
    with open(ROOT / "tests" / "data" / "fla_gdn_gb200.csv", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def residuals(p: np.ndarray, data: list[dict[str, str]]) -> np.ndarray:
    ef, eb, step, hf, hb = (float(x) for x in np.exp(p))
    cal = DEFAULT_CALIBRATION.with_overrides({"gdn_eff": {"fwd": ef, "bwd": eb}, "gdn_chunk_step_s": step})
    gpu = load_gpu("gb200")
    out = []
    for r in data:
        b, t, h, d = (int(r[k]) for k in ("B", "T", "H", "D"))
        fwd, bwd = gdn_chunk_kernels_s(b, t, h, d, TRAIN * delta_rule_fwd_flops(h, d, d) * b * t, gpu.peak("bf16"), cal, gpu.sms)
        out += [math.log((fwd + hf) / (float(r["fwd_ms"]) * 1e-3)),
                math.log((fwd + bwd + hf + hb) / (float(r["fwdbwd_ms"]) * 1e-3))]
    return np.array(out)


def main() -> int:
    data = rows()
    p = np.log([0.06, 0.03, 2e-6, 6e-4, 9e-4])
    for _ in range(50):
        r = residuals(p, data)
        jac = np.stack([(residuals(p + dp, data) - r) / 1e-4 for dp in np.eye(len(p)) * 1e-4], axis=1)
        step = np.linalg.lstsq(jac, -r, rcond=None)[0]
        p = p + np.clip(step, -0.5, 0.5)
        if np.max(np.abs(step)) < 1e-6:
            break
    r = residuals(p, data)
    for name, v in zip(NAMES, np.exp(p)):
        print(f"{name}: {v:.4g}")
    print("residuals (fwd, fwd+bwd per row):", " ".join(f"{math.expm1(x):+.0%}" for x in r))
    print(f"RMS {math.sqrt(float(np.mean(r ** 2))):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
