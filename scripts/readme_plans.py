"""Regenerate the README's "Three examples" block (plan 1 of three commands) from the planner (numbers come from the code, never by hand).

    python scripts/readme_plans.py          # rewrite the block between the markers in README.md
    python scripts/readme_plans.py --check  # exit 1 when README.md differs from what the planner says

The block lies between ``<!-- readme_plans:begin -->`` and ``<!-- readme_plans:end -->``. Each case is a
``moeplan plan`` command; the block shows plan 1's layout, knobs, memory, throughput with its band, and the
planner's own rationale for it (the same text ``moeplan plan`` prints under "Why plan 1").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from moeplan import api
from moeplan.run.parallel import Parallel

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- readme_plans:begin -->", "<!-- readme_plans:end -->"

# (title, model, gpu, gpus, seq_len, gbs, mcore_version): the README's three long-context cases
CASES = (
    ("DeepSeek-V3, 128K, 1,024 H100, GBS 1024", "deepseek-v3", "h100", 1024, 131072, 1024, None),
    ("Qwen3-235B-A22B, 128K, 256 GB200 (NVL72), GBS 256", "qwen3-235b-a22b", "gb200", 256, 131072, 256, None),
    ("Qwen3-Next-80B-A3B, 64K, 128 H100, GBS 256", "qwen3-next-80b-a3b", "h100", 128, 65536, 256, "0.18"),
)


def _short_len(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _layout(gpus: int, par: dict) -> str:
    """The layout as moeplan prints it everywhere (Parallel.short)."""
    return Parallel(gpus, par["tp"], par["pp"], par["vpp"], par["cp"], par["ep"], par["etp"]).short()


def _case(title: str, model: str, gpu: str, gpus: int, seq: int, gbs: int, version: str | None) -> list[str]:
    kw = {"mcore_version": version} if version else {}
    cmd = f"moeplan plan {model} --gpu {gpu} --gpus {gpus} --seq-len {_short_len(seq)} --gbs {gbs}"
    cmd += f" --mcore-version {version}" if version else ""
    p = api.plan(model, gpu=gpu, gpus=gpus, seq_len=seq, gbs=gbs, top=1, **kw)["plans"][0]
    graphs = ", ".join(p["cuda_graphs"]) or "off"
    disp = p["dispatcher"] + (" with EP A2A overlap" if p["ep_overlap"] else "")
    lo, hi = p["tflops_range"]
    head = (f"**{title}** (`{cmd}`) — `{_layout(gpus, p['parallel'])}`, MBS {p['mbs']}, recompute "
            f"`{p['recompute']}`, {disp}, CP comm `{p['cp_comm_type']}`, CUDA graphs {graphs}, optimizer offload "
            f"{p['optimizer_offload']:.0%}: {p['memory_gib']['total']:.1f} GiB/GPU, ~{p['tflops_per_gpu']:,.0f} "
            f"TFLOP/s/GPU ({lo:,.0f}-{hi:,.0f}), {p['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU.")
    return [head, *[f"- {r['topic']}: {r['text']}" for r in p["rationale"]], ""]


def block() -> str:
    lines = [BEGIN, ""]
    for case in CASES:
        lines += _case(*case)
    return "\n".join([*lines, END])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md is not up to date")
    args = ap.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"README.md has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + block() + tail
    if args.check:
        if new != text:
            print("README.md's plans are stale: run python scripts/readme_plans.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    print("wrote README.md (plans block)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
