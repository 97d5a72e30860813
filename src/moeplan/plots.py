"""Plots of estimates and sweeps (matplotlib, Agg; imported lazily so ``import moeplan`` stays fast).

Figures are built with :class:`matplotlib.figure.Figure` on an Agg canvas (no pyplot, no global
state). ``write_*`` functions pick the format from the file suffix (.png or .svg) and write
atomically; ``figure_svg`` returns an SVG string for embedding in HTML (see :mod:`moeplan.report`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moeplan.base.errors import MoeplanError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from moeplan.engine.timeline import Timeline

FORMATS = {".png": "png", ".svg": "svg"}
COMM_COLOR, BUBBLE_COLOR, COMPUTE_COLOR, OTHER_COLOR = "#e6862e", "#9e9e9e", "#3b75af", "#6aa56e"
OK_COLOR, BAD_COLOR = "#2e7d32", "#c62828"


# ----------------------------------------------------------------------------------- helpers


def seq_label(seq_len: int) -> str:
    """16384 -> '16K', 1048576 -> '1M'; other lengths as digits."""
    if seq_len >= 1 << 20 and seq_len % (1 << 20) == 0:
        return f"{seq_len >> 20}M"
    if seq_len >= 1024 and seq_len % 1024 == 0:
        return f"{seq_len >> 10}K"
    return str(seq_len)


def fmt_seconds(s: float) -> str:
    if s == 0:
        return "0 s"
    if s >= 100:
        return f"{s:,.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.1f} ms"


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` (a regular file or a new path) atomically: moeplan.base.outfile."""
    from moeplan.base.outfile import write_bytes

    write_bytes(path, data)


def format_of(path: str | os.PathLike[str]) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise MoeplanError(f"cannot write plot {path}: unsupported format {suffix or '(none)'!r}; use .png or .svg")
    return FORMATS[suffix]


def _new_figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # the 'plot' extra
        raise MoeplanError("plots need matplotlib: pip install 'moeplan[plot]'") from e
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes (SVG keeps text as text)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def figure_svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), ready to inline in HTML."""
    text = render(fig, "svg").decode()
    return text[text.index("<svg") :]


def _plain(text: object) -> str:
    """User text for a matplotlib label: no mathtext."""
    return str(text).replace("$", r"\$")


def _need(d: Mapping[str, Any], *keys: str) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise MoeplanError(f"estimate lacks {', '.join(missing)}; pass a dict from moeplan.api.estimate")


# -------------------------------------------------------------------------------- estimate


def _item_colors(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def draw_memory(ax: Axes, est: Mapping[str, Any], ranks: Sequence[Mapping[str, float]] | None = None) -> None:
    """Stacked memory items per pipeline rank, the capacity line and a fits/does-not-fit verdict.

    Without ``ranks`` (items per rank) only the most loaded rank is broken down; the other ranks'
    totals are drawn as a line.
    """
    _need(est, "memory_gib", "memory_by_rank_gib", "capacity_gib")
    peak_items = {k: float(v) for k, v in est["memory_gib"].items() if k != "total"}
    totals = [float(t) for t in est["memory_by_rank_gib"]]
    peak_rank = int(est.get("memory_rank", max(range(len(totals)), key=totals.__getitem__)))
    names = list(peak_items)
    if ranks is not None:
        names += [k for r in ranks for k in r if k != "total" and k not in names]
        per_rank = [{k: float(r.get(k, 0.0)) for k in names} for r in ranks]
        totals = [sum(r.values()) for r in per_rank]
        xs = list(range(len(per_rank)))
    else:
        per_rank = [peak_items]
        xs = [peak_rank]
    colors = _item_colors(names)
    shown = [n for n in names if any(r.get(n, 0.0) > 0 for r in per_rank)]
    bottoms = [0.0] * len(xs)
    for name in shown:
        vals = [r.get(name, 0.0) for r in per_rank]
        ax.bar(xs, vals, 0.7, bottom=bottoms, color=colors[name], label=_plain(name), edgecolor="white", lw=0.5)
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    if ranks is None and len(totals) > 1:
        ax.plot(range(len(totals)), totals, "o-", color="#333333", lw=1.5, ms=5, label="rank total", zorder=3)
    for x, t in enumerate(totals):
        ax.annotate(f"{t:.1f}", (x, t), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
    cap = float(est["capacity_gib"])
    ax.axhline(cap, color=BAD_COLOR, ls="--", lw=1.5)
    ax.annotate(f"capacity {cap:.1f} GiB", (1.0, cap), xycoords=("axes fraction", "data"), xytext=(-4, 4),
                textcoords="offset points", ha="right", va="bottom", fontsize=8, color=BAD_COLOR)
    peak = max(totals)
    fits = peak <= cap
    verdict = (f"fits: {cap - peak:.1f} GiB headroom" if fits else f"does not fit: {peak - cap:.1f} GiB over")
    ax.set_title(f"Memory per GPU (peak {peak:.1f} GiB) — {verdict}", fontsize=10,
                 color=OK_COLOR if fits else BAD_COLOR)
    ax.set_xticks(range(len(totals)), [f"{i}*" if i == peak_rank else str(i) for i in range(len(totals))])
    pad = max(0.0, (3 - len(totals)) / 2)  # keep a lone bar narrow
    ax.set_xlim(-0.6 - pad, len(totals) - 0.4 + pad)
    ax.set_xlabel("pipeline rank (* most loaded)" if ranks is not None or len(totals) == 1
                  else "pipeline rank (* most loaded, broken down)")
    ax.set_ylabel("GiB")
    ax.set_ylim(0, max(peak, cap) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(4, len(shown) + 1),
              frameon=False)


def _time_color(name: str) -> str:
    if name.endswith("_comm"):
        return COMM_COLOR
    if name == "pp_bubble":
        return BUBBLE_COLOR
    if name in ("optimizer", "offload", "launch_overhead"):
        return OTHER_COLOR
    return COMPUTE_COLOR


def draw_time(ax: Axes, est: Mapping[str, Any]) -> None:
    """Step-time items as horizontal bars, largest on top, each with seconds and share."""
    from matplotlib.patches import Patch

    _need(est, "time_breakdown_s")
    items = sorted(((k, float(v)) for k, v in est["time_breakdown_s"].items() if v > 0), key=lambda kv: kv[1])
    total = sum(v for _, v in items) or 1.0
    ys = range(len(items))
    ax.barh(ys, [v for _, v in items], color=[_time_color(k) for k, _ in items], height=0.7)
    ax.set_yticks(ys, [k for k, _ in items], fontsize=9)
    vmax = max((v for _, v in items), default=1.0)
    for y, (_, v) in zip(ys, items, strict=True):
        ax.annotate(f"{fmt_seconds(v)} ({v / total:.1%})", (v, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_xlim(0, vmax * 1.4)
    ax.set_xlabel("seconds per step")
    ax.grid(axis="x", alpha=0.3)
    step = float(est.get("step_time_s", total))
    bits = [f"step {fmt_seconds(step)}"]
    if "tflops_per_gpu" in est:
        bits.append(f"{est['tflops_per_gpu']:.1f} TFLOP/s/GPU")
    if "tokens_per_s_per_gpu" in est:
        bits.append(f"{est['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    ax.set_title("Step time — " + " · ".join(bits), fontsize=10)
    kinds = [("compute", COMPUTE_COLOR), ("communication", COMM_COLOR), ("pipeline bubble", BUBBLE_COLOR),
             ("optimizer / offload / launch", OTHER_COLOR)]
    used = {_time_color(k) for k, _ in items}
    ax.legend(handles=[Patch(color=c, label=n) for n, c in kinds if c in used], fontsize=8, loc="lower right")


def draw_plans_memory(ax: Axes, plans: Sequence[Mapping[str, Any]], budget_gib: float | None = None) -> None:
    """One stacked bar per plan (the memory items of its most loaded rank), its total on top, against the
    capacity (and the search's budget, HBM less the headroom, where given)."""
    if not plans:
        raise MoeplanError("the plans' memory plot needs at least one plan")
    for p in plans:
        _need(p, "memory_gib", "capacity_gib")
    names: list[str] = []
    for p in plans:
        names += [k for k in p["memory_gib"] if k != "total" and k not in names]
    colors = _item_colors(names)
    xs = list(range(len(plans)))
    bottoms = [0.0] * len(plans)
    for name in names:
        vals = [float(p["memory_gib"].get(name, 0.0)) for p in plans]
        if not any(v > 0 for v in vals):
            continue
        ax.bar(xs, vals, 0.6, bottom=bottoms, color=colors[name], label=_plain(name), edgecolor="white", lw=0.5)
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    for x, p in zip(xs, plans, strict=True):
        ax.annotate(f"{float(p['memory_gib']['total']):.1f}", (x, bottoms[x]), xytext=(0, 4),
                    textcoords="offset points", ha="center", fontsize=8)
    cap = max(float(p["capacity_gib"]) for p in plans)
    ax.axhline(cap, color=BAD_COLOR, ls="--", lw=1.5)
    ax.annotate(f"capacity {cap:.1f} GiB", (1.0, cap), xycoords=("axes fraction", "data"), xytext=(-4, 4),
                textcoords="offset points", ha="right", va="bottom", fontsize=8, color=BAD_COLOR)
    top = max([cap, *bottoms])
    if budget_gib is not None and budget_gib < cap:
        ax.axhline(budget_gib, color=COMM_COLOR, ls=":", lw=1.5, label=f"budget {budget_gib:.1f} GiB (HBM less headroom)")
    labels = [f"{p.get('rank', i + 1)}{'=' if p.get('tie') else ''}" for i, p in enumerate(plans)]
    ax.set_xticks(xs, labels)
    pad = max(0.0, (3 - len(plans)) / 2)
    ax.set_xlim(-0.6 - pad, len(plans) - 0.4 + pad)
    ax.set_xlabel("plan (= tie)")
    ax.set_ylabel("GiB per GPU (most loaded rank)")
    ax.set_ylim(0, top * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("Memory per GPU by plan", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)


def plans_memory_figure(plans: Sequence[Mapping[str, Any]], budget_gib: float | None = None) -> Figure:
    fig = _new_figure(6.4, 5.0)
    draw_plans_memory(fig.add_subplot(), plans, budget_gib)
    return fig


def memory_figure(est: Mapping[str, Any], ranks: Sequence[Mapping[str, float]] | None = None) -> Figure:
    fig = _new_figure(6.4, 5.0)
    draw_memory(fig.add_subplot(), est, ranks)
    return fig


def time_figure(est: Mapping[str, Any]) -> Figure:
    fig = _new_figure(6.4, 5.0)
    draw_time(fig.add_subplot(), est)
    return fig


FORWARD_COLOR, BACKWARD_COLOR, RECOMPUTE_COLOR, DP_COLOR = "#8fb8de", "#3b75af", "#c44e52", "#8172b3"

# The Gantt chart draws every operation, item and collective as its own rectangle (one compound path per
# rank and kind) while there are at most GANTT_MAX_BARS of them in view and at most GANTT_BINS operations per
# rank (about 2 px each on the ~1,400 px wide chart at 120 dpi). Beyond, it (and the memory panel under it)
# is drawn over time bins, with the warm-up and the cool-down in two more panels below: one rectangle per
# operation and item made DeepSeek-V3 PP 8 VPP 4 x 512 micro-batches (32,768 operations, 0.3 px each) a
# 49 MB SVG of 278k paths.
GANTT_MAX_BARS = 20_000
GANTT_BINS = 720
# pipeline work per bin, stacked bottom-up in a rank's row (exposed communication at the bottom, as in the
# exact chart); the share of time hidden communication runs is the thin band above
BINNED_STACK = ("comm", "forward", "backward", "recompute")
_OWN = ("forward", "backward", "recompute", "optimizer", "offload", "dp_comm")
# (y offset, height, color) per kind inside a rank's row of height 1
_STYLE = {"forward": (0.25, 0.6, FORWARD_COLOR), "backward": (0.25, 0.6, BACKWARD_COLOR),
          "recompute": (0.25, 0.6, RECOMPUTE_COLOR), "comm": (0.25, 0.18, COMM_COLOR),
          "overlapped": (0.87, 0.1, COMM_COLOR),
          "dp_comm": (0.05, 0.14, DP_COLOR), "optimizer": (0.25, 0.6, OTHER_COLOR),
          "offload": (0.25, 0.6, BUBBLE_COLOR)}
# what the exact chart draws of each span: its own kind, or "compute" (an item inside its operation: drawn
# by the operation); the aggregated chart splits those between forward and backward by their operation
_KEYS = ("forward", "backward", "recompute", "optimizer", "offload", "dp_comm", "overlapped", "comm", "compute")
Bars = dict[tuple[int, str], tuple[Any, Any]]  # (rank, kind): (starts, ends), numpy arrays


def _span_key(track: str, category: str) -> str:
    if category in _OWN:
        return category
    if track != "compute":
        return "overlapped" if category.endswith("_overlapped") else "comm"
    return "compute"


class _Columns:
    """A timeline's spans by (rank, kind), sorted by start, and its operations per rank, as numpy arrays:
    built once per timeline (a long pipeline has hundreds of thousands of spans) and shared by the chart,
    its warm-up and cool-down panels and the memory panel."""

    def __init__(self, tl: Timeline) -> None:
        import numpy as np

        from moeplan.engine.timeline import gc_paused

        self.groups: dict[tuple[int, str], tuple[Any, Any]] = {}
        if tl.spans:
            with gc_paused():  # the collector would rescan the spans at every threshold: 5x slower
                rank, track, _, start, dur, cat, *_ = zip(*tl.spans, strict=True)
            codes = {tc: _KEYS.index(_span_key(*tc)) for tc in set(zip(track, cat))}
            code = np.fromiter(map(codes.__getitem__, zip(track, cat)), dtype=np.int64, count=len(tl.spans))
            ranks = np.asarray(rank, dtype=np.int64)
            starts = np.asarray(start, dtype=float)
            ends = starts + np.asarray(dur, dtype=float)
            combo = ranks * len(_KEYS) + code
            order = np.lexsort((starts, combo))
            combo, starts, ends = combo[order], starts[order], ends[order]
            cuts = np.flatnonzero(np.r_[True, combo[1:] != combo[:-1], True])
            for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
                r, k = divmod(int(combo[lo]), len(_KEYS))
                self.groups[(r, _KEYS[k])] = (starts[lo:hi], ends[lo:hi])
        self.ops: dict[int, tuple[Any, Any, Any]] = {}  # rank: (starts, slot ends, is forward), by start
        by_rank: dict[int, list[tuple[float, float, bool]]] = {}
        for o in tl.ops:
            by_rank.setdefault(o.rank, []).append((o.start_s, o.start_s + o.slot_s, o.step.kind == "F"))
        for r, rows in by_rank.items():
            rows.sort()
            st, en, fwd = zip(*rows, strict=True)
            self.ops[r] = (np.asarray(st), np.asarray(en), np.asarray(fwd, dtype=bool))

    def ops_per_rank(self, a: float, b: float) -> list[int]:
        """Operations of each rank overlapping [a, b)."""
        return [int(((st < b) & (en > a)).sum()) for st, en, _ in self.ops.values()]

    def bars(self, keys: Sequence[str], a: float, b: float, limit: float = float("inf")) -> Bars | None:
        """The spans of ``keys`` overlapping [a, b) by (rank, kind); None past ``limit`` of them."""
        out: Bars = {}
        n = 0
        for (r, k), (st, en) in self.groups.items():
            if k in keys:
                sel = (st < b) & (en > a)
                n += int(sel.sum())
                if n > limit:
                    return None
                if sel.any():
                    out[(r, k)] = (st[sel], en[sel])
        return out


_COLUMNS: list[Any] = [(lambda: None, None)]  # (weak reference to a timeline, its _Columns): the last one drawn


def _columns(tl: Timeline) -> _Columns:
    import weakref

    ref, cols = _COLUMNS[0]
    if ref() is not tl:
        cols = _Columns(tl)
        _COLUMNS[0] = (weakref.ref(tl), cols)
    return cols


def _period(tl: Timeline) -> float:
    """One forward and one backward slot: a rank's steady-state period (0 when there is none)."""
    fwd = next((o.slot_s for o in tl.ops if o.step.kind == "F"), 0.0)
    bwd = next((o.slot_s for o in tl.ops if o.step.kind == "B"), 0.0)
    return fwd + bwd


_DRAWN = tuple(k for k in _KEYS if k != "compute")  # what the exact chart draws


def _view(tl: Timeline, window: tuple[float, float] | None, share: float) -> tuple[Bars | None, Any]:
    """How ``window`` (default: the whole step) of the chart is drawn on ``share`` of the figure's width:
    (the exact chart's rectangles, None) or (None, the bins' edges)."""
    import math

    import numpy as np

    a, b = window or (0.0, tl.step_time_s)
    cols = _columns(tl)
    if not (b > a and math.isfinite(b - a)):  # nothing to bin (a zero or non-finite step): as it is
        return cols.bars(_DRAWN, float("-inf"), float("inf")), None
    per_rank = cols.ops_per_rank(a, b)
    max_bars, max_ops = GANTT_MAX_BARS * share, GANTT_BINS * share
    if max(per_rank, default=0) <= max_ops and sum(per_rank) <= max_bars:
        bars = cols.bars(_DRAWN, a, b, max_bars)
        if bars is not None:
            return bars, None
    span, period, n_bins = b - a, _period(tl), max(1, round(max_ops))
    if period > 0 and math.isfinite(period):
        width = period * max(1, math.ceil(span / (n_bins * period)))
    else:
        width = span / n_bins
    n = max(1, math.ceil(span / width * (1 - 1e-12)))
    edges = np.minimum(a + np.arange(n + 1) * width, b)
    edges[-1] = b
    return None, edges


def binned_sentence(tl: Timeline, edges: Any) -> str:
    """What a binned chart shows (:func:`timeline_bins`' ``edges``), for its title and the report's note."""
    return (f"{len(tl.ops):,} operations, too many to draw one by one: the share of every "
            f"{fmt_seconds(float(edges[1] - edges[0]))} each rank spends in each kind of work")


def timeline_bins(tl: Timeline, window: tuple[float, float] | None = None, share: float = 1.0) -> Any:
    """Edges of the time bins (a numpy array, seconds) the timeline is drawn over in ``window`` (default: the
    whole step) on ``share`` of the figure's width, or None when it is drawn operation by operation there
    (at most :data:`GANTT_MAX_BARS` rectangles and :data:`GANTT_BINS` operations per rank, both times
    ``share``).

    A bin is a whole number of steady-state periods (one forward and one backward slot), so in the steady
    state every bin holds the same work whatever its phase, and equal bins merge into one shape."""
    return _view(tl, window, share)[1]


def _covered(starts: Any, ends: Any, edges: Any) -> Any:
    """Seconds of each bin covered by the union of the intervals [starts, ends)."""
    import numpy as np

    if len(starts) == 0:
        return np.zeros(len(edges) - 1)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])  # the first interval of each union
    us = s[first]
    ue = reach[np.r_[first[1:] - 1, len(s) - 1]]
    before = np.r_[0.0, np.cumsum(ue - us)]  # covered time before union i
    k = np.searchsorted(us, edges, side="right") - 1  # the last union starting at or before each edge
    kk = np.maximum(k, 0)
    upto = np.where(k >= 0, before[kk] + np.clip(edges - us[kk], 0.0, ue[kk] - us[kk]), 0.0)
    return np.diff(upto)


def _binned_work(tl: Timeline, edges: Any) -> tuple[dict[tuple[int, str], Any], Bars]:
    """The share of each bin every rank spends on each kind of pipeline work (:data:`BINNED_STACK` and
    ``overlapped``), and the spans outside the operations (DP collectives, optimizer, offload) as they are."""
    import numpy as np

    cols = _columns(tl)
    width = np.diff(edges)
    shares: dict[tuple[int, str], Any] = {}
    for (r, key), (st, en) in cols.groups.items():
        if key in ("comm", "recompute", "overlapped"):
            shares[(r, key)] = _covered(st, en, edges) / width
        elif key == "compute":  # forward or backward, by the operation it sits in
            op_st, _, op_fwd = cols.ops[r]
            fwd = op_fwd[np.clip(np.searchsorted(op_st, st, side="right") - 1, 0, len(op_st) - 1)]
            shares[(r, "forward")] = _covered(st[fwd], en[fwd], edges) / width
            shares[(r, "backward")] = _covered(st[~fwd], en[~fwd], edges) / width
    whole = cols.bars(("dp_comm", "optimizer", "offload"), float(edges[0]), float(edges[-1]))
    return shares, whole or {}


def _merge_steps(edges: Any, rows: Sequence[Any], resolution: float) -> tuple[Any, list[Any]]:
    """Step curves (one value per bin) rounded to ``resolution``, runs of equal bins (every curve equal)
    merged: the bin edges left and the curves, each with its last value repeated (for step="post")."""
    import numpy as np

    q = [np.round(np.asarray(v, dtype=float) / resolution) * resolution for v in rows]
    keep = np.ones(len(edges) - 1, bool)
    if len(keep) > 1:
        keep[1:] = False
        for v in q:
            keep[1:] |= v[1:] != v[:-1]
    x = np.r_[edges[:-1][keep], edges[-1]]
    return x, [np.r_[v[keep], v[keep][-1]] for v in q]


def _draw_gantt_binned(ax: Axes, tl: Timeline, edges: Any) -> set[str]:
    """Per rank and bin, the shares of pipeline work stacked (white: waiting) and the share of hidden
    communication as the thin band above; DP collectives, optimizer and offload as they are."""
    import numpy as np

    shares, whole = _binned_work(tl, edges)
    zero = np.zeros(len(edges) - 1)
    used: set[str] = set()
    for r in range(tl.pp):
        y = tl.pp - 1 - r
        x, q = _merge_steps(edges, [shares.get((r, k), zero) for k in (*BINNED_STACK, "overlapped")], 1 / 200)
        low = np.zeros(len(x))
        for key, v in zip(BINNED_STACK, q[:-1], strict=True):  # stacked in the compute band (_STYLE's forward row)
            high = np.minimum(low + v, 1.0)
            if (high > low).any():
                y0, h, color = _STYLE["forward"][0], _STYLE["forward"][1], _STYLE[key][2]
                ax.fill_between(x, y + y0 + h * low, y + y0 + h * high, step="post", color=color,
                                lw=0).set_in_layout(False)
                used.add(key)
            low = high
        if q[-1].any():
            y0, h, color = _STYLE["overlapped"]
            ax.fill_between(x, y + y0, y + y0 + h * np.minimum(q[-1], 1.0), step="post", color=color,
                            lw=0).set_in_layout(False)
            used.add("overlapped")
    return used | _draw_bars(ax, tl, whole)


def _draw_bars(ax: Axes, tl: Timeline, bars: Bars) -> set[str]:
    """Each (rank, kind)'s rectangles as one compound path: one SVG element per rank and kind, not one per
    rectangle (a third fewer bytes), added without autoscaling (the limits are set) or layout."""
    import numpy as np
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as MplPath

    for (rank, key), (x0, x1) in bars.items():
        y0, h, color = _STYLE[key]
        y = tl.pp - 1 - rank + y0
        polys = np.empty((len(x0), 4, 2))
        polys[:, :, 0] = np.stack([x0, x1, x1, x0], axis=1)
        polys[:, :, 1] = [y, y, y + h, y + h]
        patch = PathPatch(MplPath.make_compound_path_from_polys(polys), facecolor=color, edgecolor="none", lw=0)
        patch.set_in_layout(False)
        ax.add_artist(patch)
    return {k for _, k in bars}


def draw_gantt(ax: Axes, tl: Timeline, window: tuple[float, float] | None = None, title: str | None = None,
               legend: bool = True, share: float = 1.0) -> Any:
    """One row per pipeline rank (rank 0 on top): forwards, backwards, recompute at the start of each
    backward, exposed TP / CP / EP / PP communication inside the operations (lower band), the DP
    reduce-scatter / all-gather (thin band, overlapping the pipeline where they are hidden), the
    optimizer step and the CPU offload at the end. Gaps are waits: for inputs, or for the slowest rank.

    ``window`` (seconds) limits the chart to part of the step, drawn on ``share`` of the figure's width.
    With too much in view to draw one rectangle per item (:data:`GANTT_MAX_BARS`, :data:`GANTT_BINS`) the
    pipeline is drawn over time bins (:func:`timeline_bins`): in each bin the shares of time a rank spends
    in exposed communication, forwards, backwards and recompute, stacked, the rest (white) waiting; the thin
    band above, the share of time hidden communication runs. Returns the bins' edges (None when drawn
    operation by operation)."""
    from matplotlib.patches import Patch

    bars, edges = _view(tl, window, share)
    used = _draw_bars(ax, tl, bars) if bars is not None else _draw_gantt_binned(ax, tl, edges)
    ax.set_yticks([tl.pp - 1 - r + 0.55 for r in range(tl.pp)], [f"PP {r}" for r in range(tl.pp)],
                  fontsize=8 if tl.pp <= 16 else 6)
    ax.set_ylim(0, tl.pp)
    ax.set_xlim(*(window or (0, tl.step_time_s)))
    ax.grid(axis="x", alpha=0.3)  # the time axis is labelled on the memory panel below
    if legend:
        labels = [("forward", FORWARD_COLOR), ("backward", BACKWARD_COLOR), ("recompute", RECOMPUTE_COLOR),
                  ("exposed TP/CP/EP/PP comm", COMM_COLOR), ("overlapped TP/CP/EP comm (thin, above)", COMM_COLOR),
                  ("DP reduce-scatter / all-gather", DP_COLOR), ("optimizer", OTHER_COLOR),
                  ("CPU offload", BUBBLE_COLOR)]
        keys = ["forward", "backward", "recompute", "comm", "overlapped", "dp_comm", "optimizer", "offload"]
        handles = [Patch(color=c, label=n) for (n, c), k in zip(labels, keys) if k in used]
        if edges is not None:
            handles.append(Patch(facecolor="white", edgecolor="#999999", lw=0.5, label="waiting (bubble)"))
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=len(handles),
                  frameon=False)
    if title is None:
        title = (f"One iteration ({_plain(tl.title)}): {tl.schedule} as Megatron-Core orders it — "
                 f"step {fmt_seconds(tl.step_time_s)}")
        if edges is not None:
            title += f"\n{binned_sentence(tl, edges)}, stacked (--trace has every operation)"
    ax.set_title(title, fontsize=10)
    return edges


def end_windows(tl: Timeline) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The warm-up and the cool-down of an aggregated timeline (:func:`timeline_bins`), in seconds: from the
    step's start to one period (a forward and a backward slot) after the last rank's first backward (the
    pipeline is full), and from one period before the first rank's last forward ends (it drains) to the
    step's end, gradient sync, optimizer and offload included; each at least six periods of the pipeline.
    None when the chart is drawn operation by operation, or when the two would cover half the step or more
    (nothing to zoom into)."""
    if timeline_bins(tl) is None:
        return None
    period = _period(tl)
    first_b: dict[int, float] = {}  # each rank's first backward: the pipeline is full
    last_f: dict[int, float] = {}  # and the end of its last forward: it drains
    for o in tl.ops:
        if o.step.kind == "B":
            first_b[o.rank] = min(first_b.get(o.rank, o.start_s), o.start_s)
        else:
            last_f[o.rank] = max(last_f.get(o.rank, 0.0), o.start_s + o.slot_s)
    if not first_b or not last_f:
        return None
    warm_end = max(max(first_b.values()) + period, tl.pipeline_start_s + 6 * period)
    cool_start = min(min(last_f.values()) - period, tl.pipeline_end_s - 6 * period)
    if warm_end + (tl.step_time_s - cool_start) >= 0.5 * tl.step_time_s:
        return None
    return (0.0, warm_end), (cool_start, tl.step_time_s)


def _draw_ends(ax_warm: Axes, ax_cool: Axes, tl: Timeline, windows: tuple[tuple[float, float], ...]) -> None:
    """The warm-up and cool-down windows of an aggregated chart, operation by operation where few enough."""
    for ax, (a, b), what in zip((ax_warm, ax_cool), windows, ("Warm-up", "Cool-down, gradient sync, optimizer"),
                                strict=True):
        binned = draw_gantt(ax, tl, (a, b), title="", legend=False, share=0.5) is not None
        ax.set_title(f"{what}: {fmt_seconds(a)} to {fmt_seconds(b)} ({'binned' if binned else 'every operation'})",
                     fontsize=10)
        ax.set_xlabel("seconds into the step")


def draw_schedule_memory(ax: Axes, tl: Timeline) -> None:
    """The most loaded rank's memory over the step: static items, in-flight activations (rising in the
    warm-up, falling in the cool-down) and the running layer's transient, against the capacity. Over the
    time bins of an aggregated Gantt chart, each bin's highest value (the peak is kept)."""
    gib = 1024**3
    ts = [p[0] for p in tl.memory_s]
    static = [p[1] / gib for p in tl.memory_s]
    act = [(p[1] + p[2]) / gib for p in tl.memory_s]
    total = [(p[1] + p[2] + p[3]) / gib for p in tl.memory_s]
    edges = timeline_bins(tl)
    if edges is not None:
        ts, (static, act, total) = _merge_steps(edges, [_bin_max(ts, v, edges) for v in (static, act, total)],
                                                1e-4)
    ax.fill_between(ts, 0, static, step="post", color="#bdbdbd", label="weights, grads, optimizer, buffers", lw=0)
    ax.fill_between(ts, static, act, step="post", color=FORWARD_COLOR, label="activations in flight", lw=0)
    ax.fill_between(ts, act, total, step="post", color=RECOMPUTE_COLOR, label="transient", lw=0)
    cap = tl.capacity_bytes / gib
    peak = tl.memory_peak_bytes / gib
    ax.axhline(cap, color=BAD_COLOR, ls="--", lw=1.2)
    ax.axhline(tl.memory_estimate_bytes / gib, color="#333333", ls=":", lw=1.0)
    ax.annotate(f"capacity {cap:.1f} GiB", (1.0, cap), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                textcoords="offset points", ha="right", va="bottom", fontsize=8, color=BAD_COLOR)
    ax.set_xlim(0, tl.step_time_s)
    ax.set_ylim(0, max(cap, peak) * 1.15)
    ax.set_ylabel("GiB")
    ax.set_xlabel("seconds into the step")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"Memory of pipeline rank {tl.memory_rank} (most loaded) over the step — peak {peak:.1f} GiB "
                 f"= memory estimate" + ("" if edges is None else " (each bin's highest)"), fontsize=10)
    ax.legend(fontsize=7, loc="lower right")


def _bin_max(ts: Sequence[float], values: Sequence[float], edges: Any) -> Any:
    """The highest value a step function (``values[i]`` from ``ts[i]`` on) takes in each bin."""
    import numpy as np

    t, v = np.asarray(ts), np.asarray(values)
    out = v[np.clip(np.searchsorted(t, edges[:-1], side="right") - 1, 0, len(v) - 1)]  # in force at the start
    inside = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(out) - 1)
    np.maximum.at(out, inside, v)
    return out


def _ends_height(tl: Timeline) -> float:
    return 1.0 + 0.18 * tl.pp


def _timeline_rows(tl: Timeline) -> tuple[list[list[str]], list[float], float, Any]:
    """The timeline's panels as mosaic rows: the Gantt chart, the most loaded rank's memory under it and, for an
    aggregated chart, its warm-up and cool-down (:func:`end_windows`); their height ratios, the inches they
    take, and the end windows (None where the chart shows every operation)."""
    ends = end_windows(tl)
    gantt_h = 1.2 + 0.22 * tl.pp
    rows, heights, inches = [["gantt", "gantt"], ["tmem", "tmem"]], [gantt_h, 2.4], gantt_h + 2.8
    if ends is not None:
        rows.append(["warm", "cool"])
        heights.append(_ends_height(tl))
        inches += _ends_height(tl) + 0.6
    return rows, heights, inches, ends


def _draw_timeline(axes: Mapping[str, Axes], tl: Timeline, ends: Any) -> None:
    """The panels :func:`_timeline_rows` laid out, on one time axis."""
    draw_gantt(axes["gantt"], tl)
    draw_schedule_memory(axes["tmem"], tl)
    axes["tmem"].sharex(axes["gantt"])
    if ends is not None:
        _draw_ends(axes["warm"], axes["cool"], tl, ends)


def timeline_figure(tl: Timeline) -> Figure:
    """The Gantt chart of one iteration over the most loaded rank's memory, on one time axis; an aggregated
    chart (:func:`timeline_bins`) also gets its warm-up and cool-down (:func:`end_windows`) below."""
    rows, heights, inches, ends = _timeline_rows(tl)
    fig = _new_figure(13.0, 1.8 + inches)
    _draw_timeline(fig.subplot_mosaic(rows, height_ratios=heights), tl, ends)
    return fig


def estimate_figure(est: Mapping[str, Any], ranks: Sequence[Mapping[str, float]] | None = None,
                    timeline: Timeline | None = None) -> Figure:
    """(a) memory per pipeline rank, (b) step-time breakdown, side by side; with ``timeline`` also
    (c) the Gantt chart of one iteration and (d) the most loaded rank's memory over it (and, aggregated,
    (e) its warm-up and cool-down)."""
    if timeline is None:
        fig = _new_figure(13.0, 5.4)
        ax_mem, ax_time = fig.subplots(1, 2, width_ratios=[1, 1.1])
    else:
        rows, heights, inches, ends = _timeline_rows(timeline)
        fig = _new_figure(13.0, 5.4 + inches)
        axes = fig.subplot_mosaic([["mem", "time"], *rows], height_ratios=[5.0, *heights], width_ratios=[1, 1.1])
        ax_mem, ax_time = axes["mem"], axes["time"]
        _draw_timeline(axes, timeline, ends)
    draw_memory(ax_mem, est, ranks)
    draw_time(ax_time, est)
    head = " · ".join(_plain(est[k]) for k in ("model", "gpu") if k in est)
    if "gpus" in est and "seq_len" in est:
        head += f" · {est['gpus']} GPUs · seq {seq_label(int(est['seq_len']))}"
    if head:
        fig.suptitle(head, fontsize=11)
    return fig


def write_estimate_plot(est: Mapping[str, Any], path: str | os.PathLike[str], *,
                        ranks: Sequence[Mapping[str, float]] | None = None, timeline: Timeline | None = None) -> None:
    """Memory (per pipeline rank, against capacity) and step-time breakdown of one estimate, with the
    timeline of one iteration when given."""
    fmt = format_of(path)
    atomic_write(path, render(estimate_figure(est, ranks, timeline), fmt))


# ----------------------------------------------------------------------------------- sweep


def _series(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """Rows grouped by ``label`` (in first-seen order), each sorted by sequence length. When every
    row has its own label, one unnamed series (the labels annotate the points)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r.get("label", "")), []).append(r)
    if len(groups) == len(rows) > 1:
        groups = {"": list(rows)}
    return [(k, sorted(v, key=lambda r: int(r["seq_len"]))) for k, v in groups.items()]


def sweep_figure(rows: Sequence[Mapping[str, Any]], no_plan: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """Throughput (TFLOP/s/GPU, tokens/s/GPU on a twin axis) and memory against sequence length. ``no_plan``: the
    sweep's lengths with no plan (rows with ``seq_len`` and ``closest``, the run that misses by least, or
    ``invalid``): kept on the axis, a × at the closest run's memory, or "no valid layout" on the axis."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    if not rows:
        raise MoeplanError("sweep plot needs at least one row")
    for r in rows:
        _need(r, "seq_len", "tflops_per_gpu", "tokens_per_s_per_gpu", "memory_gib", "capacity_gib")
    fig = _new_figure(8.0, 7.0)
    ax_tp, ax_mem = fig.subplots(2, 1, sharex=True)
    ax_tok = ax_tp.twinx()
    series = _series(rows)
    annotate = len(series) == 1 and series[0][0] == "" and any("label" in r for r in rows)
    colors = _item_colors([k for k, _ in series])
    handles = []
    for name, rs in series:
        xs = [int(r["seq_len"]) for r in rs]
        c = colors[name]
        ax_tp.plot(xs, [r["tflops_per_gpu"] for r in rs], "o-", color=c)
        ax_tok.plot(xs, [r["tokens_per_s_per_gpu"] for r in rs], "s--", color=c, alpha=0.8)
        mem = [_total(r) for r in rs]
        ax_mem.plot(xs, mem, "o-", color=c)
        bad = [(x, m) for x, m, r in zip(xs, mem, rs, strict=True) if m > float(r["capacity_gib"])]
        if bad:
            ax_mem.scatter(*zip(*bad, strict=True), marker="x", s=70, color=BAD_COLOR, zorder=4)
        if annotate:
            for x, m, r in zip(xs, mem, rs, strict=True):
                ax_mem.annotate(_plain(r.get("label", "")), (x, m), xytext=(0, 6), textcoords="offset points",
                                ha="center", fontsize=7)
        if name:
            handles.append(Line2D([], [], color=c, marker="o", label=_plain(name)))
    for r in no_plan:  # nothing fits (×, the closest run's memory) or no valid layout (said on the axis)
        closest = r.get("closest") or {}
        x = int(r["seq_len"])
        if closest.get("memory_gib") is not None:
            ax_mem.scatter([x], [float(closest["memory_gib"])], marker="x", s=70, color=BAD_COLOR, zorder=4)
            budget = closest.get("memory_gib_budget")  # the capacity less the planner's headroom
            said = f"closest run\n(budget {float(budget):.1f} GiB)" if budget is not None else "closest run"
            ax_mem.annotate(said, (x, float(closest["memory_gib"])), xytext=(0, -20), textcoords="offset points",
                            ha="center", fontsize=7, color=BAD_COLOR)
        else:
            ax_mem.annotate("no valid layout", (x, 0.0), xytext=(0, 6), textcoords="offset points", ha="center",
                            fontsize=7, color=BAD_COLOR)
    for cap in sorted({round(float(r["capacity_gib"]), 6) for r in rows}):  # labelled as every other plot: 79.6
        ax_mem.axhline(cap, color=BAD_COLOR, ls="--", lw=1.2)
        ax_mem.annotate(f"capacity {cap:.1f} GiB", (0.0, cap), xycoords=("axes fraction", "data"),
                        xytext=(4, 3), textcoords="offset points", fontsize=8, color=BAD_COLOR)
    top = max([max(_total(r), float(r["capacity_gib"])) for r in rows]
              + [float((r.get("closest") or {}).get("memory_gib") or 0.0) for r in no_plan])
    ax_mem.set_ylim(0, top * 1.18)
    seqs = sorted({int(r["seq_len"]) for r in (*rows, *no_plan)})
    ax_mem.set_xscale("log", base=2)
    lo, hi = seqs[0], seqs[-1]
    ax_mem.set_xlim(lo / 1.3, hi * 1.3)
    ax_mem.xaxis.set_major_locator(FixedLocator(seqs))
    ax_mem.xaxis.set_minor_locator(NullLocator())
    ax_mem.set_xticks(seqs, [seq_label(s) for s in seqs])
    ax_mem.set_xlabel("sequence length (tokens)")
    ax_mem.set_ylabel("peak memory per GPU (GiB)")
    ax_mem.set_title("Memory (× = does not fit" + ("; at a length with no plan, the run that misses by least"
                     if no_plan else "") + ")", fontsize=10)
    ax_tp.set_ylabel("TFLOP/s/GPU")
    ax_tok.set_ylabel("tokens/s/GPU")
    ax_tp.set_ylim(0, max(float(r["tflops_per_gpu"]) for r in rows) * 1.12 or 1.0)
    ax_tok.set_ylim(0, max(float(r["tokens_per_s_per_gpu"]) for r in rows) * 1.12 or 1.0)
    ax_tp.set_title("Throughput", fontsize=10)
    for ax in (ax_tp, ax_mem):
        ax.grid(alpha=0.3)
    styles = [Line2D([], [], color="#444444", marker="o", label="TFLOP/s/GPU (left)"),
              Line2D([], [], color="#444444", marker="s", ls="--", label="tokens/s/GPU (right)")]
    ax_tp.legend(handles=handles + styles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08),
                 ncol=min(4, len(handles) + 2), frameon=False)
    return fig


def _total(row: Mapping[str, Any]) -> float:
    mem = row["memory_gib"]
    return float(mem["total"] if isinstance(mem, Mapping) else mem)


def write_sweep_plot(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
                     no_plan: Sequence[Mapping[str, Any]] = ()) -> None:
    """Throughput and memory against sequence length (log2 axis) for estimate-like rows (and the lengths with no
    plan: :func:`sweep_figure`)."""
    fmt = format_of(path)
    atomic_write(path, render(sweep_figure(rows, no_plan), fmt))
