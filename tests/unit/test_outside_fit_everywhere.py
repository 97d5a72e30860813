"""Every answer built on an estimate says when the model is outside the fit (issue 32): plan and sweep did,
explain did not."""

from __future__ import annotations

import json

from moeplan.cli import main

EXPLAIN = ["explain", "qwen3-next-80b-a3b", "--gpus", "64", "--seq-len", "32k,64k", "--gbs-tokens", "4m", "--no-fix"]


def test_explain_says_outside_the_fit_in_text(capsys):
    assert main(EXPLAIN) == 0
    out = capsys.readouterr().out
    assert "outside-fit" in out and "Gated DeltaNet" in out


def test_explain_says_outside_the_fit_in_json(capsys):
    assert main([*EXPLAIN, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (reason,) = [r for r in doc["reasons"] if r["topic"] == "outside-fit"]
    assert reason["numbers"]["runs"] == ["A", "B"]
    assert doc["a"]["outside_fit"] and doc["b"]["outside_fit_note"]


def test_explain_of_a_fitted_model_says_nothing_of_it(capsys):
    assert main(["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "256k", "--no-fix",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [r for r in doc["reasons"] if r["topic"] == "outside-fit"]
    assert doc["a"]["outside_fit"] == []
