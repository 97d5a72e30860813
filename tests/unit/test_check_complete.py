"""`moeplan check` answers completely: every finding it can after a layout error, "did you mean" for
misspelt keys, and a summary that counts every severity it prints (issue 11)."""

from __future__ import annotations

import json

from moeplan import checker
from moeplan.cli import main
from moeplan.rules import did_you_mean
from moeplan.megatron.read import known_keys

BAD_128K = """\
model:
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 16
  context_parallel_size: 32
  expert_model_parallel_size: 32
  recompute_granularity: selective
  recompute_modules: [core_attn, layernorm]
train:
  global_batch_size: 1024
  micro_batch_size: 1
dataset:
  seq_length: 131072
"""


def test_layout_error_does_not_hide_other_findings(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_128K)
    result = checker.check(str(path), model="deepseek-v3", gpus=1024)
    rules = {f.rule: f for f in result.findings}
    assert rules["layers-pp"].severity == "error"  # 61 layers over 16 stages
    assert rules["layers-pp"].fix and "pipeline_model_parallel_layout" in rules["layers-pp"].fix[0]
    assert rules["core-attn-recompute"].severity == "warning"
    assert rules["core-attn-recompute"].fix == ("model.recompute_modules=[layernorm]",)
    assert rules["core-attn-recompute"].line == 7
    assert rules["dp-collapsed"].numbers["dp"] == 1
    skipped = rules["skipped"]
    assert skipped.severity == "info" and "layers-pp" in skipped.message and "memory" in skipped.numbers["skipped"]
    assert result.estimate is None


def test_did_you_mean_on_bridge_and_megatron_lm_keys(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(BAD_128K.replace("tensor_model_parallel_size", "tensor_model_paralel_size")
                    .replace("micro_batch_size", "micro_batch_sise") + "modle:\n  foo: 1\n")
    result = checker.check(str(path), model="deepseek-v3", gpus=1024)
    hints = {f.message.split("'")[1]: f.numbers.get("suggestion") for f in result.findings if f.rule == "unknown-key"}
    assert hints == {"model.tensor_model_paralel_size": "model.tensor_model_parallel_size",
                     "train.micro_batch_sise": "train.micro_batch_size", "modle": "model"}
    assert did_you_mean("--context-paralel-size", known_keys("megatron-lm")) == "--context-parallel-size"
    assert did_you_mean("model.zzzz_qqq", known_keys("bridge-yaml")) is None


def test_summary_counts_information_findings(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_128K)
    code = main(["check", str(path), "--model", "deepseek-v3", "--gpus", "1024"])
    out = capsys.readouterr().out
    assert code == 1
    result = checker.check(str(path), model="deepseek-v3", gpus=1024)
    assert result.infos >= 1
    assert f"{result.errors} error" in out and f"{result.infos} information finding" in out
    main(["check", str(path), "--model", "deepseek-v3", "--gpus", "1024", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["infos"] == result.infos and data["warnings"] == result.warnings
