"""`moeplan check` answers completely: every finding it can after a layout error, "did you mean" for
misspelt keys, and a summary that counts every severity it prints (issue 11)."""

from __future__ import annotations

import json

from moeplan.lint import checker
from moeplan.cli import main
from moeplan.lint.rules import did_you_mean
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


def test_two_fixes_of_one_key_become_one_checked_fix(tmp_path):
    """The memory fix and the core_attn fix both rewrite recompute_modules; the combined fix is applied
    to the file and the file checked again: no memory error, no core_attn warning."""
    from pathlib import Path

    from moeplan.megatron.export import to_overrides

    example = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_128k_h100.yaml"
    result = checker.check(str(example), model="deepseek-v3", gpus=1024)
    rules = {f.rule: f for f in result.findings}
    combined = rules["combined-fix"]
    assert combined.severity == "error" and "model.recompute_modules" in combined.numbers["keys"]
    assert "checked" in combined.message and "does not fit" in combined.message  # core_attn fix alone is OOM
    assert {"memory", "core-attn-recompute"} <= set(rules)
    # apply the one fix (overrides: the last value of a key wins) and check again
    fixed = tmp_path / "fixed.overrides"
    fixed.write_text("\n".join([*to_overrides(result.config, result.config.mcore_version), *combined.fix]) + "\n")
    again = checker.check(str(fixed), model="deepseek-v3", gpus=1024)
    left = {f.rule for f in again.findings}
    assert not left & {"memory", "core-attn-recompute", "combined-fix"}, left
    # applying only the core_attn fix leaves the run out of memory
    only_attn = tmp_path / "attn.overrides"
    only_attn.write_text("\n".join([*to_overrides(result.config, result.config.mcore_version),
                                    *rules["core-attn-recompute"].fix]) + "\n")
    assert "memory" in {f.rule for f in checker.check(str(only_attn), model="deepseek-v3", gpus=1024).findings}


def test_exports_carry_the_model_and_check_reads_it_back(tmp_path, capsys):
    """plan --format yaml / overrides / megatron-lm start with '# moeplan: model=... gpus=...'; check
    needs no --model, --gpus or --mcore-version for them and finds the same numbers."""
    base = ["plan", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "64k", "--gbs", "256", "--top", "1",
            "--mcore-version", "0.18"]
    outs = {}
    for fmt in ("yaml", "overrides", "megatron-lm"):
        assert main([*base, "--format", fmt]) == 0
        text = capsys.readouterr().out
        assert text.splitlines()[0] == ("# moeplan: model=qwen3-next-80b-a3b gpu=h100 gpus=128 mcore-version=0.18")
        path = tmp_path / f"run.{fmt}"
        path.write_text(text)
        result = checker.check(str(path))
        assert result.config.model.name == "qwen3-next-80b-a3b" and result.config.parallel.gpus == 128
        assert result.config.mcore_version == "0.18" and result.errors == 0, result.findings
        outs[fmt] = round(result.estimate.time.tokens_per_s_per_gpu, 6)
    assert len(set(outs.values())) == 1
    # the command line still wins over the comment
    result = checker.check(str(tmp_path / "run.yaml"), gpus=256)
    assert result.config.parallel.gpus == 256


def test_a2a_p2p_without_hierarchical_sizes_gets_the_split(tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_128k_h100.yaml"
    result = checker.check(str(example), model="deepseek-v3", gpus=1024)
    hit = next(f for f in result.findings if f.rule == "mcore-hierarchical-cp-missing")
    assert hit.fix == ("model.hierarchical_context_parallel_sizes=[8,4]",)  # TP1: 8 CP ranks per H100 node
