"""Why one run is faster or slower than another: the change in throughput attributed to the items
of the time model (per token), the FLOPs mix, and memory; plus what the planner would do instead.

Attribution: time per token of item i is t_i / tokens; the throughput change follows from the sum
of per-token item changes, so each item's share of the drop is its per-token change over the total
per-token change (an exact decomposition of the step-time difference per token).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from moeplan.base.vocab import RESOLVED_GAIN
from moeplan.engine.estimate import Estimate
from moeplan.engine.memory import GIB, MEMORY_ITEMS
from moeplan.megatron.export import to_overrides
from moeplan.plan.advice import Reason
from moeplan.plan.space import NewerRelease, Plan, plan_layout
from moeplan.run.config import RunConfig

LABELS = {
    "gemm": "dense GEMMs", "grouped_gemm": "expert grouped GEMMs", "attention": "attention kernels",
    "linear_attention": "Gated DeltaNet / Mamba-2 SSD kernels", "elementwise": "element-wise / memory-bound work",
    "recompute": "recompute", "tp_comm": "exposed TP communication", "cp_comm": "exposed CP communication",
    "ep_comm": "exposed EP dispatch/combine", "pp_comm": "PP send/recv", "pp_bubble": "pipeline bubble",
    "dp_comm": "exposed DP communication", "optimizer": "optimizer step", "offload": "optimizer CPU offload",
    "launch_overhead": "kernel launch overhead", "act_offload": "exposed activation offload copies",
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
            "tokens_per_s_per_gpu", "step_time_s", "memory_gib", "time_breakdown_s", "fits", "outside_fit",
            "outside_fit_note")
    full = e.as_dict()
    return {k: full[k] for k in keys if k in full}


# the run's conditions: what a layout or knob choice cannot change (a drop across them is not the sequence's)
CONDITIONS = ("model", "GPU", "GPUs", "precision", "grad_fp32", "bf16_moments", "optimizer", "moe_imbalance",
              "reserve_gib", "mcore_version", "te_version")
_HANDLED = {"model", "gpu", "parallel", "batch", "precision", "delay_wgrad", "precision_aware_optimizer"}


def _json(v: object) -> object:
    """A setting as JSON holds it: numbers, booleans, strings and null as they are, a set as its sorted list, a
    recompute as its label."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (frozenset, set)):
        return sorted(v)
    label = getattr(v, "label", None)
    return label() if callable(label) else str(v)


def _value(v: object) -> str:
    """A setting as the text says it (of :func:`_json`'s value)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    if v is None:
        return "none"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _layout(cfg: RunConfig) -> str:
    """The layout as the differences name it: the sizes and, where set, the pipeline layout (FSDP is a knob of its
    own, ``fsdp``)."""
    par = cfg.parallel
    return par.short() + (f" (pipeline layout {par.pipeline_layout})" if par.pipeline_layout else "")


def _sizes(cfg: RunConfig) -> tuple[object, ...]:
    """What the layout chooses: DP and expert DP follow from the GPU count and these."""
    par = cfg.parallel
    return par.tp, par.pp, par.vpp, par.cp, par.ep, par.etp, par.pipeline_layout


def differences(a: RunConfig, b: RunConfig) -> dict[str, tuple[object, object]]:
    """Every way run ``b`` differs from run ``a``: {name: (a's value, b's value)}, in the order model, GPU, GPU
    count, numerics, sequence length, batch, layout, then every other knob (each RunConfig field, so a field
    added later is compared too); empty when the two runs are the same run. Each difference is named once: the
    layout where its sizes or pipeline layout differ (not where only DP follows the GPU count; FSDP is ``fsdp``),
    and the effective delay_wgrad / precision-aware optimizer only where their own setting differs (else they
    follow from EP overlap, CUDA graphs, optimizer offload or bf16 moments, named themselves). Values are JSON
    values (:func:`_json`): numbers stay numbers."""
    pairs: list[tuple[str, object, object]] = [
        ("model", a.model.name, b.model.name), ("GPU", a.gpu.name, b.gpu.name),
        ("GPUs", a.parallel.gpus, b.parallel.gpus), ("precision", a.precision, b.precision),
        ("sequence length", a.batch.seq_len, b.batch.seq_len), ("GBS", a.batch.gbs, b.batch.gbs),
        ("MBS", a.batch.mbs, b.batch.mbs),
    ]
    if _sizes(a) != _sizes(b):
        pairs.append(("layout", _layout(a), _layout(b)))
    if a.delay_wgrad != b.delay_wgrad:
        pairs.append(("delay_wgrad", a.delay_wgrad_on, b.delay_wgrad_on))
    if a.precision_aware_optimizer != b.precision_aware_optimizer:
        pairs.append(("precision_aware_optimizer", a.precision_aware, b.precision_aware))
    if a.model.name == b.model.name and a.model is not b.model and (
            [getattr(a.model, f.name) for f in fields(a.model)] != [getattr(b.model, f.name) for f in fields(b.model)]):
        pairs[0] = ("model", f"{a.model.name} (config A)", f"{b.model.name} (config B)")
    if a.gpu.name == b.gpu.name and a.gpu != b.gpu:
        pairs[1] = ("GPU", f"{a.gpu.name} (spec A)", f"{b.gpu.name} (spec B)")
    pairs += [(f.name, getattr(a, f.name), getattr(b, f.name)) for f in fields(RunConfig) if f.name not in _HANDLED]
    out = {name: (_json(x), _json(y)) for name, x, y in pairs}
    return {name: xy for name, xy in out.items() if xy[0] != xy[1]}


def _run_label(e: Estimate, other: Estimate | None = None) -> str:
    """seq and layout; with ``other``, also the model, GPUs and precision where the two runs differ in them."""
    cfg = e.config
    head = []
    if other is not None:
        o = other.config
        if cfg.model.name != o.model.name:
            head.append(cfg.model.name)
        if cfg.gpu.name != o.gpu.name or cfg.parallel.gpus != o.parallel.gpus:
            head.append(f"{cfg.parallel.gpus} x {cfg.gpu.name}")
        if cfg.precision != o.precision:
            head.append(cfg.precision)
    return ", ".join([*head, f"seq {cfg.batch.seq_len:,} {plan_layout(cfg)}"])


def _differences_reason(diff: dict[str, tuple[object, object]]) -> Reason:
    if not diff:
        return Reason("differences", "Runs A and B are the same run: model, GPU, GPU count, precision, sequence "
                      "length, batch, layout and every knob are equal.", {"differences": {}})
    said = "; ".join(f"{name} {_value(x)} -> {_value(y)}" for name, (x, y) in diff.items())
    return Reason("differences", f"Run B differs from run A in {len(diff)} setting(s): {said}.",
                  {"differences": {k: list(v) for k, v in diff.items()}})


def _fit_note(name: str, e: Estimate) -> Reason | None:
    """A run that does not fit in its GPU's memory: its numbers are estimates of a run that cannot start."""
    mem = e.memory
    short = mem.shortfall(e.gpu.name)
    if short is None:
        return None
    return Reason("fits", f"Run {name} does not fit: {short} ({_run_label(e)}); its throughput is what it would "
                  "run at with the memory, not a run that can start.",
                  {"run": name, "memory_gib": round(mem.total_bytes / GIB, 2),
                   "capacity_gib": round(mem.capacity_bytes / GIB, 2),
                   "host_gib": round(mem.host_peak_bytes / GIB, 2),
                   "host_capacity_gib": round(mem.host_capacity_bytes / GIB, 2)})


def _outside_fit_reason(a: Estimate, b: Estimate) -> Reason | None:
    """The model of a run (or both) has features no fitted run has: plan and sweep say so beside their numbers, and
    every number below reads the same estimate (Timing.outside_fit_note)."""
    notes = {name: e.time.outside_fit_note for name, e in (("A", a), ("B", b)) if e.time.outside_fit_note}
    if not notes:
        return None
    runs = "both runs" if len(notes) == 2 else f"run {next(iter(notes))}"
    note = (notes.get("B") or notes["A"]).removeprefix("outside the fit: ").rstrip(".")
    return Reason("outside-fit", f"Outside the fit ({runs}): {note}. The comparison below reads these estimates, "
                  "so a change it attributes may not be measured.",
                  {"runs": sorted(notes), "outside_fit": sorted({f for e in (a, b) for f in e.time.outside_fit})})


def _tokens_per_gpu(e: Estimate) -> float:
    b = e.config.batch
    return b.gbs * b.seq_len / e.config.parallel.gpus


def compare(a: Estimate, b: Estimate) -> Comparison:
    """Explain run ``b`` against run ``a``."""
    reasons: list[Reason] = [_differences_reason(differences(a.config, b.config))]
    reasons += [r for r in (_fit_note("A", a), _fit_note("B", b)) if r is not None]
    outside = _outside_fit_reason(a, b)
    if outside is not None:
        reasons.append(outside)
    ta, tb = a.time.tokens_per_s_per_gpu, b.time.tokens_per_s_per_gpu
    change = tb / ta - 1
    said = "unchanged" if abs(change) < 5e-4 else f"{'fell' if change < 0 else 'rose'} {abs(change):.0%}"
    reasons.append(Reason("throughput", f"Throughput {said}: {ta:,.0f} -> {tb:,.0f} tokens/s/GPU "
                          f"({a.time.tflops_per_gpu:,.0f} -> {b.time.tflops_per_gpu:,.0f} TFLOP/s/GPU) from "
                          f"{_run_label(a, b)} to {_run_label(b, a)}.",
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
    said = (f"Time per token changed by {total * 1e6:+,.2f} us/token per GPU: " + "; ".join(parts) + "." if parts else
            f"Time per token per GPU: no difference ({step_a / tok_a * 1e6:,.2f} us/token in both runs).")
    reasons.append(Reason("time", said,
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


def _at_best(a: Estimate | None, b: Estimate) -> str:
    """What run ``b`` being at the planner's best says about its change from run ``a``, claiming no more than the
    comparison shows: a drop is put on the longer sequence only when nothing but the length, batch, layout and
    knobs changed (the same model, GPUs, numerics and versions)."""
    if a is None:
        return " The run is already at the planner's best."
    if b.time.tokens_per_s_per_gpu >= a.time.tokens_per_s_per_gpu * (1 - RESOLVED_GAIN):
        return " Run B is already at the planner's best for its model, GPUs, numerics and length."
    diff = differences(a.config, b.config)
    conditions = [k for k in diff if k in CONDITIONS]
    if not conditions and b.config.batch.seq_len > a.config.batch.seq_len:
        ta, tb = _tokens_per_gpu(a), _tokens_per_gpu(b)
        attention = sum(b.time.breakdown_s.get(k, 0.0) / tb - a.time.breakdown_s.get(k, 0.0) / ta
                        for k in ("attention", "linear_attention"))
        return (" The run is already at the planner's best and only the length, batch, layout and knobs changed: the "
                "drop is inherent to the longer sequence"
                + (" (attention grows as S^2)." if attention > 0 else "."))
    cause = (f"what else changed ({', '.join(conditions)})" if conditions else
             "the other differences (the sequence is not longer)")
    return (" Run B is already at the planner's best for its model, GPUs, numerics and length, so no layout or knob "
            f"change recovers the drop from run A; it comes with {cause}.")


def remedy(b: Estimate, best: Plan | None, newer: NewerRelease | None = None, a: Estimate | None = None) -> Reason:
    """What fixes run ``b``: the planner's best plan for the same model, GPUs and length; ``newer``: what
    a newer Megatron-Core release would plan instead (moeplan.plan.space.NewerRelease), said when it gains;
    ``a``: the run ``b`` is compared with (what a run already at the planner's best says about the change)."""
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
        return Reason("fix", f"Run B does not fit in memory ({b.memory.shortfall(b.gpu.name)}); the planner's best at "
                      f"seq {seq:,} is {plan_layout(cfg)}, "
                      f"recompute {cfg.recompute.label()}: {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU in "
                      f"{best_gib:,.1f} GiB.{tail}", {"overrides": overrides, **more})
    gain = est.time.tokens_per_s_per_gpu / b.time.tokens_per_s_per_gpu - 1
    text = (f"Planner at seq {seq:,}: {plan_layout(cfg)}, "
            f"recompute {cfg.recompute.label()}, {cfg.dispatcher}"
            f"{', CP ' + cfg.cp_comm_type if cfg.parallel.cp > 1 else ''}: {est.time.tokens_per_s_per_gpu:,.0f} "
            f"tokens/s/GPU ({gain:+.0%}) in {best_gib:,.1f} GiB.")
    if gain <= RESOLVED_GAIN and not unlock:
        text += _at_best(a, b)
    elif gain <= RESOLVED_GAIN:
        text += f" The run is already at the planner's best for Megatron-Core {cfg.mcore_version}."
    return Reason("fix", text + tail, {"gain": round(gain, 4), "overrides": overrides, **more})


__all__ = ["Comparison", "compare", "differences", "remedy"]
