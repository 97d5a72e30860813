"""Whole-process speed of the plan search (the brief: under 1 s on one core).

Runs `moeplan plan deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 --json` (every knob
searched) as a fresh process, pinned to one core where `taskset` exists, several times, and
reports min / median wall time. Then the same for a search where nothing fits, so the planner halves
GBS to 1 (16 times) before it gives up, exit 1 (`moeplan plan deepseek-v3 --gpus 32 --seq-len 4k --gbs 65536
--json`; it once went from 0.25 s to ~1 s unnoticed). Exit code 1 if either median is over its limit,
2 if a run exits otherwise than expected (0 for the headline search, 1 for the one where nothing fits).

    python benchmarks/plan_speed.py [--runs 5] [--limit 1.0] [--no-fit-limit 1.0] [-- extra plan args]

With plan args only that command is timed (it must exit 0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from plan_scale import compile_bytecode, machine

DEFAULT = ["deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--json"]
NO_FIT = ["deepseek-v3", "--gpus", "32", "--seq-len", "4k", "--gbs", "65536", "--json"]  # halves GBS to 1, exit 1


def time_runs(cmd: list[str], runs: int, expect_rc: int) -> tuple[list[float], list[float]] | None:
    """Wall and CPU seconds of ``runs`` fresh processes; None (after printing its stderr) if one exits otherwise
    than ``expect_rc``."""
    times, cpus = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time (user + system)
        times.append(time.perf_counter() - t0)
        cpus.append(usage.ru_utime + usage.ru_stime)
        err = proc.stderr.read().decode() if proc.stderr else ""
        proc.stderr.close()  # type: ignore[union-attr]
        rc = os.waitstatus_to_exitcode(status)
        if rc != expect_rc:
            print(f"{' '.join(cmd)}: exit {rc}, expected {expect_rc}\n{err}", file=sys.stderr)
            return None
    return times, cpus


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--limit", type=float, default=1.0, help="seconds (median)")
    ap.add_argument("--no-fit-limit", type=float, default=1.0, help="seconds (median), the no-fit GBS-halving case")
    ap.add_argument("--core", type=int, default=0, help="the core to pin each run to (default 0)")
    ap.add_argument("plan_args", nargs="*", help="arguments after `moeplan plan` (default: DeepSeek-V3 case)")
    args = ap.parse_args()
    pin = ["taskset", "-c", str(args.core)] if shutil.which("taskset") else []
    cases = [("", args.plan_args or DEFAULT, 0, args.limit)]
    if not args.plan_args:
        cases.append(("nothing fits, GBS halved 65,536 -> 1 (exit 1): ", NO_FIT, 1, args.no_fit_limit))
    print(f"machine: {machine()}; {compile_bytecode()}")
    over = False
    for label, plan_args, expect_rc, limit in cases:
        cmd = [*pin, sys.executable, "-m", "moeplan", "plan", *plan_args]
        timed = time_runs(cmd, args.runs, expect_rc)
        if timed is None:
            return 2
        times, cpus = timed
        med = statistics.median(times)
        over = over or med > limit
        print(f"{label}{' '.join(cmd[cmd.index('plan'):])}")
        print(f"whole process, {args.runs} runs, one core: wall min {min(times):.3f} s, median {med:.3f} s; "
              f"CPU min {min(cpus):.3f} s, median {statistics.median(cpus):.3f} s (limit {limit} s)")
    if hasattr(os, "getloadavg"):
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
