"""Probe: does freeing one more global constant lower the fit's leave-one-group-out CV? (issue #31)

Imports the fit from benchmarks/calibrate.py (observations, fit, residuals, to_z / from_z, posterior_sd) and runs
the same CV loop as its main(): the full fit from the source values (tests/fit_prior.py), then for each group a
refit without it, started from the full fit. Nothing is written; calibrate.py's FITTED is extended in this process
only. Ratio-like constants that are not efficiencies (bytes per byte or per parameter) are fitted in log space.

    python benchmarks/free_constant_probe.py                      # the shipped FITTED
    python benchmarks/free_constant_probe.py hbm_eff tp_hidden    # FITTED + these
    python benchmarks/free_constant_probe.py --iters 16 --cv-iters 8
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate as c  # noqa: E402

# Not efficiencies (not in (0, 1)): log space like the seconds.
LOG_SPACE = {"elementwise_traffic", "optimizer_bytes_per_param"}


def _cost(obs: list, z: np.ndarray, prior: np.ndarray) -> float:
    r = np.concatenate([c._weights(obs) * c.residuals(obs, c.from_z(z)), (z - prior) / c.PRIOR_SD])
    return float(r @ r)


def run(extra: list[str], iters: int, cv_iters: int | None) -> dict:
    orig_is_eff = c._is_eff
    c._is_eff = lambda name: name not in LOG_SPACE and orig_is_eff(name)
    c.FITTED = tuple(c.FITTED) + tuple((n, None) for n in extra)
    obs = c.observations()
    prior = c.to_z(c.PRIOR)
    t = time.time()
    z = c.fit(obs, prior, prior, iters)
    cost = _cost(obs, z, prior)
    r_fit = c.residuals(obs, c.from_z(z))
    sd = c.posterior_sd(obs, z, prior)
    groups = sorted({o.group for o in obs})
    cvi = cv_iters if cv_iters is not None else max(3, iters // 2)
    cv: dict[str, np.ndarray] = {}
    for g in groups:
        keep = [o for o in obs if o.group != g]
        held = [o for o in obs if o.group == g]
        zg = c.fit(keep, z, prior, cvi)
        cv[g] = c.residuals(held, c.from_z(zg))
    all_cv = np.concatenate(list(cv.values()))
    out = {
        "extra": extra, "iters": iters, "cv_iters": cvi, "n": len(obs),
        "cv": math.sqrt(float(np.mean(all_cv**2))), "cv_ss": float(all_cv @ all_cv),
        "fit_rms": math.sqrt(float(np.mean(r_fit**2))), "cost": cost, "secs": round(time.time() - t, 1),
        "by_group": {g: round(math.sqrt(float(np.mean(v**2))), 4) for g, v in cv.items()},
        "constants": [],
    }
    for i, (name, key) in enumerate(c.FITTED):
        src = c._get(c.PRIOR, name, key)
        val = c._get(c.from_z(z), name, key)
        out["constants"].append({"name": name + (f"[{key}]" if key else ""), "source": src, "fitted": val,
                                 "sd_post": float(sd[i]), "pinned": float(sd[i] / c.PRIOR_SD)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("extra", nargs="*", help="constants to free on top of calibrate.FITTED")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--cv-iters", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args.extra, args.iters, args.cv_iters)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"extra={out['extra']} iters={out['iters']} cv_iters={out['cv_iters']} n={out['n']} "
          f"CV={out['cv']:.4f} (ss {out['cv_ss']:.4f}) fit_rms={out['fit_rms']:.4f} cost={out['cost']:.5f} "
          f"[{out['secs']} s]")
    print("  worst:", ", ".join(f"{g} {v:.3f}" for g, v in sorted(out["by_group"].items(), key=lambda kv: -kv[1])[:8]))
    for k in out["constants"]:
        print(f"  {k['name']:34s} source {k['source']:.4g} fitted {k['fitted']:.4g} sd_post {k['sd_post']:.3f} "
              f"(pinned {k['pinned']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
