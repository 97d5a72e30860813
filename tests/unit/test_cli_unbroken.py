"""Tables never break a word or a number at any terminal width from 80 columns up (issue 11): between
the narrow layout (under 120 columns) and the widest terminals the wide table used to squeeze its
headers to `dispatche r`, `reco mput e`; now it is used only where it fits whole, else the narrow one."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from moeplan import api
from moeplan.cli.plan import print_plans
from moeplan.cli.sweep import print_sweep

SPLIT = re.compile(r"[\s│┃┏┓┗┛━─┡┩┳╇┻┴┬┼└┘┌┐]+")


def _render(show, data, width: int) -> str:
    buf = io.StringIO()
    show(data, Console(width=width, file=buf, force_terminal=False, color_system=None))
    return buf.getvalue()


def _words(text: str) -> set[str]:
    return {w for w in SPLIT.split(text) if w}


def _table_part(text: str) -> str:
    return text[:text.index("Why plan")] if "Why plan" in text else text


@pytest.fixture(scope="module")
def plans():
    return [api.search_plans("deepseek-v3", gpu="h100", gpus=1024, seq_len=131072, gbs=1024, top=3).as_dict(),
            api.search_plans("qwen3-next-80b-a3b", gpu="h100", gpus=128, seq_len=65536, gbs=256, top=3).as_dict()]


def test_plan_tables_break_no_word_at_any_width(plans):
    for result in plans:
        whole = _words(_table_part(_render(print_plans, result, 1000))) | _words(_table_part(_render(print_plans, result, 119)))
        for width in range(80, 261, 5):
            out = _render(print_plans, result, width)
            table = _table_part(out)
            broken = sorted(_words(table) - whole)
            assert not broken and "…" not in table, (result["model"], width, broken[:6])
            assert all(len(line) <= width for line in table.splitlines()), (result["model"], width)
        # the wide table (every column) wherever it fits whole, the narrow one below
        assert "TFLOP/s range" in _render(print_plans, result, 260)
        assert "knobs" in _render(print_plans, result, 100)


def test_sweep_table_breaks_no_word():
    rows = api.sweep("qwen3-30b-a3b", seq_lens=[16384, 32768, 65536], gbs_tokens=2**21, gpus=64)
    whole = _words(_render(print_sweep, rows, 1000)) | _words(_render(print_sweep, rows, 119))
    for width in range(80, 201, 5):
        out = _render(print_sweep, rows, width)
        assert not _words(out) - whole and "…" not in out, width
        assert all(len(line) <= width for line in out.splitlines()), width


def test_catalog_tables_at_80_columns_cut_no_name(monkeypatch, capsys):
    """`moeplan models` and `moeplan hardware` are the first commands a user runs: at 80 columns every
    model and GPU name is whole (it is what you type next) and no number is cut."""
    from moeplan.cli import main
    from moeplan.hardware import hardware_names
    from moeplan.models.catalog import catalog_names

    monkeypatch.setenv("COLUMNS", "80")
    for command, names in (("models", catalog_names()), ("hardware", hardware_names())):
        assert main([command]) == 0
        out = capsys.readouterr().out
        assert "…" not in out and all(len(line) <= 80 for line in out.splitlines()), out
        first_words = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert set(names) <= first_words, set(names) - first_words
    assert main(["hardware"]) == 0
    table = capsys.readouterr().out
    assert "1,979" in table and "5,000" in table  # FP8 TF of H100 and GB200, whole


def test_frame_width_matches_rich_layout():
    """cli._frame_width reads only public Table settings; it must equal what rich itself adds around the
    cells (its private _extra_width and _get_padding_width, compared here while this rich has them)."""
    import pytest
    from rich import box
    from rich.table import Table

    from moeplan.cli.tables import _frame_width

    for kw in ({}, {"box": None, "padding": (0, 1), "pad_edge": False}, {"box": box.SIMPLE, "show_edge": False},
               {"collapse_padding": True}, {"padding": (0, 2, 0, 1), "pad_edge": False}):
        t = Table(**kw)
        for i in range(4):
            t.add_column(str(i))
        if not hasattr(t, "_extra_width") or not hasattr(t, "_get_padding_width"):
            pytest.skip("this rich release has no private layout helpers to compare with")
        assert _frame_width(t) == t._extra_width + sum(t._get_padding_width(i) for i in range(4)), kw
