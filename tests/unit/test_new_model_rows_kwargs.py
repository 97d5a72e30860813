"""tests/new_model_rows.estimate_kwargs reads bf16_moments as true / false / blank and refuses anything else, naming the
row (a typo such as 'True' or 'yes' would silently read as false)."""

from __future__ import annotations

import re

import pytest

from tests.new_model_rows import estimate_kwargs, rows


def _row(value: str) -> dict[str, str]:
    r = next(r for r in rows() if r["model"] and r["bf16_moments"])
    return dict(r, bf16_moments=value)


def test_bf16_moments_reads_true_false_and_blank():
    assert estimate_kwargs(_row("true"))["bf16_moments"] is True
    assert estimate_kwargs(_row("false"))["bf16_moments"] is False
    assert "bf16_moments" not in estimate_kwargs(_row(""))


@pytest.mark.parametrize("value", ["True", "yes", "1", "flase"])
def test_bf16_moments_refuses_anything_else_naming_the_row(value):
    r = _row(value)
    with pytest.raises(ValueError, match=re.escape(f"{r['group']} {r['label']}: bf16_moments '{value}'")):
        estimate_kwargs(r)
