"""The README's "Three examples" block (plan 1 of three commands) is what the planner prints today (scripts/readme_plans.py writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "readme_plans.py"


def _script():
    spec = importlib.util.spec_from_file_location("readme_plans", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_readme_plans_block_is_current(capsys):
    mod = _script()
    code = mod.main(["--check"])
    assert code == 0, capsys.readouterr().err + " (run: python scripts/readme_plans.py)"
    text = mod.README.read_text(encoding="utf-8")
    # the block is not empty: one headline per case, each with a layout and throughput
    assert text.count("tokens/s/GPU.") >= len(mod.CASES) and "`TP" in text
