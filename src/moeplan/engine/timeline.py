"""One training iteration laid out in time, as moeplan's time and memory models see it.

Per pipeline rank, every micro-batch's forward and backward of every virtual stage (model chunk) runs
in the order of Megatron-Core's interleaved 1F1B schedule (megatron/core/pipeline_parallel/
schedules.py: ``get_schedule_table`` groups PP consecutive micro-batches per chunk,
``get_pp_rank_microbatches`` gives rank r a warm-up of (PP - r - 1) x 2 + (VPP - 1) x PP forwards,
plus one with ``overlap_moe_expert_parallel_comm``; then one forward and one backward per step (steady
state) and the remaining backwards (cool-down); PP 1 alternates forward and backward). Each operation
waits for its input from the neighbouring virtual stage (forward from stage s - 1, backward from s + 1).

Durations come from :func:`moeplan.engine.timing.step_parts`: the model runs the pipeline at the slowest
rank's pace, so every forward takes that rank's forward seconds of one micro-batch / VPP and every
backward its backward seconds / VPP; a less loaded rank is busy for its own share of that slot and
waits the rest. With these slots the dependency schedule ends after exactly (M + (PP - 1) / VPP)
micro-batch times, the model's M x t_mb + bubble, so the trace spans the estimated step: parameter
all-gather (exposed part first), the pipeline, the exposed gradient reduce-scatter, the optimizer
step and the CPU offload.

Inside one operation the items of the time breakdown (GEMMs, attention, exposed TP / CP / EP
communication, PP send/recv, recompute at the start of the backward) follow each other; the hidden
part of a collective (EP all-to-all with moe_a2a_overlap, the CP ring behind attention, TP with
tp_comm_overlap, DP reduce-scatter / all-gather with overlap_grad_reduce / overlap_param_gather) is a
span on its communication track overlapping the compute it hides behind. Each item's split between
forward and backward is :data:`FORWARD_SHARE`. Memory over the schedule
(:func:`moeplan.engine.memory.schedule_memory`): each in-flight micro-batch of a chunk holds its activations
from the start of its forward to the end of its backward, and the running layer adds the transient.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from moeplan.base.errors import MoeplanError
from moeplan.base.vocab import TRACE_DETAIL_MICROBATCHES
from moeplan.engine.memory import ScheduleMemory, estimate_memory, schedule_memory
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.context import TRAIN
from moeplan.engine.timing.step import StepParts, hidden_comm_s, step_parts
from moeplan.hardware import GPUSpec
from moeplan.run.config import RunConfig
from moeplan.run.parallel import Pipeline, build_pipeline, interleaving_problem, warmup_count

# Share of each per-micro-batch time item spent in the forward pass (the rest is backward).
# GEMMs and attention: forward = 1 of the 3 x forward FLOPs of training (Megatron convention, TRAIN).
# Collectives of TP (AG + RS forward, RS + AG backward), EP (dispatch + combine each way) and PP (one
# send each way) move the same bytes both ways; element-wise traffic and launches are split evenly.
# CP: the ring (p2p, all-gather) sends K/V forward and K/V + dK/dV backward (moeplan.engine.timing._cp_comm),
# a2a moves q, k, v, o both ways. Recompute runs at the start of the backward.
FORWARD_SHARE = {
    "gemm": 1 / TRAIN, "grouped_gemm": 1 / TRAIN, "attention": 1 / TRAIN, "linear_attention": 1 / TRAIN,
    "elementwise": 0.5, "recompute": 0.0, "tp_comm": 0.5, "ep_comm": 0.5, "pp_comm": 0.5,
    "launch_overhead": 0.5, "act_offload": 0.5,
}
CP_FORWARD_SHARE = {"p2p": 1 / 3, "allgather": 1 / 3, "a2a+p2p": 0.4, "a2a": 0.5}
# The hidden part of EP dispatch/combine runs behind the other micro-batch's compute in EP A2A overlap
# (moeplan.engine.timing.ep_overlap_exposed_s), so it is split like the compute it hides behind.
HIDDEN_FORWARD_SHARE = {"ep_comm": 1 / TRAIN}

# Tracks (threads) of a rank, in display order; the compute track holds the forward / backward
# operations with their compute items nested inside.
TRACKS = ("compute", "TP comm", "CP exchange", "EP dispatch/combine", "PP send/recv", "DP reduce-scatter/all-gather",
          "host (CPU offload)")
ITEM_TRACK = {"tp_comm": "TP comm", "cp_comm": "CP exchange", "ep_comm": "EP dispatch/combine",
              "pp_comm": "PP send/recv"}
# Order of the items inside one forward (a backward runs them mirrored, recompute first). Each
# communication item follows the compute it overlaps: its hidden part (moeplan.engine.timing.hidden_comm_s)
# runs alongside that compute on the communication track, and the compute waits for the exposed rest.
FORWARD_ORDER = ("attention", "linear_attention", "cp_comm", "gemm", "tp_comm", "grouped_gemm", "ep_comm",
                 "elementwise", "launch_overhead", "act_offload", "pp_comm")
BACKWARD_ORDER = ("recompute", "act_offload", "grouped_gemm", "ep_comm", "gemm", "tp_comm", "attention",
                  "linear_attention", "cp_comm", "elementwise", "launch_overhead", "pp_comm")
OVERLAPPED = "_overlapped"  # category suffix of the hidden part of a collective


# ------------------------------------------------------------------------------ schedule order


@dataclass(frozen=True, slots=True)
class Step:
    """One operation of a rank's schedule: forward ("F") or backward ("B") of ``microbatch`` on
    model chunk ``chunk`` (virtual stage chunk x PP + rank)."""

    kind: str
    microbatch: int
    chunk: int
    phase: str  # warmup, steady or cooldown


def schedule_problem(pp: int, vpp: int, microbatches: int, group: int | None = None) -> str | None:
    """Why Megatron-Core refuses this interleaved schedule (None when it runs it): the layout rule
    :func:`moeplan.run.parallel.interleaving_problem`."""
    return interleaving_problem(pp, vpp, microbatches, group)


def rank_schedule(pp: int, vpp: int, microbatches: int, rank: int, extra_warmup: bool = False,
                  group: int | None = None) -> tuple[Step, ...]:
    """Rank ``rank``'s operations in the order Megatron-Core runs them.

    Forward virtual micro-batch k runs chunk ``table[k]``: groups of ``group`` (default PP) consecutive
    micro-batches go through chunk 0, then chunk 1, ..., the last group holding what is left.
    Backward k runs the mirrored chunk VPP - 1 - table[k] of the same micro-batch."""
    g = group or pp
    table: list[tuple[int, int]] = []
    for lo in range(0, microbatches, g):
        hi = microbatches if lo + g >= microbatches else lo + g
        table += [(mb, c) for c in range(vpp) for mb in range(lo, hi)]
    total = len(table)
    warm = warmup_count(pp, vpp, rank, microbatches, extra_warmup)
    out = [Step("F", mb, c, "warmup") for mb, c in table[:warm]]
    for i in range(warm, total):
        mb, c = table[i]
        out.append(Step("F", mb, c, "steady"))
        mb, c = table[i - warm]
        out.append(Step("B", mb, vpp - 1 - c, "steady"))
    out += [Step("B", mb, vpp - 1 - c, "cooldown") for mb, c in table[total - warm:]] if warm else []
    return tuple(out)


# ------------------------------------------------------------------------------ timeline


class Span(NamedTuple):
    """A stretch of time on one track of one pipeline rank (seconds from the start of the step).

    A named tuple rather than a frozen dataclass: a long pipeline has hundreds of thousands of spans
    (DeepSeek-V3 PP 8 VPP 4 with 512 micro-batches: 442k) and a frozen dataclass takes ~4x as long to
    build (0.74 s against 0.2 s for those)."""

    rank: int
    track: str
    name: str
    start_s: float
    dur_s: float
    category: str  # forward, backward, an item of the time breakdown, dp_comm, optimizer, offload
    microbatch: int = -1
    chunk: int = -1
    phase: str = ""


@dataclass(frozen=True, slots=True)
class Op:
    """One scheduled forward or backward: its slot (the slowest rank's pace) and its own busy time."""

    rank: int
    step: Step
    start_s: float
    slot_s: float
    busy_s: float


@dataclass(frozen=True)
class Timeline:
    """One iteration: operations, spans on every track, and the most loaded rank's memory."""

    pp: int
    vpp: int
    microbatches: int
    step_time_s: float
    pipeline_start_s: float
    pipeline_end_s: float
    slowest_rank: int
    ops: tuple[Op, ...]
    spans: tuple[Span, ...]
    memory_rank: int
    memory_s: tuple[tuple[float, float, float, float], ...]  # (time, static, in-flight activations, transient) bytes
    memory_estimate_bytes: float
    capacity_bytes: float
    title: str

    @property
    def schedule(self) -> str:
        """The schedule Megatron-Core runs for this split (pipeline_parallel/schedules.py get_forward_backward_func:
        forward_backward_no_pipelining at PP 1, pipelining without interleaving at VPP 1, else interleaved)."""
        if self.pp == 1:
            return "no pipelining"
        return "1F1B" if self.vpp == 1 else "interleaved 1F1B"

    @property
    def span_s(self) -> float:
        """From the first span's start to the last span's end."""
        return max(s.start_s + s.dur_s for s in self.spans) - min(s.start_s for s in self.spans)

    @property
    def memory_peak_bytes(self) -> float:
        return max(st + act + tr for _, st, act, tr in self.memory_s)

    def rank_ops(self, rank: int) -> tuple[Op, ...]:
        return tuple(o for o in self.ops if o.rank == rank)


def _simulate(pp: int, vpp: int, orders: list[tuple[Step, ...]], fwd_s: float, bwd_s: float, t0: float,
              ) -> list[list[float]]:
    """Start time of every operation: after the rank's previous one and after its input (the forward of
    the previous virtual stage, or the backward of the next; the last stage's backward follows its own
    forward, which precedes it on the rank)."""
    n_stages = pp * vpp
    end: dict[tuple[str, int, int], float] = {}
    starts: list[list[float]] = [[] for _ in range(pp)]
    pos = [0] * pp
    clock = [t0] * pp
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for r in range(pp):
            order, i = orders[r], pos[r]
            while i < len(order):
                st = order[i]
                stage = st.chunk * pp + r
                if st.kind == "F":
                    dep = ("F", st.microbatch, stage - 1) if stage > 0 else None
                else:
                    dep = ("B", st.microbatch, stage + 1) if stage < n_stages - 1 else None
                if dep is not None and dep not in end:
                    break
                begin = max(clock[r], end[dep]) if dep is not None else clock[r]
                clock[r] = begin + (fwd_s if st.kind == "F" else bwd_s)
                end[(st.kind, st.microbatch, stage)] = clock[r]
                starts[r].append(begin)
                i += 1
            if i != pos[r]:
                progressed = True
                left -= i - pos[r]
                pos[r] = i
        if not progressed:  # cannot happen for a schedule Megatron-Core accepts
            raise MoeplanError("the pipeline schedule deadlocks for this layout")
    return starts


def _split(items: dict[str, float], cp_comm_type: str, vpp: int,
           shares: dict[str, float] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """(forward, backward) seconds per item of one operation (one chunk of one micro-batch)."""
    fwd, bwd = {}, {}
    for k, v in items.items():
        share = CP_FORWARD_SHARE.get(cp_comm_type, 0.5) if k == "cp_comm" else FORWARD_SHARE.get(k, 0.5)
        share = (shares or {}).get(k, share)
        fwd[k] = v * share / vpp
        bwd[k] = v * (1 - share) / vpp
    return fwd, bwd


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a long pipeline's hundreds of thousands of acyclic spans
    (or trace events) are built: it would rescan them at every generation threshold, which doubled the
    build time of DeepSeek-V3's PP 8 VPP 4 x 512 micro-batches. Back on afterwards, if it was on (also after
    an exception). The one place the collector is paused: the plan search (``@gc_paused()`` on
    moeplan.plan.planner.search), the timeline, its trace and the plots all come through here."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build_timeline(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION,
                   pipeline: Pipeline | None = None, parts: StepParts | None = None) -> Timeline:
    """The timeline of one iteration of ``cfg`` on ``gpu`` (validates the layout like the estimate)."""
    with gc_paused():
        return _build_timeline(cfg, gpu, cal, pipeline, parts)


def _build_timeline(cfg: RunConfig, gpu: GPUSpec, cal: Calibration, pipeline: Pipeline | None,
                    parts: StepParts | None) -> Timeline:
    par = cfg.parallel
    pipe = pipeline or build_pipeline(cfg.model, par)
    parts = parts or step_parts(cfg, gpu, cal, pipe)
    m = parts.microbatches
    problem = schedule_problem(par.pp, par.vpp, m)
    if problem:
        raise MoeplanError(f"no timeline: {problem}")
    extra = par.vpp > 1 and cfg.ep_overlap and cfg.ep_overlap_allowed
    orders = [rank_schedule(par.pp, par.vpp, m, r, extra) for r in range(par.pp)]
    splits = [_split(items, cfg.cp_comm_type, par.vpp) for items in parts.rank_microbatch_s]
    hidden = [_split(items, cfg.cp_comm_type, par.vpp, HIDDEN_FORWARD_SHARE)
              for items in hidden_comm_s(cfg, gpu, cal, pipe)]
    fwd_slot = sum(splits[parts.slowest_rank][0].values())
    bwd_slot = sum(splits[parts.slowest_rank][1].values())
    t_pipe = parts.dp_all_gather_exposed_s
    starts = _simulate(par.pp, par.vpp, orders, fwd_slot, bwd_slot, t_pipe)
    spans: list[Span] = []
    ops: list[Op] = []
    for r in range(par.pp):
        fwd_items, bwd_items = splits[r]
        fwd_busy, bwd_busy = sum(fwd_items.values()), sum(bwd_items.values())
        # a lighter rank whose forward / backward split is more lopsided than the slowest rank's could
        # overrun one slot; it is drawn shrunk to fit (it waits for the slowest rank either way)
        fit = min(1.0, fwd_slot / fwd_busy if fwd_busy else 1.0, bwd_slot / bwd_busy if bwd_busy else 1.0)
        if fit < 1.0:
            fwd_items = {k: v * fit for k, v in fwd_items.items()}
            bwd_items = {k: v * fit for k, v in bwd_items.items()}
            fwd_busy, bwd_busy = fwd_busy * fit, bwd_busy * fit
        fwd_hidden, bwd_hidden = hidden[r]
        # per direction, the items in order with what the loop below needs (same for every operation)
        plans = {kind: [(k, items.get(k, 0.0), behind.get(k, 0.0), ITEM_TRACK.get(k, "compute"), f"{k} (overlapped)",
                         k + OVERLAPPED) for k in order if items.get(k, 0.0) > 0.0 or behind.get(k, 0.0) > 0.0]
                 for kind, items, behind, order in (("F", fwd_items, fwd_hidden, FORWARD_ORDER),
                                                    ("B", bwd_items, bwd_hidden, BACKWARD_ORDER))}
        for st, begin in zip(orders[r], starts[r]):
            fwd = st.kind == "F"
            busy = fwd_busy if fwd else bwd_busy
            ops.append(Op(r, st, begin, fwd_slot if fwd else bwd_slot, busy))
            mb, chunk, phase = st.microbatch, st.chunk, st.phase
            parent = len(spans)
            spans.append(None)  # type: ignore[arg-type]  # the operation, once its items are laid out
            t = begin
            for k, d, h, track, hidden_name, hidden_cat in plans[st.kind]:
                if h > 0.0:  # overlapped with the compute before it, inside this operation
                    h0 = max(begin, t - h)
                    # EP A2A overlap hides it behind the whole operation (the other micro-batch's work)
                    h1 = min(begin + busy, h0 + h) if k == "ep_comm" else t
                    spans.append(Span(r, track, hidden_name, h0, h1 - h0, hidden_cat, mb, chunk, phase))
                if d <= 0.0:
                    continue
                spans.append(Span(r, track, k, t, d, k, mb, chunk, phase))
                t += d
            # the operation ends where its last item ends (exact nesting for trace viewers)
            spans[parent] = Span(r, "compute", f"{'F' if fwd else 'B'} mb{mb} c{chunk}", begin, t - begin,
                                 "forward" if fwd else "backward", mb, chunk, phase)
    pipe_end = max(o.start_s + o.slot_s for o in ops)
    rs_end = pipe_end + parts.dp_reduce_scatter_exposed_s
    opt_s = parts.breakdown_s.get("optimizer", 0.0)
    off_s = parts.breakdown_s.get("offload", 0.0)
    for r in range(par.pp):
        if parts.dp_all_gather_s > 0:
            spans.append(Span(r, TRACKS[5], "param all-gather", 0.0, parts.dp_all_gather_s, "dp_comm"))
        if parts.dp_reduce_scatter_s > 0:
            spans.append(Span(r, TRACKS[5], "grad reduce-scatter", rs_end - parts.dp_reduce_scatter_s,
                              parts.dp_reduce_scatter_s, "dp_comm"))
        if opt_s > 0:
            spans.append(Span(r, "compute", "optimizer step", rs_end, opt_s, "optimizer"))
        if off_s > 0:
            spans.append(Span(r, TRACKS[6], "CPU optimizer (offload)", rs_end + opt_s, off_s, "offload"))
    step_s = rs_end + opt_s + off_s
    mem = estimate_memory(cfg, gpu.hbm_bytes, gpu.nvlink_domain, pipe, validated=True)
    mem_rank = mem.peak.rank
    series = _memory_series(schedule_memory(cfg, gpu.nvlink_domain, pipe, mem_rank),
                            [o for o in ops if o.rank == mem_rank], step_s)
    title = f"{cfg.model.name} on {par.gpus} x {gpu.name}, {par.short()}, {m} micro-batches"
    return Timeline(par.pp, par.vpp, m, step_s, t_pipe, pipe_end, parts.slowest_rank, tuple(ops), tuple(spans),
                    mem_rank, series, mem.total_bytes, gpu.hbm_bytes, title)


def _memory_series(sm: ScheduleMemory, ops: list[Op], end_s: float) -> tuple[tuple[float, float, float, float], ...]:
    """(time, static, activations of in-flight micro-batches, transient) at every change on one rank."""
    out = [(0.0, sm.static_bytes, 0.0, 0.0)]
    act = 0.0
    for o in ops:
        chunk = sm.chunk_microbatch_bytes[o.step.chunk]
        if o.step.kind == "F":
            act += chunk  # the forward keeps its activations from its start ...
            out.append((o.start_s, sm.static_bytes, act, sm.transient_bytes))
            out.append((o.start_s + o.busy_s, sm.static_bytes, act, 0.0))
        else:
            out.append((o.start_s, sm.static_bytes, act, sm.transient_bytes))
            act -= chunk  # ... to the end of its backward
            out.append((o.start_s + o.busy_s, sm.static_bytes, max(0.0, act), 0.0))
    out.append((end_s, sm.static_bytes, max(0.0, act), 0.0))
    return tuple(out)


# ------------------------------------------------------------------------------ Chrome trace


def _us(s: float) -> float:
    return round(s * 1e6, 3)


def trace_detail(tl: Timeline) -> tuple[range, ...]:
    """The micro-batches whose operations carry their items in the trace (all up to
    :data:`TRACE_DETAIL_MICROBATCHES`; beyond, the first and the last half of that many)."""
    m, keep = tl.microbatches, TRACE_DETAIL_MICROBATCHES
    if m <= keep:
        return (range(m),)
    return (range(keep // 2), range(m - keep // 2, m))


def trace_detail_note(tl: Timeline) -> str | None:
    """What the trace leaves out, in words (None when it holds every span)."""
    shown = trace_detail(tl)
    if len(shown) == 1:
        return None
    (a, b), m = shown, tl.microbatches
    return (f"items (GEMMs, attention, communication, recompute) are nested in the operations of micro-batches "
            f"{a.start}-{a.stop - 1} and {b.start}-{b.stop - 1} only ({len(a) + len(b)} of {m}): every forward of a "
            f"rank has the same items with the same durations, and so has every backward, so the other "
            f"micro-batches would repeat them. Every forward/backward operation, PP flow, DP collective, the "
            f"optimizer and the memory counter are all in; totals per item are the estimate's time breakdown "
            f"(moeplan estimate --json), not a sum over this trace's slices")


def chrome_trace(tl: Timeline) -> dict[str, Any]:
    """Chrome trace-event JSON (Perfetto, chrome://tracing): one process per pipeline rank, one thread
    per track, complete ("X") events in microseconds, the most loaded rank's memory as a counter.
    Beyond :data:`TRACE_DETAIL_MICROBATCHES` micro-batches, the items nested in the operations of the
    micro-batches in between are left out (:func:`trace_detail_note`, also in ``otherData`` and each
    process's label)."""
    with gc_paused():
        return _chrome_trace(tl)


def _chrome_trace(tl: Timeline) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    note = trace_detail_note(tl)
    shown = trace_detail(tl)
    for r in range(tl.pp):
        name = f"PP rank {r}" + (" (slowest)" if r == tl.slowest_rank else "") + (
            " (most memory)" if r == tl.memory_rank else "")
        events.append({"ph": "M", "pid": r, "name": "process_name", "args": {"name": name}})
        events.append({"ph": "M", "pid": r, "name": "process_sort_index", "args": {"sort_index": r}})
        if note:
            a, b = shown
            events.append({"ph": "M", "pid": r, "name": "process_labels",
                           "args": {"labels": f"items of micro-batches {a.start}-{a.stop - 1} and "
                                              f"{b.start}-{b.stop - 1} only (the rest repeat them)"}})
        for tid, track in enumerate(TRACKS):
            events.append({"ph": "M", "pid": r, "tid": tid, "name": "thread_name", "args": {"name": track}})
            events.append({"ph": "M", "pid": r, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    tids = {t: i for i, t in enumerate(TRACKS)}
    lo, hi = (shown[0].stop, shown[-1].start) if note else (0, 0)  # items of lo <= microbatch < hi are left out
    for s in tl.spans:
        if lo <= s.microbatch < hi and s.category not in ("forward", "backward"):
            continue
        ts = _us(s.start_s)  # rounded end points: a nested span's end never passes its parent's
        ev: dict[str, Any] = {"ph": "X", "pid": s.rank, "tid": tids[s.track], "name": s.name, "cat": s.category,
                              "ts": ts, "dur": round(_us(s.start_s + s.dur_s) - ts, 3)}
        if s.microbatch >= 0 and s.category in ("forward", "backward"):
            ev["args"] = {"microbatch": s.microbatch, "chunk": s.chunk, "phase": s.phase}
            if lo <= s.microbatch < hi:  # said where a viewer looks for them
                ev["args"]["items"] = "left out: as micro-batch 0's (otherData)"
        events.append(ev)
    events += _flows(tl)
    gib = 1024**3
    for t, static, act, trans in tl.memory_s:
        events.append({"ph": "C", "pid": tl.memory_rank, "name": "memory GiB", "ts": _us(t),
                       "args": {"static": round(static / gib, 4), "activations": round(act / gib, 4),
                                "transient": round(trans / gib, 4)}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"title": tl.title, "step_time_s": tl.step_time_s, "microbatches": tl.microbatches,
                          "pp": tl.pp, "vpp": tl.vpp, "slowest_rank": tl.slowest_rank,
                          "memory_rank": tl.memory_rank, "memory_peak_gib": tl.memory_peak_bytes / gib,
                          "memory_estimate_gib": tl.memory_estimate_bytes / gib,
                          **({"items_left_out": note} if note else {})}}


def _flows(tl: Timeline) -> list[dict[str, Any]]:
    """PP send/recv as flow arrows: each forward to the next virtual stage's forward of the same
    micro-batch, each backward to the previous stage's backward (bound to the enclosing operations)."""
    by_key = {(o.step.kind, o.step.microbatch, o.step.chunk * tl.pp + o.rank): o for o in tl.ops}
    out: list[dict[str, Any]] = []
    for (kind, mb, stage), src in by_key.items():
        dst = by_key.get((kind, mb, stage + 1 if kind == "F" else stage - 1))
        if dst is None:
            continue
        n = len(out) // 2
        name = "activations" if kind == "F" else "gradients"
        out.append({"ph": "s", "id": n, "pid": src.rank, "tid": 0, "name": name, "cat": "pp_send",
                    "ts": _us(src.start_s + 0.5 * src.busy_s)})
        out.append({"ph": "f", "bp": "e", "id": n, "pid": dst.rank, "tid": 0, "name": name, "cat": "pp_send",
                    "ts": _us(dst.start_s + 0.5 * dst.busy_s)})
    return out


def chrome_trace_bytes(tl: Timeline) -> bytes:
    """The trace as standard JSON (Perfetto and chrome://tracing refuse Infinity / NaN)."""
    try:
        with gc_paused():  # one pause over building the events and writing them
            return json.dumps(_chrome_trace(tl), separators=(",", ":"), allow_nan=False).encode()
    except ValueError:
        raise MoeplanError("no trace: the step's times are not finite (an input beyond what the model covers, "
                           "e.g. a huge capacity factor)") from None


__all__ = ["CP_FORWARD_SHARE", "FORWARD_SHARE", "TRACE_DETAIL_MICROBATCHES", "TRACKS", "Op", "Span", "Step", "Timeline",
           "build_timeline", "chrome_trace", "chrome_trace_bytes", "gc_paused", "rank_schedule", "schedule_problem",
           "trace_detail", "trace_detail_note", "warmup_count"]
