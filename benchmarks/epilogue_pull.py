"""Which fitted rows pull gemm_epilogue_s above its source value (issue 31: the one knob that slows small-K GEMMs).

    python benchmarks/epilogue_pull.py [--top 25]

Refits every other constant (benchmarks/calibrate.py FITTED, from the shipped values, calibrate.fit) with
gemm_epilogue_s pinned at its source value (calibrate.PRIOR), then gives each observation's pull: minus its
residual (level_contrasts, as the fit scores it) times the residual's derivative in log gemm_epilogue_s, the share
of the fit's gradient toward a larger constant that the row contributes (half the derivative of its squared
residual). Printed: the error of the pinned and the shipped fit, the pull by GPU, by EP dispatcher and by GPU x
precision, the rows that pull most, the Blackwell-only scan (the depth penalty on Blackwell GPUs alone multiplied,
the source value elsewhere) and a trial HybridEP time per received token copy (the source value everywhere), each
refitted. ~1.5 min on one core.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate as C  # noqa: E402
import moeplan.engine.timing.gemm as gemm_mod  # noqa: E402
import moeplan.engine.timing.layer as layer_mod  # noqa: E402
import moeplan.engine.timing.moe as moe_mod  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration  # noqa: E402

STEP_LOG = 0.05  # finite-difference step in log gemm_epilogue_s


def run_of(o: C.Obs) -> tuple[str, str, str]:
    """(GPU, precision, dispatcher) of an observation's run (its estimate closure, calibrate._built), or '?' where it
    has none (ratios of layer benchmarks, the 'without CP' rows)."""
    t: Any = (o.predict.__defaults__ or (None,))[0]
    cells = [c.cell_contents for c in (getattr(t, "__closure__", None) or ())]
    gpu = next((c for c in cells if hasattr(c, "sms")), None)
    cfg = next((c for c in cells if hasattr(c, "precision")), None)
    return (gpu.name if gpu else "?", cfg.precision if cfg else "?", cfg.dispatcher if cfg else "?")


def pinned_fit(obs: list[C.Obs], epilogue_s: float, iters: int) -> Calibration:
    """calibrate.fit of every FITTED constant but gemm_epilogue_s, which stays at ``epilogue_s``."""
    fitted = C.FITTED
    base = DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": epilogue_s})
    from_z = C.from_z
    try:
        C.FITTED = tuple(f for f in fitted if f[0] != "gemm_epilogue_s")
        C.from_z = lambda z, b=base: from_z(z, b)  # type: ignore[assignment]
        z = C.fit(obs, C.to_z(DEFAULT_CALIBRATION), C.to_z(C.PRIOR), iters)
        return C.from_z(z)
    finally:
        C.FITTED, C.from_z = fitted, from_z  # type: ignore[assignment]


def blackwell_scan(obs: list[C.Obs], factors: list[float], iters: int) -> list[tuple[float, float]]:
    """(factor, fitted sum of squares) with the depth penalty multiplied by ``factor`` on Blackwell GPUs only (>= 148
    SMs), the source value on Hopper, the other constants refitted."""
    orig = gemm_mod.gemm_k_half
    out = []
    try:
        for f in factors:
            gemm_mod.gemm_k_half = lambda rate, sms, cal, f=f: orig(rate, sms, cal) * (f if sms >= 148 else 1.0)
            h = C.residuals(obs, pinned_fit(obs, C.PRIOR.gemm_epilogue_s, iters))
            out.append((f, float(h @ h)))
    finally:
        gemm_mod.gemm_k_half = orig
    return out


def hybridep_copy_scan(obs: list[C.Obs], costs_s: list[float], iters: int) -> list[tuple[float, float]]:
    """(cost, fitted sum of squares) with a trial time per received token copy added to each HybridEP dispatch and
    combine (tokens x timing.moe.expected_ranks_hit, the copies its kernels move; not modelled: no HybridEP
    benchmark at hidden 2,048-4,096 pins it), gemm_epilogue_s at its source value, the other constants refitted."""
    orig = moe_mod.ep_kernels

    def with_copy_cost(ctx: Any, moe: Any, cost: float) -> tuple[float, float, float]:
        d, c, p = orig(ctx, moe)
        par = ctx.cfg.parallel
        if ctx.cfg.dispatcher == "hybridep" and par.ep > 1:
            extra = cost * ctx.tokens * ctx.cfg.rows_factor * moe_mod.expected_ranks_hit(moe, par.ep)
            d, c = d + extra, c + extra
        return d, c, p

    out = []
    try:
        for cost in costs_s:
            moe_mod.ep_kernels = layer_mod.ep_kernels = (  # type: ignore[assignment]
                lambda ctx, moe, cost=cost: with_copy_cost(ctx, moe, cost))
            h = C.residuals(obs, pinned_fit(obs, C.PRIOR.gemm_epilogue_s, iters))
            out.append((cost, float(h @ h)))
    finally:
        moe_mod.ep_kernels = layer_mod.ep_kernels = orig  # type: ignore[assignment]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--iters", type=int, default=6)
    args = ap.parse_args()
    obs = C.observations()
    src = C.PRIOR.gemm_epilogue_s
    h_ship = C.residuals(obs, DEFAULT_CALIBRATION)
    cal = pinned_fit(obs, src, args.iters)
    h = C.residuals(obs, cal)
    dh = (C.residuals(obs, cal.with_overrides({"gemm_epilogue_s": src * math.exp(STEP_LOG)})) - h) / STEP_LOG
    pull = -h * dh
    shipped = DEFAULT_CALIBRATION.gemm_epilogue_s
    print(f"{len(obs)} observations; fitted sum of squares: shipped (gemm_epilogue_s {shipped:.3e}) "
          f"{float(h_ship @ h_ship):.3f}, pinned at the source {src:.3e} {float(h @ h):.3f}; "
          f"total pull {pull.sum():+.4f}")
    by_gpu: dict[str, float] = defaultdict(float)
    by_disp: dict[str, float] = defaultdict(float)
    by_run: dict[tuple[str, str], list[float]] = defaultdict(list)
    for o, p in zip(obs, pull):
        g, prec, disp = run_of(o)
        by_gpu[g] += float(p)
        by_disp[disp] += float(p)
        by_run[(g, prec)].append(float(p))
    print("pull by GPU: " + ", ".join(f"{g} {v:+.4f} ({v / pull.sum():.0%})"
                                      for g, v in sorted(by_gpu.items(), key=lambda kv: -kv[1])))
    print("pull by EP dispatcher: " + ", ".join(f"{d} {v:+.4f} ({v / pull.sum():.0%})"
                                                 for d, v in sorted(by_disp.items(), key=lambda kv: -kv[1])))
    print("pull by GPU x precision: " + ", ".join(f"{g}/{p} {sum(v):+.4f} (n={len(v)})"
                                                for (g, p), v in sorted(by_run.items(), key=lambda kv: -sum(kv[1]))))
    print("rows that pull most (pinned fit's level-contrast residual h, dh / dlog gemm_epilogue_s):")
    for i in np.argsort(-pull)[:args.top]:
        g, prec, disp = run_of(obs[i])
        print(f"  {pull[i]:+.4f}  {obs[i].group:9s} {g:8s} {prec:6s} {disp:8s} h {h[i]:+.3f} dh {dh[i]:+.3f}  "
              f"{obs[i].label[:60]}")
    print("Blackwell-only depth penalty (source value on Hopper): " + ", ".join(
        f"x{f:g} SS {ss:.3f}" for f, ss in blackwell_scan(obs, [1.0, 2.0, 4.0, 6.0, 8.0], args.iters)))
    print("trial HybridEP time per received copy (gemm_epilogue_s at its source): " + ", ".join(
        f"{c * 1e9:g} ns SS {ss:.3f}" for c, ss in hybridep_copy_scan(obs, [0.0, 2e-9, 4e-9, 6e-9, 8e-9, 10e-9],
                                                                      args.iters)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
