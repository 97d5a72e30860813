"""Paired wall time: how `moeplan plan` grows from 1,024 to 16,384 GPUs, judged pair by pair.

A min-of-3 row of benchmarks/plan_scale.py moves by 10-30% from run to run even on an idle machine, so the
ratio of two such rows can read 1.6x for a search that grows 1.2x. This script runs the 16,384-GPU and the
1,024-GPU command of each model / GPU / length in turn (A B A B ..., one core, after a warm-up pair), takes
the ratio of each pair, and reports the median: drift in the machine's speed then moves both sides of a
pair alike. The issue-17 goal: median ratio at most 1.3.

    python benchmarks/plan_growth_paired.py [--pairs 21] [--seqs 1M] [--models ...] [--gpus h100 gb200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_scale import GPUS, MODELS, _pin, _tok, compile_bytecode, gbs_for, run_once  # noqa: E402
from plan_growth_instructions import LARGE, SMALL, _seq  # noqa: E402

GOAL = 1.3


def command(model: str, gpu: str, gpus: int, seq: int) -> list[str]:
    return [*_pin(), sys.executable, "-m", "moeplan", "plan", model, "--gpu", gpu, "--gpus", str(gpus),
            "--seq-len", str(seq), "--gbs", str(gbs_for(gpus, seq)), "--json"]


def paired(model: str, gpu: str, seq: int, pairs: int) -> tuple[float, float, float, float, float]:
    """(median ratio, least, largest, median large s, median small s) of ``pairs`` interleaved pairs."""
    large, small = command(model, gpu, LARGE, seq), command(model, gpu, SMALL, seq)
    run_once(large), run_once(small)  # warm-up pair: page cache, bytecode
    times = [(run_once(large)[0], run_once(small)[0]) for _ in range(pairs)]
    ratios = [a / b for a, b in times]
    return (statistics.median(ratios), min(ratios), max(ratios), statistics.median(a for a, _ in times),
            statistics.median(b for _, b in times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=21, help="interleaved pairs per group (default 21)")
    ap.add_argument("--seqs", nargs="*", default=["1M"], help="sequence lengths (default 1M)")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--gpus", nargs="*", default=list(GPUS), help="GPU types (default h100 gb200)")
    args = ap.parse_args()
    if args.pairs < 1:
        ap.error("--pairs must be >= 1")
    print(f"{compile_bytecode()}; load average {os.getloadavg()[0]:.2f} at start; {args.pairs} pairs per group")
    print(f"{'model':<18} {'GPU':<6} {'seq':>4}  {'16,384 s':>8} {'1,024 s':>8}  {'median':>6}  range")
    worst = 0.0
    for m in args.models:
        for g in args.gpus:
            for seq in map(_seq, args.seqs):
                med, lo, hi, a, b = paired(m, g, seq, args.pairs)
                worst = max(worst, med)
                print(f"{m:<18} {g:<6} {_tok(seq):>4}  {a:8.3f} {b:8.3f}  {med:6.2f}  {lo:.2f}-{hi:.2f}", flush=True)
    print(f"largest median 16,384 / 1,024 ratio: {worst:.2f} (goal <= {GOAL}); "
          f"load average at end {os.getloadavg()[0]:.2f}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
