"""Where the planner ranks each published layout (docs/calibration.md, "Known gaps", names the rows below 0.9).

For every published run (../shared/reference/published_runs.csv with its recipes' settings, and the
out-of-sample Megatron Bridge rows in tests/data/bridge_perf_runs.csv): run `moeplan plan` with the run's
model, system, GPU count, sequence length, GBS and numerics; report the published layout's rank among
the planner's plans, the published layout with the planner's best knobs over the planner's best, and the
planner's best layout (pinned/best is over the fastest estimate, so the tie-breaker cannot flatter it). Rows the catalogue marks with a modelling gap are skipped.

    python benchmarks/published_ranks.py [--top 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moeplan import api  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration  # noqa: E402
from tests.reference_runs import (  # noqa: E402
    LAYOUT_KEYS, bridge_runs, label, layout, plan_kwargs, published_runs, shared_dir)


def rank_row(run: dict[str, str], top: int, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, object]:
    kw = plan_kwargs(run) | {"cal": cal}
    plans = api.plan(run["model"], top=top, **kw)["plans"]
    mine = layout(run)
    key = tuple(mine[k] for k in LAYOUT_KEYS)
    rank = next((i + 1 for i, p in enumerate(plans) if tuple(p["parallel"][k] for k in LAYOUT_KEYS) == key), None)
    pinned = api.plan(run["model"], top=1, fixed=mine, **kw)["plans"]
    # against the FASTEST estimate, not plan 1: the tie-breaker may put a recipe layout first
    fastest = max(plans, key=lambda p: p["tokens_per_s_per_gpu"], default=None)
    ratio = (pinned[0]["tokens_per_s_per_gpu"] / fastest["tokens_per_s_per_gpu"]) if pinned and fastest else None
    return {"run": label(run), "rank": rank, "pinned_over_best": ratio,
            "plan1": _short(plans[0]) if plans else None, "fastest": _short(fastest) if fastest else None,
            "tie": bool(rank and plans[rank - 1]["tie"])}


def _short(p: dict) -> str:
    q = p["parallel"]
    return f"TP{q['tp']} PP{q['pp']} VPP{q['vpp']} CP{q['cp']} EP{q['ep']} MBS{p['mbs']} {p['dispatcher']}"


def runs() -> list[dict[str, str]]:
    """The published runs ranked: published_runs.csv with its recipes, and the Bridge rows without a named gap."""
    return published_runs(shared_dir() / "reference") + [r for r in bridge_runs() if not r["gap"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=100, help="plans searched for the published layout (default 100)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [rank_row(r, args.top) for r in runs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'run':44s} {'rank':>6s} {'pinned/best':>12s}  {'plan 1':44s} fastest estimate")
    for r in rows:
        rank = str(r["rank"]) if r["rank"] else f">{args.top}"
        ratio = f"{r['pinned_over_best']:.2f}" if r["pinned_over_best"] else "-"
        print(f"{r['run']:44s} {rank:>6s} {ratio:>12s}  {r['plan1'] or '-':44s} {r['fastest'] or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
