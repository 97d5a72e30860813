"""Instructions, not seconds: how `moeplan plan` grows from 1,024 to 16,384 GPUs, on a shared machine.

Wall and CPU time of a 0.3 s process move by 10-50% when other work shares the machine (its caches, the
other logical CPU of the core), which hides the issue-17 growth goal (time at 16,384 GPUs at most 1.3x the
time at 1,024 for the same model, GPU and length; benchmarks/plan_scale.py). This script runs the same
whole-process commands as plan_scale.py under valgrind's cachegrind without cache simulation, which
counts the instructions the process executes: the same count on every run (PYTHONHASHSEED=0, bytecode
compiled first), whatever else runs. Instructions are not time (the search touches more memory per
instruction than the imports), so this checks a change's effect on the growth, not the goal itself.

    python benchmarks/plan_growth_instructions.py [--seqs 1M 128K] [--models ...] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_scale import GPUS, MODELS, _tok, compile_bytecode, gbs_for  # noqa: E402

REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
SMALL, LARGE = 1024, 16384


def instructions(model: str, gpu: str, gpus: int, seq: int) -> int:
    """Instructions executed by one `moeplan plan ... --json` process (cachegrind, no cache simulation)."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-m", "moeplan", "plan", model, "--gpu", gpu, "--gpus", str(gpus), "--seq-len", str(seq),
           "--gbs", str(gbs_for(gpus, seq)), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    m = REFS.search(proc.stderr)
    if proc.returncode not in (0, 1) or m is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return int(m.group(1).replace(",", ""))


def _seq(text: str) -> int:
    t = text.strip().upper()
    if t.endswith("M"):
        return int(t[:-1]) * 1048576
    if t.endswith("K"):
        return int(t[:-1]) * 1024
    return int(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", nargs="*", default=["1M"], help="sequence lengths (default 1M; e.g. 4K 32K 128K 1M)")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing measured")
        return 0
    print(f"{compile_bytecode()}; PYTHONHASHSEED=0; cachegrind instruction counts", flush=True)
    head = ["model", "GPU", "seq", f"{SMALL:,} GPUs (M instr)", f"{LARGE:,} GPUs (M instr)", "ratio"]
    body = []
    for m in args.models:
        for g in GPUS:
            for s in map(_seq, args.seqs):
                a, b = instructions(m, g, SMALL, s), instructions(m, g, LARGE, s)
                body.append([m, g, _tok(s), f"{a / 1e6:,.0f}", f"{b / 1e6:,.0f}", f"{b / a:.3f}"])
                print(f"  {m} {g} {_tok(s)}: {a / 1e6:,.0f}M -> {b / 1e6:,.0f}M ({b / a:.3f}x)", file=sys.stderr, flush=True)
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "|".join("---" for _ in head) + "|")
        print("\n".join("| " + " | ".join(r) + " |" for r in body))
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        print("\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [head, *body]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
