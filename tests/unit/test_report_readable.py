"""HTML report and plots readable where people read them (issue 11): no empty column in the plans table,
and no label of a plot outside its figure (a clipped axis label)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from moeplan.cli import main

pytest.importorskip("matplotlib")


class _Table(HTMLParser):
    """The header and cell texts of the table with a given id."""

    def __init__(self, tid: str) -> None:
        super().__init__()
        self.tid, self.inside, self.cell = tid, False, None
        self.head: list[str] = []
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("id") == self.tid:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("th", "td"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("th", "td") and self.cell is not None:
            (self.head if tag == "th" else self.rows[-1]).append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def test_report_plans_table_has_no_empty_column(tmp_path: Path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "32k", "--gbs", "64", "--top", "4",
                 "--html", str(out)]) == 0
    capsys.readouterr()
    t = _Table("plan-table")
    t.feed(out.read_text())
    rows = [r for r in t.rows if r]
    assert len(rows) == 4 and "plan" not in t.head and "knobs" in t.head
    for col, name in enumerate(t.head):
        assert all(r[col] for r in rows), f"column {name!r} has an empty cell"
    from moeplan import api
    from moeplan.report import plan_knobs

    plans = api.search_plans("qwen3-30b-a3b", gpu="h100", gpus=64, seq_len=32768, gbs=64, top=4).as_dict()["plans"]
    assert [r[t.head.index("knobs")] for r in rows] == [plan_knobs(p) for p in plans]
    assert [r[0] for r in rows] == [f"{p['rank']}{'=' if p['tie'] else ''}" for p in plans]
    assert plan_knobs({"parallel": {"cp": 8}, "cp_comm_type": "a2a", "ep_overlap": True, "mbs": 2,
                       "cuda_graphs": ["attn"], "optimizer_offload": 0.5}) == \
        "EP overlap · CP a2a · graphs attn · offload 50% · MBS 2"


def _outside(fig) -> list[str]:
    """Texts (axis labels, titles, visible tick labels) that reach outside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    box = fig.bbox
    bad = []
    for ax in fig.axes:
        lo, hi = sorted(ax.get_ylim())
        texts = [ax.yaxis.label, ax.xaxis.label, ax.title]
        texts += [t for t, v in zip(ax.get_yticklabels(), ax.get_yticks()) if lo <= v <= hi]
        for t in texts:
            if not t.get_text() or not t.get_visible():
                continue
            e = t.get_window_extent(renderer)
            if e.x0 < box.x0 - 0.5 or e.y0 < box.y0 - 0.5 or e.x1 > box.x1 + 0.5 or e.y1 > box.y1 + 0.5:
                bad.append(t.get_text())
    return bad


@pytest.mark.parametrize("hold", [None, {"tp": 8, "pp": 8, "cp": 1, "ep": 32}])
def test_sweep_plot_labels_inside_the_figure(hold):
    from moeplan import api
    from moeplan.plots import sweep as sweep_plot

    rows = api.sweep("deepseek-v3", seq_lens=[4096, 32768, 131072], gbs_tokens=2**22, gpus=256, hold=hold)
    rows = [r for r in rows if "parallel" in r]
    fig = sweep_plot.sweep_figure(rows)
    assert _outside(fig) == []
    mem_ax = [ax for ax in fig.axes if "memory" in ax.get_ylabel()]
    assert mem_ax and mem_ax[0].get_ylabel() == "peak memory per GPU (GiB)"


def test_estimate_plots_labels_inside_the_figure():
    from moeplan import api
    from moeplan import plots

    est = api.estimate("qwen3-30b-a3b", gpus=64, seq_len=32768, gbs=64, tp=1, cp=8, ep=32)
    for make in (plots.memory_figure, plots.time_figure):
        assert _outside(make(est)) == [], make.__name__
