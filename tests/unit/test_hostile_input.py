"""Hostile input answers in one line, exit 2, well under a second (issue 32): deep nesting, YAML alias bombs,
sizes far past any real model or run, keys or flags given twice, odd model names."""

from __future__ import annotations

import json
import re
import time
from importlib import resources
from pathlib import Path

import pytest
import yaml

from moeplan.base import safeyaml
from moeplan.base.limits import ARCH_LARGEST, arch_bound, run_bound
from moeplan.cli import main

FAST_S = 1.0  # "well under a second" on a loaded machine: the old answers took minutes


def run_cli(capsys, *argv: str) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    took = time.perf_counter() - t0
    out, err = capsys.readouterr()
    return code, out, err, took


def refused(capsys, *argv: str) -> str:
    code, out, err, took = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("moeplan"), err
    assert took < FAST_S, (argv, took)
    return line


def bomb(levels: int = 9, width: int = 9) -> str:
    """A billion-laughs YAML: anchors a..i, each a list of ``width`` aliases to the one before (width^levels)."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"  {names[0]}: &{names[0]} [{', '.join(['x'] * width)}]"]
    for prev, cur in zip(names, names[1:]):
        lines.append(f"  {cur}: &{cur} [{', '.join(['*' + prev] * width)}]")
    return "x:\n" + "\n".join(lines) + "\n"


QWEN = ["qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64"]


# ------------------------------------------------------------------ nesting and alias bombs


def test_a_config_json_nested_100000_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = refused(capsys, "params", str(path))
    assert "nested too deeply" in line


def test_the_safe_loader_refuses_an_alias_bomb_fast():
    text = bomb() + "model:\n  recompute_modules: *i\n"
    assert len(text) < 700
    t0 = time.perf_counter()
    with pytest.raises(yaml.YAMLError, match="alias"):
        safeyaml.load(text)
    assert time.perf_counter() - t0 < FAST_S


def test_the_safe_loader_counts_expanded_values_and_refuses_recursion():
    assert safeyaml.expanded_nodes(safeyaml.compose("a: &a [1, 2]\nb: [*a, *a]\n")) == 1 + (1 + 3) + (1 + 1 + 3 + 3)  # map, a: [1, 2], b: [a, a] expanded
    with pytest.raises(yaml.YAMLError, match="recursive alias"):
        safeyaml.load("a: &a [*a]\n")
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        safeyaml.load("a: " + "[" * 100_000 + "]" * 100_000)
    assert safeyaml.load("a: &a [1, 2]\nb: *a\n") == {"a": [1, 2], "b": [1, 2]}  # small aliases are fine


def test_alias_bomb_in_every_yaml_reader(tmp_path, capsys):
    text = bomb() + "model:\n  recompute_modules: *i\n"
    path = tmp_path / "f.yaml"
    path.write_text(text)
    for argv in (["check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "8"],
                 ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--strategy", str(path)],
                 ["estimate", *QWEN, "--hardware", str(path)],
                 ["estimate", *QWEN, "--calibration", str(path)]):
        assert "alias" in refused(capsys, *argv), argv


def test_deep_yaml_in_every_yaml_reader(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text("model: " + "[" * 100_000 + "]" * 100_000)
    for argv in (["check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "8"],
                 ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--strategy", str(path)],
                 ["estimate", *QWEN, "--hardware", str(path)],
                 ["estimate", *QWEN, "--calibration", str(path)]):
        code, _, err, _ = run_cli(capsys, *argv)
        assert code == 2 and "Traceback" not in err and "nested too deeply" in err, (argv, err)


def test_a_yaml_key_given_twice_is_refused_with_both_lines(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("batch:\n  seq_len: 4096\n  gbs: 64\n  seq_len: 8192\n")
    line = refused(capsys, "estimate", "qwen3-30b-a3b", "--gpus", "16", "--strategy", str(path))
    assert "batch.seq_len" in line and "lines 2 and 4" in line


# ------------------------------------------------------------------ sizes


def _config_with(tmp_path: Path, model: str = "qwen3-30b-a3b", **keys: object) -> Path:
    text = resources.files("moeplan.models.data").joinpath(f"{model}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    data.update(keys)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_a_billion_layers_is_refused_naming_the_bound(tmp_path, capsys):
    line = refused(capsys, "params", str(_config_with(tmp_path, num_hidden_layers=1_000_000_000)))
    assert f"num_hidden_layers 1000000000 exceeds {arch_bound('num_hidden_layers')}" in line
    assert "no published model is within 10x" in line


@pytest.mark.parametrize("key", ["hidden_size", "intermediate_size", "moe_intermediate_size", "vocab_size",
                                 "num_attention_heads", "num_key_value_heads", "head_dim", "num_experts"])
def test_every_architecture_count_is_bounded(tmp_path, capsys, key):
    model = "deepseek-v3" if key == "intermediate_size" else "qwen3-30b-a3b"  # its first dense layers read it
    line = refused(capsys, "params", str(_config_with(tmp_path, model, **{key: 2**30})))
    assert f"{key} {2**30} exceeds {arch_bound(key)}" in line


def test_the_bounds_leave_ten_times_the_largest_published_value():
    for key, (largest, _) in ARCH_LARGEST.items():
        assert arch_bound(key) >= 10 * largest, key


@pytest.mark.parametrize("argv, flag", [
    (["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "99999999999999999999k", "--gbs", "64"], "--seq-len"),
    (["plan", *QWEN, "--top", "1000000000"], "--top"),
    (["plan", "qwen3-30b-a3b", "--gpus", "100000000", "--seq-len", "4k", "--gbs", "64"], "--gpus"),
    (["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "100000000"], "--gbs"),
    (["estimate", *QWEN, "--tp", "100000000"], "--tp"),
    (["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,999999m", "--gbs-tokens", "4m"], "--seq-len"),
    (["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs-tokens", "99999m"], "--gbs-tokens"),
    (["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", ",".join(f"{k}k" for k in range(1, 10_001)),
      "--gbs-tokens", "4m"], "--seq-len"),
])
def test_every_cli_size_is_bounded(capsys, argv, flag):
    line = refused(capsys, *argv)
    assert f"argument {flag}:" in line and re.search(r"\d+ (lengths )?exceeds? \d+: ", line)


def test_the_api_takes_the_same_bounds():
    from moeplan import api
    from moeplan.base.errors import MoeplanError

    with pytest.raises(MoeplanError, match=f"top 1000000000 exceeds {run_bound('top')}"):
        api.plan("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=64, top=1_000_000_000)
    with pytest.raises(MoeplanError, match="seq_len .* exceeds"):
        api.plan("qwen3-30b-a3b", gpus=16, seq_len=2**40, gbs=64)
    with pytest.raises(MoeplanError, match="10000 lengths exceed 64"):
        api.sweep("qwen3-30b-a3b", gpus=16, seq_lens=list(range(1024, 1024 * 10_001, 1024)), gbs_tokens=2**22)


# ------------------------------------------------------------------ names


def test_an_empty_model_name_says_so(capsys):
    line = refused(capsys, "params", "")
    assert "empty model name" in line


def test_a_model_name_with_a_newline_is_one_line(capsys):
    code, _, err, _ = run_cli(capsys, "params", "qwen3-30b-a3b\nx")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "\\n" in err


# ------------------------------------------------------------------ check: keys and flags given twice


def test_check_reports_a_yaml_key_given_twice(tmp_path):
    from moeplan.lint import checker

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  seq_length: 4096\n  tensor_model_parallel_size: 2\n  seq_length: 8192\n"
                    "train:\n  global_batch_size: 64\n")
    found = [f for f in checker.check(path, model="qwen3-30b-a3b", gpus=8).findings if f.rule == "duplicate"]
    assert len(found) == 1 and found[0].line == 4
    assert "model.seq_length" in found[0].message and "lines 2 and 4" in found[0].message


def test_check_reports_a_megatron_lm_flag_given_twice(tmp_path):
    from moeplan.lint import checker

    path = tmp_path / "run.sh"
    path.write_text("torchrun pretrain_gpt.py --seq-length 4096 --global-batch-size 64 \\\n"
                    "  --tensor-model-parallel-size 2 \\\n  --seq-length 8192\n")
    found = [f for f in checker.check(path, model="qwen3-30b-a3b", gpus=8).findings if f.rule == "duplicate"]
    assert len(found) == 1 and found[0].line == 3
    assert "--seq-length" in found[0].message and "lines 1 and 3" in found[0].message
