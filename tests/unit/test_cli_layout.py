"""Tables laid out for the terminal: at 80 columns nothing is cut ('…'), no line is wider than the
terminal, overrides and fixes are whole lines to copy; piped output follows COLUMNS (issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_128k_h100.yaml"
PLAN = ["plan", "deepseek-v3", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--top", "3"]


def _cli(*argv: str, columns: int | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = subprocess.run([sys.executable, "-m", "moeplan", *argv], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def _plans_json() -> list[dict]:
    return json.loads(_cli(*PLAN, "--json", columns=None))


def test_plan_at_80_columns_cuts_nothing_and_keeps_overrides_whole():
    out = _cli(*PLAN, columns=80)
    lines = out.splitlines()
    overrides = _plans_json()[0]["overrides"]
    assert "…" not in out
    assert all(len(line) <= 80 for line in lines if line not in overrides), max(lines, key=len)
    assert set(overrides) <= set(lines)  # each override is one whole line
    table = out[out.index("Plans, fastest first"):out.index("Why plan 1")]
    best = _plans_json()[0]
    numbers = (f"{best['memory_gib']['total']:.1f}", f"{best['tflops_per_gpu']:,.0f}")
    for word in ("TFLOP/s", "tok/s", "selective:", "mla_up_proj,", "deepep", *numbers):
        assert word in table, word


def test_piped_output_follows_columns():
    wide = _cli(*PLAN, columns=200)
    assert max(len(line) for line in wide.splitlines()[:12]) > 120  # the wide table, all columns
    assert "MFU" in wide and "dispatcher" in wide
    assert max(len(line) for line in _cli(*PLAN, columns=100).splitlines()[:12]) <= 100


def test_check_at_80_columns_prints_fixes_as_lines():
    out = _cli("check", str(EXAMPLE), "--model", "deepseek-v3", "--gpus", "1024", columns=80)
    lines = out.splitlines()
    assert "…" not in out
    assert "model.recompute_modules=[layernorm,mla_up_proj,moe]" in lines
    assert "model.hierarchical_context_parallel_sizes=[8,4]" in lines
    assert any(line.startswith("# fix 1: combined-fix") for line in lines)
    assert "[fix 1]" in out
    assert all(len(line) <= 80 for line in lines if not line.startswith(("model.", "# fix")))


def test_sweep_at_80_columns():
    out = _cli("sweep", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "16k,32k", "--gbs-tokens", "2m", columns=80)
    assert "…" not in out and all(len(line) <= 80 for line in out.splitlines())
    assert "16,384" in out and "32,768" in out
