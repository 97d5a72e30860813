"""`check --mcore` keeps Megatron-Core's own UserWarnings off stderr (issue 11): the config warnings
become information findings, import-time notices about this machine are dropped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="Megatron-Core validation needs torch (pip install torch)")
pytest.importorskip("megatron.core", reason="Megatron-Core validation needs megatron-core (pip install 'moeplan[mcore]')")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_128k_h100.yaml"


def test_check_mcore_prints_nothing_on_stderr():
    cmd = [sys.executable, "-W", "default", "-m", "moeplan", "check", str(EXAMPLE), "--model", "deepseek-v3",
           "--gpus", "1024", "--mcore", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr  # the example has errors (it is the linter's showcase)
    assert r.stderr == "", r.stderr
    data = json.loads(r.stdout)
    warned = [f for f in data["findings"] if f["rule"] == "mcore-warning"]
    assert warned and all(f["severity"] == "info" and f["message"].startswith("Megatron-Core warns: ") for f in warned)
    assert not any("Transformer Engine and Apex are not installed" in f["message"] for f in warned)
