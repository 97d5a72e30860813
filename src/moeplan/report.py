"""One self-contained HTML page for a planning result: summary, plans, memory and time breakdowns,
Megatron Bridge overrides, rationale and an optional sequence-length sweep.

No external resources: plots are inline SVG (see :mod:`moeplan.plots`), CSS is inline, all text is
escaped. The markup is in the templates this page shares with ``moeplan serve`` (:mod:`moeplan.templating`,
``templates/parts.html.j2`` and ``templates/report.html.j2``); this module computes what each piece shows. Elements carry stable ids (``summary``, ``plan-table``, ``memory-table``, ``memory-plot``,
``time-table``, ``time-plot``, ``timeline``, ``timeline-plot``, ``overrides``, ``rationale``, ``sweep-table``, ``sweep-plot``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from moeplan.plots import atomic_write, fmt_seconds, seq_label
from moeplan.run.parallel import Parallel

if TYPE_CHECKING:
    from moeplan.engine.timeline import Timeline

Row = Mapping[str, Any]
Cell = tuple[str, str]  # a table cell: its text and its class ('' for none)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI","DejaVu Sans",sans-serif;margin:0 auto;max-width:1200px;
padding:16px 24px;color:#222}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:right}
th{background:#f4f6f8;font-weight:600}td:first-child,th:first-child,td.text,th.text{text-align:left}
tr.peak td{font-weight:600}.ok{color:#2e7d32;font-weight:600}.bad{color:#c62828;font-weight:600}
.pair{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}.pair>*{flex:1 1 420px;min-width:0}
figure.plot{margin:0}figure.plot svg{max-width:100%;height:auto}
pre.overrides{background:#f6f8fa;border:1px solid #ddd;padding:10px 12px;overflow-x:auto;user-select:all;
font:13px/1.5 "DejaVu Sans Mono",monospace}
.note{color:#666;font-size:12px}td{white-space:nowrap}td.wrap{white-space:normal;min-width:9em}.wide{overflow-x:auto}
"""


def layout_label(row: Row) -> str:
    """'TP1 PP8 VPP4 CP32 EP32 DP4' from an estimate's ``parallel`` dict (or its ``layout``), in the one
    format every table uses (:meth:`moeplan.run.parallel.Parallel.short`)."""
    if "layout" in row:
        return str(row["layout"])
    par = row.get("parallel") or {}
    try:
        sizes = {k: int(par[k]) for k in ("tp", "pp", "vpp", "cp", "ep", "etp")}
        return Parallel(gpus=sizes["tp"] * sizes["cp"] * sizes["pp"] * int(par["dp"]), **sizes).short()
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a partial or odd dict (hand-made JSON): as it is
        return " ".join(f"{k.upper()}{par[k]}" for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp") if k in par)


def fsdp_label(row: Row) -> str:
    """A row's Megatron-FSDP mark (:func:`moeplan.engine.fsdp.label`): '', 'FSDP' or 'FSDP <strategy>'."""
    from moeplan.engine.fsdp import label

    return label(row.get("fsdp"))


def plan_layout_label(row: Row) -> str:
    """:func:`layout_label` and, where the plan needs it, :func:`fsdp_label`: a layout a user copies from a
    table must not read as fitting without Megatron-FSDP."""
    return " ".join(x for x in (layout_label(row), fsdp_label(row)) if x)


def no_plan_reason(row: Row) -> str:
    """Why a sweep row has no plan (no ``parallel``), as the CLI's sweep table and the report say it: the length's
    reason where no layout is valid, else "no layout fits" with the closest run (and the GBS the search halved to)."""
    if row.get("invalid"):
        return str(row["invalid"])
    c = row.get("closest") or {}
    if not c:
        return "no layout fits"
    at = f" at GBS {c['gbs']}" if c.get("gbs", row["gbs"]) != row["gbs"] else ""
    return f"no layout fits (closest {c.get('short')}{at} misses by {c.get('misses_by_gib', 0):.1f} GiB)"


def no_fit_sentence(result: Row) -> str:
    """A plan search's answer when no layout fits (moeplan.api.PlanReport.as_dict), in one sentence: the budget
    missed, the GBS halved to, the closest run at its strongest memory option (the knobs `moeplan estimate` takes to
    reproduce it), what it needs and by how much it misses, and why where the planner knows (the host held the
    offload down; Transformer Engine's unfused attention); a newer Megatron-Core release that fits. What `moeplan
    plan` prints on stderr and the page and the MCP export say: the one place of its wording."""
    c = result.get("closest")
    where = ""
    if c:  # its strongest memory option: what `moeplan estimate` with these knobs reports
        knobs = [f"GBS {c['gbs']}", f"MBS {c['mbs']}", f"recompute {c['recompute']}", c["dispatcher"]]
        knobs += [f"optimizer offload {c['optimizer_offload']:.0%}"] if c["optimizer_offload"] else []
        knobs += [f"Megatron-FSDP {c['fsdp']}"] if c["fsdp"] else []
        knobs += ["EP overlap"] if c.get("ep_overlap") else []
        where = (f"; closest: {c['short']} ({', '.join(knobs)}) needs {c['memory_gib']:.1f} GiB per GPU, "
                 f"{c['misses_by_gib']:.1f} GiB over the {c['memory_gib_budget']:.1f} GiB budget")
    if c and c.get("offload_limited_by_host"):
        h = c["offload_limited_by_host"]
        where += (f" (optimizer offload held to {h['optimizer_offload']:.0%} by the host's {h['host_capacity_gib']:.1f} GiB "
                  f"per GPU, hardware host_mem_bytes: {h['asked']:.0%} would keep {h['host_gib_at_asked']:.1f} GiB there)")
    if c and c.get("unfused_attention"):
        from moeplan.run.attention_backend import TE_WIDE_HEAD_FIX

        u = c["unfused_attention"]
        where += (f" (Transformer Engine {u['te']} trains head dim {u['head_dim']} attention on {result['gpu']} with its "
                  f"unfused path: {u['peak_gib_per_layer']:.0f} GiB of s x s scores per layer at its peak, and no CP; "
                  f"{TE_WIDE_HEAD_FIX})")
    gbs, asked = result["gbs"], result["requested_gbs"]  # the search halves GBS while nothing fits (not --keep-gbs)
    halved = f", even at GBS {gbs:,} (halving the GBS from {asked:,} down to it)" if gbs != asked else ""
    msg = (f"no layout fits in {result['gpus']} x {result['gpu']} memory at seq {result['seq_len']:,} "
           f"(with {result['headroom']:.0%} headroom){halved}{where}")
    newer = result.get("newer")
    if newer and newer.get("parallel"):
        msg += "; " + newer["sentence"]
    return msg


def peak_gib(row: Row) -> float | None:
    mem = row.get("memory_gib")
    if isinstance(mem, Mapping):
        return float(mem["total"]) if "total" in mem else None
    return None if mem is None else float(mem)


def _num(v: Any, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _fits_cell(row: Row) -> Cell:
    fits = row.get("fits")
    if fits is None:
        return ("–", "")
    return ("yes", "ok") if fits else ("no", "bad")


def _rows(rows: Sequence[Sequence[Cell]]) -> list[dict[str, Any]]:
    return [{"cells": list(r), "cls": ""} for r in rows]


def _table(tid: str, head: Sequence[str], rows: Sequence[Sequence[Cell]], text_cols: Sequence[int] = (0,)) -> str:
    """A table (template macro ``table``): ``rows`` of cells (:func:`_td`), ``head`` plain text, ``text_cols``
    left-aligned."""
    from moeplan.templating import macro

    return macro("table", tid=tid, head=list(head), rows=_rows(rows), text_cols=tuple(text_cols))


def _td(v: Any, cls: str = "") -> Cell:
    return (str(v), cls)


def plot_svg(make: Callable[[], Any]) -> str | None:
    """The inline SVG of the figure ``make()`` draws (:mod:`moeplan.plots`, the one place each plot is drawn);
    None when matplotlib is missing (the page then says how to install it)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    from moeplan.plots import figure_svg

    return figure_svg(make())


def _plot(pid: str, make: Callable[[], Any]) -> str:
    """A ``<figure>`` with the inline SVG of ``make()``; a note instead when matplotlib is missing."""
    from moeplan.templating import macro

    return macro("figure", pid=pid, svg=plot_svg(make))


def _band(est: Row) -> str:
    """The estimate's TFLOP/s band, 'low-high' ('–' where the row has none)."""
    band = est.get("tflops_range")
    return f"{band[0]:,.0f}-{band[1]:,.0f}" if band else "–"


def _summary(est: Row | None, plans: Sequence[Row]) -> str:
    from markupsafe import Markup

    if est is None:
        return Markup('<p id="summary">{} plan(s); no estimate to break down.</p>').format(len(plans))
    from moeplan.templating import macro

    verdict, facts = summary_facts(est)
    return macro("summary", verdict=verdict, facts=facts)


def summary_facts(est: Row) -> tuple[tuple[str, str] | None, list[tuple[str, str]]]:
    """The summary of an estimate: its verdict (class and sentence; None where it cannot be told) and its
    facts (label, value)."""
    peak, cap = peak_gib(est), est.get("capacity_gib")
    facts: list[tuple[str, str]] = [
        ("model", str(est.get("model", "–"))),
        ("GPUs", f"{est.get('gpus', '–')} × {est.get('gpu', '–')}"),
        ("sequence length", f"{est['seq_len']:,} ({seq_label(int(est['seq_len']))})" if "seq_len" in est else "–"),
        ("global / micro batch", f"{est.get('gbs', '–')} / {est.get('mbs', '–')}"),
        ("layout", layout_label(est)),
        ("pipeline layout", str(est.get("pipeline_layout") or "–")),
        ("precision · recompute · dispatcher",
         f"{est.get('precision', '–')} · {est.get('recompute', '–')} · {est.get('dispatcher', '–')}"),
        ("peak memory / capacity", f"{_num(peak, '.1f')} / {_num(cap, '.1f')} GiB"),
        ("step time", fmt_seconds(float(est["step_time_s"])) if "step_time_s" in est else "–"),
        ("TFLOP/s/GPU (band) · MFU (vs BF16 peak)", f"{_num(est.get('tflops_per_gpu'), '.1f')} ({_band(est)}) · {_num(est.get('mfu'), '.1%')}"),
        ("tokens/s/GPU", _num(est.get("tokens_per_s_per_gpu"), ",.0f")),
    ]
    if est.get("host_memory_gib"):
        facts.append(("host memory per GPU", f"{est['host_memory_gib']:.1f} GiB"))
    fits = est.get("fits")
    verdict = None
    if fits is not None and peak is not None and cap is not None:
        verdict = (("ok", f"Fits: {cap - peak:.1f} GiB headroom.") if fits
                   else ("bad", f"Does not fit: {peak - cap:.1f} GiB over capacity."))
    return verdict, facts


def plan_knobs(p: Row) -> str:
    """The knobs of a plan beyond layout, recompute and dispatcher: EP overlap, CP communication, CUDA
    graph scopes, optimizer CPU offload, Megatron-FSDP, micro-batch size ('–' when none is set)."""
    par = p.get("parallel") or {}
    parts = []
    if p.get("ep_overlap"):
        parts.append("EP overlap" + (" (wgrad not delayed)" if p.get("delay_wgrad") is False else ""))
    if par.get("cp", 1) > 1 and p.get("cp_comm_type"):
        parts.append(f"CP {p['cp_comm_type']}")
    if p.get("cuda_graphs"):
        parts.append("graphs " + ", ".join(p["cuda_graphs"]))
    if p.get("optimizer_offload"):
        parts.append(f"offload {float(p['optimizer_offload']):.0%}")
    if p.get("fsdp"):
        parts.append(fsdp_label(p))
    if p.get("mbs", 1) != 1:
        parts.append(f"MBS {p['mbs']}")
    return " · ".join(parts) or "–"


def _plan_table(plans: Sequence[Row], bands: bool = False) -> str:
    """One row per plan: rank ('=' for a tie), an optional caller's label, layout, recompute, dispatcher,
    the other knobs, memory and throughput (with ``bands``, each estimate's TFLOP/s band as `moeplan plan`'s
    table shows it: moeplan serve's table). No column is left empty."""
    labels = any(p.get("label") or p.get("name") for p in plans)
    head = ["#", *(["label"] if labels else []), "layout", "recompute", "dispatcher", "knobs", "peak GiB",
            "capacity GiB", "fits", "step time", "TFLOP/s/GPU", *(["TFLOP/s range"] if bands else []), "MFU vs BF16",
            "tokens/s/GPU"]
    rows = []
    for i, p in enumerate(plans, 1):
        rank = f"{p.get('rank', i)}{'=' if p.get('tie') else ''}"
        rows.append([
            _td(rank), *([_td(p.get("label") or p.get("name") or "–", "text")] if labels else []),
            _td(layout_label(p), "text"),
            _td(str(p.get("recompute", "–")).replace(",", ", "), "text wrap"), _td(p.get("dispatcher", "–"), "text"),
            _td(plan_knobs(p), "text wrap"),
            _td(_num(peak_gib(p), ".1f")), _td(_num(p.get("capacity_gib"), ".1f")), _fits_cell(p),
            _td(fmt_seconds(float(p["step_time_s"])) if "step_time_s" in p else "–"),
            _td(_num(p.get("tflops_per_gpu"), ".1f")), *([_td(_band(p))] if bands else []), _td(_num(p.get("mfu"), ".1%")),
            _td(_num(p.get("tokens_per_s_per_gpu"), ",.0f")),
        ])
    n_text = 5 if labels else 4
    return _table("plan-table", head, rows, text_cols=tuple(range(1, n_text + 1)))


def _memory_section(est: Row, ranks: Sequence[Mapping[str, float]] | None) -> str:
    from moeplan.plots import memory_figure

    mem = est["memory_gib"]
    total = float(mem["total"]) or 1.0
    rows = [[_td(k, "text"), _td(f"{v:.2f}"), _td(f"{v / total:.1%}")] for k, v in mem.items() if k != "total"]
    rows.append([_td("total", "text"), _td(f"{total:.2f}"), _td("100.0%")])
    items = _table("memory-table", ["item (most loaded rank)", "GiB", "share"], rows)
    from moeplan.templating import macro

    peak_rank = est.get("memory_rank")
    by_rank = est.get("memory_by_rank_gib") or []
    rank_rows = [{"cells": [_td(r), _td(f"{t:.1f}")], "cls": "peak" if r == peak_rank else ""}
                 for r, t in enumerate(by_rank)]
    rank_table = macro("table", tid="rank-table", head=["pipeline rank", "GiB"], rows=rank_rows, text_cols=())
    return macro("pair", left=items + "\n" + rank_table, plot_id="memory-plot",
                 svg=plot_svg(lambda: memory_figure(est, ranks)))


def _time_section(est: Row) -> str:
    from moeplan.plots import time_figure

    parts = sorted(est["time_breakdown_s"].items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in parts) or 1.0
    rows = [[_td(k, "text"), _td(fmt_seconds(v)), _td(f"{v / total:.1%}")] for k, v in parts]
    rows.append([_td("step", "text"), _td(fmt_seconds(float(est.get("step_time_s", total)))), _td("100.0%")])
    from moeplan.templating import macro

    table = _table("time-table", ["item", "time per step", "share"], rows)
    return macro("pair", left=table, plot_id="time-plot", svg=plot_svg(lambda: time_figure(est)))


def _binned_note(tl: Timeline) -> str:
    """A sentence when the chart is drawn over time bins (:func:`moeplan.plots.timeline_bins`), else ''."""
    if importlib.util.find_spec("matplotlib") is None:
        return ""
    from moeplan.plots import binned_sentence, end_windows, timeline_bins

    edges = timeline_bins(tl)
    if edges is None:
        return ""
    ends = " (the warm-up and the cool-down in detail below it)" if end_windows(tl) else ""
    return f" The chart is binned: {binned_sentence(tl, edges)}{ends}."


def _timeline_section(tl: Timeline) -> str:
    """Busy and idle time per pipeline rank, and the Gantt chart over the most loaded rank's memory. A rank's idle
    time over the pipeline is the pipeline bubble of the time breakdown (the schedule's warm-up and cool-down, the
    whole of the slowest rank's idle time and the same on every rank) plus, on a rank whose share of the model takes
    less time, the rest of each slot: every rank runs at the slowest rank's pace (moeplan.timeline)."""
    from moeplan.plots import timeline_figure

    span = tl.pipeline_end_s - tl.pipeline_start_s
    busy = [sum(o.busy_s for o in tl.rank_ops(r)) for r in range(tl.pp)]
    bubble = span - busy[tl.slowest_rank]
    rows = []
    for r in range(tl.pp):
        marks = ", ".join(m for m, hit in (("slowest", r == tl.slowest_rank), ("most memory", r == tl.memory_rank)) if hit)
        rows.append([_td(f"{r}" + (f" ({marks})" if marks else ""), "text"), _td(fmt_seconds(busy[r])),
                     _td(fmt_seconds(bubble)), _td(fmt_seconds(max(0.0, span - busy[r] - bubble))),
                     _td(f"{busy[r] / tl.step_time_s:.1%}")])
    note = (f"One iteration in Megatron-Core's {tl.schedule} order ({tl.microbatches} micro-batches,"
            f" PP {tl.pp}, VPP {tl.vpp}); step {fmt_seconds(tl.step_time_s)}; memory of rank {tl.memory_rank} peaks at "
            f"{tl.memory_peak_bytes / 1024**3:.1f} GiB.{_binned_note(tl)} `--trace FILE.json` on estimate, plan and "
            "check writes it for Perfetto.")
    idle = (f"A rank is idle in the pipeline for the pipeline bubble, {fmt_seconds(bubble)} "
            f"({bubble / tl.step_time_s:.1%} of the step: the schedule's warm-up and cool-down, the same on every rank "
            f"and the time breakdown's pp_bubble), plus, where its share of the model takes less time than rank "
            f"{tl.slowest_rank}'s, the rest of each slot: every rank runs at the slowest rank's pace, so that wait is "
            "imbalance across pipeline ranks, not schedule idle.")
    from moeplan.templating import macro

    return macro("timeline", note=note, idle=idle, rows=_rows(rows), plot_svg=plot_svg(lambda: timeline_figure(tl)))


def _sweep_section(sweep: Sequence[Row]) -> str:
    from moeplan.plots.sweep import sweep_figure

    labels = any("label" in r for r in sweep)
    head = ["sequence length", "GBS", *(["label"] if labels else []), "layout", "peak GiB", "capacity GiB", "fits",
            "TFLOP/s/GPU", "tokens/s/GPU"]
    # a length with no plan (no layout fits, or none is valid) is a row that says why, as the CLI's table does;
    # each length runs the same token budget, so its own GBS (tokens / length)
    rows = [[_td(seq_label(int(r["seq_len"]))), _td(_num(r.get("gbs"), ",.0f")),
             *([_td(r.get("label", ""), "text")] if labels else []),
             _td(plan_layout_label(r), "text") if "parallel" in r else _td(no_plan_reason(r), "text wrap"),
             _td(_num(peak_gib(r), ".1f")),
             _td(_num(r.get("capacity_gib"), ".1f")), _fits_cell(r), _td(_num(r.get("tflops_per_gpu"), ".1f")),
             _td(_num(r.get("tokens_per_s_per_gpu"), ",.0f"))]
            for r in sorted(sweep, key=lambda r: int(r["seq_len"]))]
    from markupsafe import Markup

    table = _table("sweep-table", head, rows, text_cols=(0, 2, 3) if labels else (0, 2))
    drawn = [r for r in sweep if "parallel" in r]  # the plot draws the lengths that have a run
    plot = Markup("\n") + _plot("sweep-plot", lambda: sweep_figure(drawn)) if drawn else ""
    return Markup('<div class="wide">') + table + Markup("</div>") + plot


# The pieces ``moeplan serve`` shows as the report does (moeplan.web.app): one markup, the same rows.
summary_section = _summary
plan_table = _plan_table
memory_section = _memory_section
time_section = _time_section
timeline_section = _timeline_section
sweep_section = _sweep_section


def render_html_report(*, title: str, plans: Sequence[Row], estimate: Row | None = None,
                       sweep: Sequence[Row] | None = None, overrides: Sequence[str] | None = None,
                       rationale: Sequence[str] | None = None,
                       ranks: Sequence[Mapping[str, float]] | None = None, timeline: Timeline | None = None,
                       notes: Sequence[str] | None = None) -> str:
    """The report page as a string (see :func:`write_html_report`)."""
    from moeplan.templating import render

    est = estimate if estimate is not None else next((p for p in plans[:1] if "time_breakdown_s" in p), None)
    has_memory = est is not None and isinstance(est.get("memory_gib"), Mapping)
    has_time = est is not None and "time_breakdown_s" in est
    return render("report.html.j2", title=title, css=CSS, summary=_summary(est, plans), notes=list(notes or ()),
                  plan_table=_plan_table(plans) if plans else None,
                  memory=_memory_section(est, ranks) if has_memory else None,
                  time=_time_section(est) if has_time else None,
                  timeline=_timeline_section(timeline) if timeline is not None else None,
                  overrides=list(overrides or ()), rationale=list(rationale or ()),
                  sweep=_sweep_section(sweep) if sweep else None)


def write_html_report(path: str | os.PathLike[str], *, title: str, plans: list[dict[str, Any]],
                      estimate: dict[str, Any] | None = None, sweep: list[dict[str, Any]] | None = None,
                      overrides: list[str] | None = None, rationale: list[str] | None = None,
                      ranks: list[dict[str, float]] | None = None, timeline: Timeline | None = None,
                      notes: list[str] | None = None) -> None:
    """Write one self-contained HTML page (atomically). ``estimate`` defaults to the first plan;
    ``ranks`` (memory items per pipeline rank) refines the memory plot; ``notes``: the search's notes."""
    html = render_html_report(title=title, plans=plans, estimate=estimate, sweep=sweep, overrides=overrides,
                              rationale=rationale, ranks=ranks, timeline=timeline, notes=notes)
    atomic_write(path, html.encode("utf-8"))
