"""The sweep's plot: throughput and memory against sequence length (matplotlib, Agg; see :mod:`moeplan.plots`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from moeplan.base.errors import MoeplanError
from moeplan.plots import (BAD_COLOR, atomic_write, format_of, item_colors, need_keys, new_figure, plain, render,
                           seq_label)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
        need_keys(r, "seq_len", "tflops_per_gpu", "tokens_per_s_per_gpu", "memory_gib", "capacity_gib")
    fig = new_figure(8.0, 7.0)
    ax_tp, ax_mem = fig.subplots(2, 1, sharex=True)
    ax_tok = ax_tp.twinx()
    series = _series(rows)
    annotate = len(series) == 1 and series[0][0] == "" and any("label" in r for r in rows)
    colors = item_colors([k for k, _ in series])
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
                ax_mem.annotate(plain(r.get("label", "")), (x, m), xytext=(0, 6), textcoords="offset points",
                                ha="center", fontsize=7)
        if name:
            handles.append(Line2D([], [], color=c, marker="o", label=plain(name)))
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
