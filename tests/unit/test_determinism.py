"""The same question gives the same bytes in every process (no dependence on Python's string-hash seed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CASES = [
    ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "32k", "--gbs", "64", "--tp", "2", "--cp", "2",
     "--ep", "8", "--cuda-graphs", "attn,moe_router,moe_preprocess", "--json"],
    ["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "16k,32k", "--gbs-tokens", "1m", "--no-fix", "--json"],
]


@pytest.mark.parametrize("argv", CASES, ids=lambda a: a[0])
def test_output_does_not_depend_on_the_hash_seed(argv):
    outs = set()
    for seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-m", "moeplan", *argv], capture_output=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        outs.add(proc.stdout)
    assert len(outs) == 1
