"""Tables readable at 80 columns: number formats, narrow layouts that fold knob columns, and tables that
break no word."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.cli.output import Console, Table


def fmt_count(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return str(v)


NARROW_COLUMNS = 120  # below this many terminal columns, tables fold their knob columns into one


def wrapping(text: str) -> str:
    """A label list ('selective:a,b') that a table cell may wrap after each separator, never inside a label."""
    return text.replace(",", ", ").replace(":", ": ")


def _column_ranges(console: Console, table: Table) -> list[tuple[int, int]]:
    """(narrowest, widest) text width of each column without breaking a word: a no-wrap column needs
    its longest cell whole; a wrapping one its longest word (cells wrap at spaces)."""
    from rich.cells import cell_len

    out = []
    for col in table.columns:
        cells = [console.render_str(c) if isinstance(c, str) else c for c in (col.header, *col.cells)]
        texts = [t.plain for t in cells if hasattr(t, "plain")]
        widest = max((cell_len(line) for t in texts for line in t.splitlines() or [""]), default=1)
        longest_word = max((cell_len(w) for t in texts for w in t.split()), default=1)
        out.append((widest if col.no_wrap else max(longest_word, col.min_width or 0), widest))
    return out


def _frame_width(table: Table) -> int:
    """Columns a table takes besides its cells' text, from its public settings (box edges and rules,
    cell padding: with ``pad_edge`` off the outer edges have none, ``collapse_padding`` drops the left)."""
    n = len(table.columns)
    frame = (2 if table.box and table.show_edge else 0) + (n - 1 if table.box else 0)
    _, right, _, left = table.padding
    if table.collapse_padding:
        left = 0
    pads = n * (left + right)
    if not table.pad_edge and n:
        pads -= left + right
    return frame + pads


def _fit_unbroken(console: Console, table: Table) -> bool:
    """Give each wrapping column a width so that the table fits the terminal and no word breaks;
    False when even the narrowest such widths do not fit."""
    ranges = _column_ranges(console, table)
    room = console.width - _frame_width(table)
    if sum(hi for _, hi in ranges) <= room:
        return True  # fits as is: rich lays it out at natural widths
    if sum(lo for lo, _ in ranges) > room:
        return False
    widths = [lo for lo, _ in ranges]
    spare = room - sum(widths)
    while spare > 0:  # widen the wrapping columns that want it, one character at a time, in turn
        grew = False
        for i, (lo, hi) in enumerate(ranges):
            if spare and widths[i] < hi:
                widths[i] += 1
                spare -= 1
                grew = True
        if not grew:
            break
    for col, width in zip(table.columns, widths, strict=True):
        col.width = width
    return True


def unbroken(console: Console, build: Callable[[bool], Table]) -> Table:
    """The wide table when the terminal holds it without breaking a word or a number, else the narrow
    one (which breaks words only on a terminal too narrow even for it)."""
    if console.width >= NARROW_COLUMNS:
        wide = build(False)
        if _fit_unbroken(console, wide):
            return wide
    narrow = build(True)
    _fit_unbroken(console, narrow)
    return narrow


def compact_table(title: str) -> Table:
    """A table for a narrow terminal: no rules between columns, one space of padding between them."""
    return Table(title=title, box=None, padding=(0, 1), pad_edge=False, header_style="bold")


def make_table(title: str, narrow: bool) -> Table:
    """A table; on a narrow terminal without vertical rules (the columns keep the room)."""
    from rich import box

    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1)) if narrow else Table(title=title)


def num_column(table: Table, title: str) -> None:
    table.add_column(title, justify="right", no_wrap=True)


def text_column(table: Table, title: str, **kw: Any) -> None:
    table.add_column(title, overflow="fold", **kw)


def knobs_text(p: dict[str, Any]) -> str:
    """Dispatcher, CP communication, CUDA graphs, offload and MBS of a plan, for a narrow table."""
    par = p["parallel"]
    parts = [p["dispatcher"] + (" +ovl" if p["ep_overlap"] else "")]
    if par["cp"] > 1:
        parts.append(f"CP {p['cp_comm_type']}")
    if p["cuda_graphs"]:
        parts.append("graphs " + ", ".join(p["cuda_graphs"]))
    if p["optimizer_offload"]:
        parts.append(f"offload {p['optimizer_offload']:.0%}")
    if p["mbs"] != 1:
        parts.append(f"MBS {p['mbs']}")
    return "; ".join(parts)


def print_overrides(overrides: list[str], console: Console, title: str) -> None:
    """Overrides one per line, never broken, ready to copy (the same lines as --format overrides)."""
    console.print(f"[b]{title}[/] (one per line, as `--format overrides` writes them)")
    for o in overrides:
        console.print(o, highlight=False, markup=False, soft_wrap=True)
