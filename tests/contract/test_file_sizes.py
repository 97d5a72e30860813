"""The house keeps each source file to one job: none over MAX_LINES lines (issue #30). A file that grows past it
is split by what it does (see docs/architecture.md), not trimmed of its comments."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "moeplan"
MAX_LINES = 800


def test_no_source_file_is_over_the_limit() -> None:
    over = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not over, f"source files over {MAX_LINES} lines (split them by job): {over}"
