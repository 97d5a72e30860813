"""Which fitted rows pull gemm_epilogue_s above its source value (issue 31: the one knob that slows small-K GEMMs).

    python benchmarks/epilogue_pull.py [--top 25]

Refits every other constant (benchmarks/calibrate.py FITTED, from the shipped values, calibrate.fit) with
gemm_epilogue_s pinned at its source value (calibrate.PRIOR), then gives each observation's pull: minus its
residual (level_contrasts, as the fit scores it) times the residual's derivative in log gemm_epilogue_s, the share
of the fit's gradient toward a larger constant that the row contributes (half the derivative of its squared
residual). Printed: the error of the pinned and the shipped fit, the pull by GPU, by EP dispatcher and by GPU x
precision (each observation's first run: the estimates its prediction asks for, runs_of), the rows that pull most,
the Blackwell-only scan (the depth penalty on Blackwell GPUs alone multiplied, by the catalog entry's compute
capability: is_blackwell; the source value elsewhere) and a trial HybridEP time per received token copy (the source
value everywhere), each refitted. ~1.5 min on one core.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate as C  # noqa: E402
import moeplan.engine.timing.gemm as gemm_mod  # noqa: E402
import moeplan.engine.timing.layer as layer_mod  # noqa: E402
import moeplan.engine.timing.moe as moe_mod  # noqa: E402
from moeplan.base.deepep_configs import tp_ep_group_ranks  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration  # noqa: E402
from moeplan.engine.timing.context import Ctx  # noqa: E402
from moeplan.hardware.spec import GPUSpec  # noqa: E402
from moeplan.run.config import RunConfig  # noqa: E402

STEP_LOG = 0.05  # finite-difference step in log gemm_epilogue_s
# Blackwell: compute capability 10.0 and up (NVIDIA's CUDA GPUs list: Hopper 9.0, Blackwell 10.0, Blackwell Ultra
# 10.3), read from the GPU's catalog entry (compute_capability) as the engine reads it (GPUSpec.sm_arch: 90, 100, 103)
BLACKWELL_SM_ARCH = 100


def is_blackwell(gpu: GPUSpec) -> bool:
    """Whether ``gpu`` is a Blackwell GPU by its catalog entry's compute capability (one without it: not)."""
    return gpu.sm_arch is not None and gpu.sm_arch >= BLACKWELL_SM_ARCH


def _recorded_estimate(calls: list[tuple[RunConfig, GPUSpec]], estimate: Any, cfg: RunConfig, gpu: GPUSpec,
                       cal: Calibration, *args: Any, **kwargs: Any) -> Any:
    """``estimate`` (calibrate's estimate_time) that first records the run it is asked for in ``calls``."""
    calls.append((cfg, gpu))
    return estimate(cfg, gpu, cal, *args, **kwargs)


def runs_of(o: C.Obs) -> list[tuple[RunConfig, GPUSpec]]:
    """The runs (configuration, GPU) an observation's prediction estimates, in the order it estimates them: the
    arguments of each calibrate.estimate_time call (calibrate._built's estimates) while it predicts at the shipped
    constants; none for a prediction that times layers alone (the MoE-layer benchmark ratios)."""
    calls: list[tuple[RunConfig, GPUSpec]] = []
    with mock.patch.object(C, "estimate_time", partial(_recorded_estimate, calls, C.estimate_time)):
        o.predict(DEFAULT_CALIBRATION)
    return calls


def run_of(o: C.Obs) -> tuple[str, str, str]:
    """(GPU, precision, dispatcher) of the first run an observation estimates (runs_of), or '?' where it estimates
    none (the MoE-layer benchmark ratios)."""
    runs = runs_of(o)
    if not runs:
        return ("?", "?", "?")
    cfg, gpu = runs[0]
    return (gpu.name, cfg.precision, cfg.dispatcher)


def pinned_fit(obs: list[C.Obs], epilogue_s: float, iters: int) -> Calibration:
    """calibrate.fit of every FITTED constant but gemm_epilogue_s, which stays at ``epilogue_s``."""
    base = DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": epilogue_s})
    with mock.patch.object(C, "FITTED", tuple(f for f in C.FITTED if f[0] != "gemm_epilogue_s")), \
            mock.patch.object(C, "from_z", partial(C.from_z, base=base)):
        z = C.fit(obs, C.to_z(DEFAULT_CALIBRATION), C.to_z(C.PRIOR), iters)
        return C.from_z(z)


def _scaled_epilogue(cal: Calibration, factor: float, memo: dict[int, tuple[Calibration, Calibration]]) -> Calibration:
    """``cal`` with gemm_epilogue_s multiplied by ``factor`` (``memo``: the last calibration scaled, by identity)."""
    hit = memo.get(id(cal))
    if hit is None or hit[0] is not cal:
        memo.clear()
        hit = memo[id(cal)] = (cal, cal.with_overrides({"gemm_epilogue_s": cal.gemm_epilogue_s * factor}))
    return hit[1]


def _blackwell_gemm_time(gemm_time: Any, factor: float, memo: dict[int, tuple[Calibration, Calibration]], ctx: Ctx,
                         *args: Any) -> Any:
    """``gemm_time`` (timing.gemm._gemm_time_uncached) with the depth penalty (gemm_k_half, linear in gemm_epilogue_s,
    which nothing else reads) multiplied by ``factor`` where the run's GPU is a Blackwell one (is_blackwell)."""
    if is_blackwell(ctx.gpu):
        ctx = replace(ctx, cal=_scaled_epilogue(ctx.cal, factor, memo))
    return gemm_time(ctx, *args)


def blackwell_depth(factor: float) -> Any:
    """A context in which every GEMM on a Blackwell GPU (by its compute capability: is_blackwell) takes ``factor``
    times the depth penalty, those on other GPUs their own (timing.gemm._gemm_time_uncached patched)."""
    real = gemm_mod._gemm_time_uncached
    return mock.patch.object(gemm_mod, "_gemm_time_uncached", partial(_blackwell_gemm_time, real, factor, {}))


def blackwell_scan(obs: list[C.Obs], factors: list[float], iters: int) -> list[tuple[float, float]]:
    """(factor, fitted sum of squares) with the depth penalty multiplied by ``factor`` on Blackwell GPUs only
    (blackwell_depth), the source value on Hopper, the other constants refitted."""
    out = []
    for f in factors:
        with blackwell_depth(f):
            h = C.residuals(obs, pinned_fit(obs, C.PRIOR.gemm_epilogue_s, iters))
        out.append((f, float(h @ h)))
    return out


def _ep_kernels_with_copy(ep_kernels: Any, cost_s: float, ctx: Ctx, moe: Any) -> tuple[float, float, float]:
    """``ep_kernels`` (timing.moe.ep_kernels) with ``cost_s`` per received token copy added to each HybridEP dispatch
    and combine (tokens x the ranks of timing.moe.flex_token_copies, the copies its kernels move over the expert-TP x
    EP group, EP 1 x expert TP > 1 included)."""
    d, c, p = ep_kernels(ctx, moe)
    par = ctx.cfg.parallel
    if ctx.cfg.dispatcher == "hybridep" and tp_ep_group_ranks(par) > 1:
        copies, _ = moe_mod.flex_token_copies(moe, par, ctx.gpu.nvlink_domain)
        extra = cost_s * ctx.tokens * ctx.cfg.rows_factor * copies
        d, c = d + extra, c + extra
    return d, c, p


def hybridep_copy_scan(obs: list[C.Obs], costs_s: list[float], iters: int) -> list[tuple[float, float]]:
    """(cost, fitted sum of squares) with a trial time per received token copy added to each HybridEP dispatch and
    combine (_ep_kernels_with_copy; not modelled: no HybridEP benchmark at hidden 2,048-4,096 pins it),
    gemm_epilogue_s at its source value, the other constants refitted."""
    real = moe_mod.ep_kernels
    out = []
    for cost in costs_s:
        trial = partial(_ep_kernels_with_copy, real, cost)
        with mock.patch.object(moe_mod, "ep_kernels", trial), mock.patch.object(layer_mod, "ep_kernels", trial):
            h = C.residuals(obs, pinned_fit(obs, C.PRIOR.gemm_epilogue_s, iters))
        out.append((cost, float(h @ h)))
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
