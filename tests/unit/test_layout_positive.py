"""check_layout's first rule: every size >= 1, each bad one named (the valid path checks them in one
comparison, moeplan.run.parallel.check_layout), and nothing else is checked until they are."""

from __future__ import annotations

from moeplan.models import load_model
from moeplan.run.parallel import Batch, Parallel, check_layout


def test_non_positive_sizes_are_each_named_and_stop_the_check():
    spec = load_model("deepseek-v3")
    bad = check_layout(spec, Parallel(64, tp=0, pp=1, vpp=1, cp=-2, ep=8, etp=1), Batch(4096, 64, 1), "0.16")
    assert [b.rule for b in bad] == ["positive", "positive"]
    assert "TP must be >= 1, got 0" in bad[0].reason and "CP must be >= 1, got -2" in bad[1].reason
    assert check_layout(spec, Parallel(64, tp=1, pp=1, vpp=1, cp=1, ep=8, etp=1), Batch(4096, 64, 1), "0.16") == []
