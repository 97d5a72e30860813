"""MFU uses one peak at every precision, the dense BF16 one, and says so (issue 32): against the FP8 peak an FP8
plan read half as efficient as a BF16 plan at the same speed."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.cli import main
from moeplan.hardware import load_gpu

RUN = dict(gpus=16, seq_len=4096, gbs=64, ep=16)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_mfu_is_against_the_bf16_peak(precision):
    est = api.estimate("qwen3-30b-a3b", gpu="h100", precision=precision, **RUN)
    assert est["mfu_peak"] == "bf16"
    assert est["mfu"] == pytest.approx(est["tflops_per_gpu"] * 1e12 / load_gpu("h100").peak("bf16"))


def test_text_and_plans_label_the_peak(capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--ep", "16",
                 "--precision", "fp8"]) == 0
    assert "MFU (vs BF16 peak)" in capsys.readouterr().out
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--top", "1",
                 "--json"]) == 0
    (p,) = json.loads(capsys.readouterr().out)
    assert p["mfu_peak"] == "bf16"
