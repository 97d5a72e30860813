"""Fit the Gated DeltaNet kernel constants to the two kernel tables; print them and the residuals.

    python benchmarks/fit_gdn.py

Data: tests/data/fla_gdn_gb200.csv (fla-org/flash-linear-attention README "Benchmarks": chunk_gdn forward
and forward + backward on one GB200, Grace host) and tests/data/fla_gdn_h200.csv (the same call on one H200,
x86 host: benchmarks/gpu/gdn_chunk.sh). Model: timing.gdn_chunk_kernels_s (chunk-parallel FLOPs at
gdn_eff[<family>_fwd|bwd] of BF16 peak plus the state recurrence's chunk steps in waves over the SMs) plus the
host launch time gdn_launch_s[<host>_fwd|bwd] of a standalone call. One chunk-step latency for both GPUs; rates
per GPU family and launch times per host (timing.gdn_kernel_family, timing.gdn_host). Joint least squares on
log time (Gauss-Newton with numerical derivatives, in log parameters). The values go to
src/moeplan/hardware/calibration.yaml by hand (they are kernel constants, not part of benchmarks/calibrate.py's
throughput fit).
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moeplan.engine.flops import delta_rule_fwd_flops  # noqa: E402
from moeplan.hardware import load_gpu  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import TRAIN
from moeplan.engine.timing.gdn import gdn_chunk_kernels_s, gdn_host, gdn_kernel_family, gdn_launch_s

GPUS = ("gb200", "h200")  # one table each: tests/data/fla_gdn_<gpu>.csv


def rows(gpu: str) -> list[dict[str, str]]:
    with open(ROOT / "tests" / "data" / f"fla_gdn_{gpu}.csv", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def names() -> list[str]:
    """The fitted constants: the shared chunk step, then each table's family rates and host launch times."""
    out = ["gdn_chunk_step_s"]
    for name in GPUS:
        gpu = load_gpu(name)
        fam, host = gdn_kernel_family(gpu), gdn_host(gpu)
        out += [f"gdn_eff.{fam}_fwd", f"gdn_eff.{fam}_bwd", f"gdn_launch_s.{host}_fwd", f"gdn_launch_s.{host}_bwd"]
    return out


def calibration(p: np.ndarray):
    over: dict[str, dict[str, float] | float] = {"gdn_eff": {}, "gdn_launch_s": {}}
    for name, v in zip(names(), np.exp(p)):
        if "." in name:
            group, key = name.split(".")
            over[group][key] = float(v)  # type: ignore[index]
        else:
            over[name] = float(v)
    return DEFAULT_CALIBRATION.with_overrides(over)


def residuals(p: np.ndarray, tables: dict[str, list[dict[str, str]]]) -> dict[str, np.ndarray]:
    cal = calibration(p)
    out = {}
    for name, data in tables.items():
        gpu = load_gpu(name)
        hf, hb = gdn_launch_s(gpu, cal)
        r = []
        for row in data:
            b, t, h, d = (int(row[k]) for k in ("B", "T", "H", "D"))
            fwd, bwd = gdn_chunk_kernels_s(b, t, h, d, TRAIN * delta_rule_fwd_flops(h, d, d) * b * t, gpu, cal)
            r += [math.log((fwd + hf) / (float(row["fwd_ms"]) * 1e-3)),
                  math.log((fwd + bwd + hf + hb) / (float(row["fwdbwd_ms"]) * 1e-3))]
        out[name] = np.array(r)
    return out


def main() -> int:
    tables = {g: rows(g) for g in GPUS}

    def flat(p: np.ndarray) -> np.ndarray:
        return np.concatenate(list(residuals(p, tables).values()))
    p = np.log([1.5e-6] + [0.1, 0.05, 6e-4, 1e-3] * len(GPUS))
    for _ in range(100):
        r = flat(p)
        jac = np.stack([(flat(p + dp) - r) / 1e-4 for dp in np.eye(len(p)) * 1e-4], axis=1)
        step = np.linalg.lstsq(jac, -r, rcond=None)[0]
        p = p + np.clip(step, -0.5, 0.5)
        if np.max(np.abs(step)) < 1e-7:
            break
    for name, v in zip(names(), np.exp(p)):
        print(f"{name}: {v:.4g}")
    for name, r in residuals(p, tables).items():
        print(f"{name} residuals (fwd, fwd+bwd per row):", " ".join(f"{math.expm1(x):+.0%}" for x in r))
        print(f"{name} RMS {math.sqrt(float(np.mean(r ** 2))):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
