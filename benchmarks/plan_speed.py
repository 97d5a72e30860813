"""Whole-process speed of the plan search (the brief: under 1 s on one core).

Runs `moeplan plan deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 --json` (every knob
searched) as a fresh process, pinned to one core where `taskset` exists, several times, and
reports min / median wall time. Exit code 1 if the median is over the limit.

    python benchmarks/plan_speed.py [--runs 5] [--limit 1.0] [-- extra plan args]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--limit", type=float, default=1.0, help="seconds (median)")
    ap.add_argument("--core", type=int, default=0, help="the core to pin each run to (default 0)")
    ap.add_argument("plan_args", nargs="*", help="arguments after `moeplan plan` (default: DeepSeek-V3 case)")
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "moeplan", "plan", *(args.plan_args or DEFAULT)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(args.core), *cmd]
    print(f"machine: {machine()}; {compile_bytecode()}")
    times, cpus = [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time (user + system)
        times.append(time.perf_counter() - t0)
        cpus.append(usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            print(proc.stderr.read().decode() if proc.stderr else "", file=sys.stderr)
            return 2
        proc.stderr.close()  # type: ignore[union-attr]
    med = statistics.median(times)
    print(f"{' '.join(cmd[cmd.index('plan'):])}")
    print(f"whole process, {args.runs} runs, one core: wall min {min(times):.3f} s, median {med:.3f} s; "
          f"CPU min {min(cpus):.3f} s, median {statistics.median(cpus):.3f} s (limit {args.limit} s)")
    if hasattr(os, "getloadavg"):
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0 if med <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
