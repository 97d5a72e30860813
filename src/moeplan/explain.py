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
from moeplan.estimate import Estimate
from moeplan.megatron.export import to_overrides
from moeplan.memory import GIB, MEMORY_ITEMS
from moeplan.planner import NewerRelease, Plan, plan_layout
from moeplan.vocab import RESOLVED_GAIN

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
    a: Estimate
    b: Estimate
    reasons: tuple[Reason, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"a": _summary(self.a), "b": _summary(self.b), "reasons": [r.as_dict() for r in self.reasons]}


def _summary(e: Estimate) -> dict[str, Any]:
    keys = ("model", "gpu", "gpus", "seq_len", "gbs", "parallel", "recompute", "dispatcher", "fsdp", "tflops_per_gpu",
            "tokens_per_s_per_gpu", "step_time_s", "memory_gib", "time_breakdown_s", "fits")
    full = e.as_dict()
    return {k: full[k] for k in keys if k in full}


def _run_label(e: Estimate) -> str:
    return f"seq {e.config.batch.seq_len:,} {plan_layout(e.config)}"


def _fit_note(name: str, e: Estimate) -> Reason | None:
    """A run that does not fit in its GPU's memory: its numbers are estimates of a run that cannot start."""
    mem = e.memory
    if mem.fits:
        return None
    return Reason("fits", f"Run {name} does not fit: {mem.total_bytes / GIB:,.1f} GiB per GPU on a "
                  f"{mem.capacity_bytes / GIB:,.1f} GiB {e.gpu.name} ({_run_label(e)}); its throughput is what it would "
                  "run at with the memory, not a run that can start.",
                  {"run": name, "memory_gib": round(mem.total_bytes / GIB, 2),
                   "capacity_gib": round(mem.capacity_bytes / GIB, 2)})


def _tokens_per_gpu(e: Estimate) -> float:
    b = e.config.batch
    return b.gbs * b.seq_len / e.config.parallel.gpus


def compare(a: Estimate, b: Estimate) -> Comparison:
    """Explain run ``b`` against run ``a``."""
    reasons: list[Reason] = [r for r in (_fit_note("A", a), _fit_note("B", b)) if r is not None]
    ta, tb = a.time.tokens_per_s_per_gpu, b.time.tokens_per_s_per_gpu
    change = tb / ta - 1
    verb = "fell" if change < 0 else "rose"
    reasons.append(Reason("throughput", f"Throughput {verb} {abs(change):.0%}: {ta:,.0f} -> {tb:,.0f} tokens/s/GPU "
                          f"({a.time.tflops_per_gpu:,.0f} -> {b.time.tflops_per_gpu:,.0f} TFLOP/s/GPU) from "
                          f"{_run_label(a)} to {_run_label(b)}.",
                          {"tokens_per_s": [round(ta), round(tb)], "change": round(change, 4)}))
    # FLOPs per token: attention share (model FLOPs grow with S; TFLOP/s credit them)
    fa, fb = a.time.flops_per_token, b.time.flops_per_token
    ba, bb = a.time.breakdown_s, b.time.breakdown_s
    step_a, step_b = a.time.step_time_s, b.time.step_time_s
    sa = ba.get("attention", 0.0) / step_a
    sb = bb.get("attention", 0.0) / step_b
    reasons.append(Reason("flops", f"FLOPs per token {fa / 1e9:,.1f} -> {fb / 1e9:,.1f} G ({fb / fa - 1:+.0%}); "
                          f"attention kernels take {sa:.0%} -> {sb:.0%} of the step.",
                          {"flops_per_token": [fa, fb], "attention_time_share": [round(sa, 3), round(sb, 3)]}))
    # per-token time by item
    tok_a, tok_b = _tokens_per_gpu(a), _tokens_per_gpu(b)
    deltas = {}
    for k in [*ba, *(k for k in bb if k not in ba)]:  # a fixed order: the same JSON and sum every run
        deltas[k] = bb.get(k, 0.0) / tok_b - ba.get(k, 0.0) / tok_a
    total = sum(deltas.values())
    movers = sorted(deltas.items(), key=lambda kv: -abs(kv[1]))[:5]
    parts = []
    for k, d in movers:
        if abs(d) < 1e-12:
            continue
        share = d / total if total else 0.0
        pa = ba.get(k, 0.0) / step_a
        pb = bb.get(k, 0.0) / step_b
        parts.append(f"{LABELS.get(k, k)} {d * 1e6:+,.2f} us/token ({share:+.0%} of the change; {pa:.0%} -> {pb:.0%} of the step)")
    reasons.append(Reason("time", "Time per token changed by " + f"{total * 1e6:+,.2f} us/token per GPU: " + "; ".join(parts) + ".",
                          {"us_per_token_delta": {k: round(v * 1e6, 4) for k, v in deltas.items()}}))
    # exposed communication and bubble, explicitly
    for key in ("cp_comm", "ep_comm", "pp_bubble", "dp_comm", "recompute"):
        xa, xb = ba.get(key, 0.0), bb.get(key, 0.0)
        if xa < 0.005 * step_a and xb < 0.005 * step_b:
            continue  # under half a percent of the step in both runs
        reasons.append(Reason(key, f"{LABELS[key]}: {xa:,.2f} s ({xa / step_a:.0%}) -> {xb:,.2f} s "
                              f"({xb / step_b:.0%}) per step.", {"s": [round(xa, 3), round(xb, 3)]}))
    # memory
    ma, mb = a.memory.as_gib(), b.memory.as_gib()
    mem_moves = sorted(((k, mb.get(k, 0.0) - ma.get(k, 0.0)) for k in MEMORY_ITEMS), key=lambda kv: -abs(kv[1]))[:3]
    moved = ", ".join(f"{k} {d:+,.1f} GiB" for k, d in mem_moves if abs(d) >= 0.05)
    reasons.append(Reason("memory", f"Memory per GPU {ma['total']:,.1f} -> {mb['total']:,.1f} GiB"
                          + (f": {moved}." if moved else " (no item moved by 0.05 GiB or more)."),
                          {"total_gib": [round(ma["total"], 2), round(mb["total"], 2)]}))
    return Comparison(a, b, tuple(reasons))


def remedy(b: Estimate, best: Plan | None, newer: NewerRelease | None = None) -> Reason:
    """What fixes run ``b``: the planner's best plan for the same model, GPUs and length; ``newer``: what
    a newer Megatron-Core release would plan instead (moeplan.planner.NewerRelease), said when it gains."""
    unlock = newer is not None and newer.config is not None and (newer.gain is None or newer.gain > RESOLVED_GAIN)
    said = newer is not None and newer.config is not None  # the release gate is said, gain or not
    more = {"newer": newer.as_dict()} if newer is not None and said else {}
    tail = " " + newer.sentence() if newer is not None and said else ""
    if best is None:
        return Reason("fix", "No layout fits at this length on these GPUs; see `moeplan plan` for the closest one."
                      + tail, more)
    cfg, est = best.config, best.estimate
    overrides = to_overrides(cfg, cfg.mcore_version)
    seq = b.config.batch.seq_len
    best_gib = est.memory.total_bytes / GIB
    if not b.memory.fits:
        return Reason("fix", f"Run B does not fit in memory ({b.memory.total_bytes / GIB:,.1f} GiB); the planner's best at "
                      f"seq {seq:,} is {plan_layout(cfg)}, "
                      f"recompute {cfg.recompute.label()}: {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU in "
                      f"{best_gib:,.1f} GiB.{tail}", {"overrides": overrides, **more})
    gain = est.time.tokens_per_s_per_gpu / b.time.tokens_per_s_per_gpu - 1
    text = (f"Planner at seq {seq:,}: {plan_layout(cfg)}, "
            f"recompute {cfg.recompute.label()}, {cfg.dispatcher}"
            f"{', CP ' + cfg.cp_comm_type if cfg.parallel.cp > 1 else ''}: {est.time.tokens_per_s_per_gpu:,.0f} "
            f"tokens/s/GPU ({gain:+.0%}) in {best_gib:,.1f} GiB.")
    if gain <= RESOLVED_GAIN and not unlock:
        text += " The run is already at the planner's best: the drop is inherent to the longer sequence (attention grows as S^2)."
    elif gain <= RESOLVED_GAIN:
        text += f" The run is already at the planner's best for Megatron-Core {cfg.mcore_version}."
    return Reason("fix", text + tail, {"gain": round(gain, 4), "overrides": overrides, **more})


__all__ = ["Comparison", "compare", "remedy"]
