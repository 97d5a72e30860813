"""Why one run is faster or slower than another: the change in throughput attributed to the items
of the time model (per token), the FLOPs mix, and memory; plus what the planner would do instead.

Attribution: time per token of item i is t_i / tokens; the throughput change follows from the sum
of per-token item changes, so each item's share of the drop is its per-token change over the total
per-token change (an exact decomposition of the step-time difference per token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeplan.advice import Reason
from moeplan.memory import MEMORY_ITEMS

LABELS = {
    "gemm": "dense GEMMs", "grouped_gemm": "expert grouped GEMMs", "attention": "attention kernels",
    "linear_attention": "Gated DeltaNet kernels", "elementwise": "element-wise / memory-bound work",
    "recompute": "recompute", "tp_comm": "exposed TP communication", "cp_comm": "exposed CP communication",
    "ep_comm": "exposed EP dispatch/combine", "pp_comm": "PP send/recv", "pp_bubble": "pipeline bubble",
    "dp_comm": "exposed DP communication", "optimizer": "optimizer step", "offload": "optimizer CPU offload",
    "launch_overhead": "kernel launch overhead",
}


@dataclass(frozen=True)
class Comparison:
    a: dict[str, Any]
    b: dict[str, Any]
    reasons: tuple[Reason, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"a": _summary(self.a), "b": _summary(self.b), "reasons": [r.as_dict() for r in self.reasons]}


def _summary(e: dict[str, Any]) -> dict[str, Any]:
    keys = ("model", "gpu", "gpus", "seq_len", "gbs", "parallel", "recompute", "dispatcher", "tflops_per_gpu",
            "tokens_per_s_per_gpu", "step_time_s", "memory_gib", "time_breakdown_s", "fits")
    return {k: e[k] for k in keys if k in e}


def _run_label(e: dict[str, Any]) -> str:
    p = e["parallel"]
    return f"seq {e['seq_len']:,} TP{p['tp']} PP{p['pp']} CP{p['cp']} EP{p['ep']} DP{p['dp']}"


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Explain run ``b`` against run ``a`` (both estimate dicts from moeplan.api.estimate)."""
    reasons: list[Reason] = []
    ta, tb = a["tokens_per_s_per_gpu"], b["tokens_per_s_per_gpu"]
    change = tb / ta - 1
    verb = "fell" if change < 0 else "rose"
    reasons.append(Reason("throughput", f"Throughput {verb} {abs(change):.0%}: {ta:,.0f} -> {tb:,.0f} tokens/s/GPU "
                          f"({a['tflops_per_gpu']:,.0f} -> {b['tflops_per_gpu']:,.0f} TFLOP/s/GPU) from "
                          f"{_run_label(a)} to {_run_label(b)}.",
                          {"tokens_per_s": [round(ta), round(tb)], "change": round(change, 4)}))
    # FLOPs per token: attention share (model FLOPs grow with S; TFLOP/s credit them)
    fa, fb = a["flops_per_token"], b["flops_per_token"]
    sa = a["time_breakdown_s"].get("attention", 0.0) / a["step_time_s"]
    sb = b["time_breakdown_s"].get("attention", 0.0) / b["step_time_s"]
    reasons.append(Reason("flops", f"FLOPs per token {fa / 1e9:,.1f} -> {fb / 1e9:,.1f} G ({fb / fa - 1:+.0%}); "
                          f"attention kernels take {sa:.0%} -> {sb:.0%} of the step.",
                          {"flops_per_token": [fa, fb], "attention_time_share": [round(sa, 3), round(sb, 3)]}))
    # per-token time by item
    tok_a = a["gbs"] * a["seq_len"] / a["gpus"]
    tok_b = b["gbs"] * b["seq_len"] / b["gpus"]
    deltas = {}
    for k in set(a["time_breakdown_s"]) | set(b["time_breakdown_s"]):
        deltas[k] = b["time_breakdown_s"].get(k, 0.0) / tok_b - a["time_breakdown_s"].get(k, 0.0) / tok_a
    total = sum(deltas.values())
    movers = sorted(deltas.items(), key=lambda kv: -abs(kv[1]))[:5]
    parts = []
    for k, d in movers:
        if abs(d) < 1e-12:
            continue
        share = d / total if total else 0.0
        pa = a["time_breakdown_s"].get(k, 0.0) / a["step_time_s"]
        pb = b["time_breakdown_s"].get(k, 0.0) / b["step_time_s"]
        parts.append(f"{LABELS.get(k, k)} {d * 1e6:+,.2f} us/token ({share:+.0%} of the change; {pa:.0%} -> {pb:.0%} of the step)")
    reasons.append(Reason("time", "Time per token changed by " + f"{total * 1e6:+,.2f} us/token per GPU: " + "; ".join(parts) + ".",
                          {"us_per_token_delta": {k: round(v * 1e6, 4) for k, v in deltas.items()}}))
    # exposed communication and bubble, explicitly
    for key in ("cp_comm", "ep_comm", "pp_bubble", "dp_comm", "recompute"):
        xa, xb = a["time_breakdown_s"].get(key, 0.0), b["time_breakdown_s"].get(key, 0.0)
        if xa < 0.005 * a["step_time_s"] and xb < 0.005 * b["step_time_s"]:
            continue  # under half a percent of the step in both runs
        reasons.append(Reason(key, f"{LABELS[key]}: {xa:,.2f} s ({xa / a['step_time_s']:.0%}) -> {xb:,.2f} s "
                              f"({xb / b['step_time_s']:.0%}) per step.", {"s": [round(xa, 3), round(xb, 3)]}))
    # memory
    ma, mb = a["memory_gib"], b["memory_gib"]
    mem_moves = sorted(((k, mb.get(k, 0.0) - ma.get(k, 0.0)) for k in MEMORY_ITEMS), key=lambda kv: -abs(kv[1]))[:3]
    moved = ", ".join(f"{k} {d:+,.1f} GiB" for k, d in mem_moves if abs(d) >= 0.05)
    reasons.append(Reason("memory", f"Memory per GPU {ma['total']:,.1f} -> {mb['total']:,.1f} GiB"
                          + (f": {moved}." if moved else " (no item moved by 0.05 GiB or more)."),
                          {"total_gib": [round(ma["total"], 2), round(mb["total"], 2)]}))
    return Comparison(a, b, tuple(reasons))


def remedy(b: dict[str, Any], best_plan: dict[str, Any] | None) -> Reason:
    """What fixes run ``b``: the planner's best plan for the same model, GPUs and length."""
    if best_plan is None:
        return Reason("fix", "No layout fits at this length on these GPUs; see `moeplan plan` for the closest one.")
    if not b.get("fits", True):
        p = best_plan["parallel"]
        return Reason("fix", f"Run B does not fit in memory ({b['memory_gib']['total']:,.1f} GiB); the planner's best at "
                      f"seq {b['seq_len']:,} is TP{p['tp']} PP{p['pp']} VPP{p['vpp']} CP{p['cp']} EP{p['ep']} DP{p['dp']}, "
                      f"recompute {best_plan['recompute']}: {best_plan['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU in "
                      f"{best_plan['memory_gib']['total']:,.1f} GiB.", {"overrides": best_plan.get("overrides", [])})
    gain = best_plan["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"] - 1
    p = best_plan["parallel"]
    text = (f"Planner at seq {b['seq_len']:,}: TP{p['tp']} PP{p['pp']} VPP{p['vpp']} CP{p['cp']} EP{p['ep']} DP{p['dp']}, "
            f"recompute {best_plan['recompute']}, {best_plan['dispatcher']}"
            f"{', CP ' + best_plan['cp_comm_type'] if p['cp'] > 1 else ''}: {best_plan['tokens_per_s_per_gpu']:,.0f} "
            f"tokens/s/GPU ({gain:+.0%}) in {best_plan['memory_gib']['total']:,.1f} GiB.")
    if gain <= 0.01:
        text += " The run is already at the planner's best: the drop is inherent to the longer sequence (attention grows as S^2)."
    return Reason("fix", text, {"gain": round(gain, 4), "overrides": best_plan.get("overrides", [])})


__all__ = ["Comparison", "compare", "remedy"]
