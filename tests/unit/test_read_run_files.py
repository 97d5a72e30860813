"""Reading run files as Megatron would run them, and errors that say where in the file they are (an exploratory
tester's findings): --recompute-activations wins over --recompute-granularity (Megatron-LM validate_args), bad
values carry FILE:LINE like bad types do, and a conflict carries the line it is about."""

from __future__ import annotations

import re

import pytest

from moeplan.lint import checker
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.megatron.read import parse_run_text, read_run_file
from moeplan.megatron.to_run import run_config_from_settings
from moeplan.models import load_model

MODEL = "qwen3-30b-a3b"
A4 = ("--expert-model-parallel-size 8 --seq-length 8192 --micro-batch-size 1 --global-batch-size 128 "
      "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --recompute-activations "
      "--bf16\n")


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---- 1. --recompute-activations: Megatron-LM's validate_args sets recompute_granularity 'selective'


def test_recompute_activations_wins_over_granularity(tmp_path):
    path = _write(tmp_path, "a4.txt", A4)
    run = read_run_file(path)
    assert run.settings["recompute_granularity"] == "selective"
    assert len(run.conflicts) == 1
    conflict = run.conflicts[0]
    assert "--recompute-activations wins" in conflict.message and "validate_args" in conflict.message
    assert "--recompute-granularity wins" not in conflict.message


def test_recompute_activations_run_is_what_megatron_runs(tmp_path):
    """Selective recompute (core_attn, Megatron-Core's default modules), and the leftover recompute_num_layers
    is Megatron-Core's own rejection (TransformerConfig: selective needs recompute_num_layers None)."""
    path = _write(tmp_path, "a4.txt", "--recompute-num-layers 1\n" + A4.replace("--recompute-num-layers 1 ", ""))
    result = checker.check(path, model=MODEL, gpus=32)
    assert result.config.recompute.granularity == "selective"
    assert result.config.recompute.modules == frozenset({"core_attn"})
    rules = {f.rule: f for f in result.findings}
    assert rules["mcore-recompute-num-layers"].severity == "error"
    assert rules["mcore-recompute-num-layers"].line == 1
    assert "full-recompute" not in rules
    assert "mcore-recompute-method" not in rules  # TransformerConfig accepts a method with selective


@pytest.mark.parametrize("text", ["--recompute-activations\n",
                                  "--recompute-granularity selective --recompute-activations\n",
                                  "--recompute-activations --recompute-granularity selective\n"])
def test_recompute_activations_without_disagreement(text):
    run = parse_run_text("--seq-length 4096 --global-batch-size 64\n" + text, "r.sh")
    assert run.settings["recompute_granularity"] == "selective" and run.conflicts == []


def test_recompute_activations_wins_whatever_the_order():
    run = parse_run_text("--recompute-activations\n--recompute-granularity full\n", "r.sh")
    assert run.settings["recompute_granularity"] == "selective"
    assert run.lines["recompute_granularity"] == 1
    assert run.conflicts[0].line == 2 and "--recompute-activations wins" in run.conflicts[0].message


# ---- 2. bad values carry FILE:LINE like bad types


BAD_VALUES = [
    ("mbs.yaml", "model:\n  seq_length: 4096\ntrain:\n  global_batch_size: 128\n  micro_batch_size: 0\n", 5,
     "micro_batch_size must be a positive integer, got 0"),
    ("disp.yaml", "model:\n  seq_length: 4096\n  moe_token_dispatcher_type: deepep\ntrain:\n  global_batch_size: 128\n",
     3, "moe_token_dispatcher_type 'deepep' unknown"),
    ("off.txt", "model.seq_length=4096\ntrain.global_batch_size=128\noptimizer.optimizer_cpu_offload=true\n"
     "optimizer.optimizer_offload_fraction=1.5\n", 4, "optimizer offload fraction must be in [0, 1], got 1.5"),
    ("cf.txt", "model.seq_length=4096 train.global_batch_size=128\nmodel.moe_expert_capacity_factor=-1\n", 2,
     "capacity factor must be a finite number > 0"),
    ("gran.yaml", "model:\n  seq_length: 4096\n  recompute_granularity: full\ntrain:\n  global_batch_size: 128\n", 3,
     "full recompute needs recompute_method uniform or block"),
    ("layout.txt", "model.seq_length=4096 train.global_batch_size=128\nmodel.pipeline_model_parallel_layout=Q|t\n", 2,
     "only E, t, m, L"),
]


@pytest.mark.parametrize("name, text, line, words", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_bad_values_name_file_and_line(tmp_path, capsys, name, text, line, words):
    path = _write(tmp_path, name, text)
    with pytest.raises(MoeplanError) as info:
        checker.check(path, model=MODEL, gpus=32)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ") and words in message, message
    assert "\n" not in message
    assert main(["check", path, "--model", MODEL, "--gpus", "32"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: " in err and len(err.strip().splitlines()) == 1


def test_missing_setting_names_the_file(tmp_path):
    path = _write(tmp_path, "noseq.yaml", "train:\n  global_batch_size: 128\n")
    with pytest.raises(MoeplanError, match="^" + re.escape(f"{path}: run settings lack seq_length")):
        checker.check(path, model=MODEL, gpus=32)


def test_errors_not_about_the_file_stay_unlocated(tmp_path):
    """A GPU name, a plain settings dict (no file behind it): no FILE:LINE to give."""
    path = _write(tmp_path, "ok.yaml", "model:\n  seq_length: 4096\ntrain:\n  global_batch_size: 128\n")
    parsed = read_run_file(path)
    with pytest.raises(MoeplanError) as info:
        run_config_from_settings(parsed.settings, load_model(MODEL), 32, "no-such-gpu")
    assert not str(info.value).startswith(path)
    with pytest.raises(MoeplanError, match=r"^micro_batch_size must be a positive integer"):
        run_config_from_settings({"seq_length": 4096, "global_batch_size": 8, "micro_batch_size": 0},
                                 load_model(MODEL), 32, "h100")


def test_good_files_read_as_before(tmp_path):
    path = _write(tmp_path, "ok.txt", "model.seq_length=4096\ntrain.global_batch_size=128\n"
                  "optimizer.optimizer_cpu_offload=true\noptimizer.optimizer_offload_fraction=0.5\n")
    result = checker.check(path, model=MODEL, gpus=32)
    assert result.config.optimizer_offload == 0.5
    assert dict(read_run_file(path).settings) == {"seq_length": 4096, "global_batch_size": 128,
                                                  "optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}


# ---- 3. a conflict carries its line


def test_conflict_carries_its_line():
    text = "model:\n  seq_length: 4096\ndataset:\n  sequence_length: 8192\n"
    run = parse_run_text(text, "c.yaml")
    (conflict,) = run.conflicts
    assert conflict.line == 4
    assert not conflict.message.startswith("c.yaml")
    assert conflict.message.startswith("dataset.sequence_length=8192 disagrees with model.seq_length=4096")
    assert str(conflict) == f"c.yaml:4: {conflict.message}"


def test_a_conflict_finding_shows_its_line_beside_the_message(tmp_path):
    from moeplan.lint import checker

    path = _write(tmp_path, "c.yaml", "model:\n  seq_length: 4096\ntrain:\n  global_batch_size: 64\ndataset:\n"
                                      "  sequence_length: 8192\n")
    (finding,) = [f for f in checker.check(path, model="qwen3-30b-a3b", gpus=16).findings if f.rule == "conflict"]
    assert finding.line == 6 and finding.message.startswith("dataset.sequence_length=8192 disagrees")


def test_megatron_lm_stops_a_selective_run_with_a_recompute_method(tmp_path):
    """Megatron-LM's validate_args raises 'recompute method is not yet supported for selective recomputing
    granularity' (megatron/training/arguments.py); Megatron-Core's TransformerConfig accepts it, so a Bridge file
    with the same settings gets no such finding."""
    from moeplan.lint import checker

    mlm = _write(tmp_path, "a4.txt", A4)
    found = {f.rule: f for f in checker.check(mlm, model="qwen3-30b-a3b", gpus=32).findings}
    assert found["mcore-recompute-method-selective"].message.startswith("Megatron-LM rejects this: recompute method")
    bridge = _write(tmp_path, "b.yaml", "model:\n  seq_length: 8192\n  expert_model_parallel_size: 8\n"
                                        "  recompute_granularity: selective\n  recompute_method: uniform\n"
                                        "train:\n  global_batch_size: 128\n")
    rules = {f.rule for f in checker.check(bridge, model="qwen3-30b-a3b", gpus=32).findings}
    assert "mcore-recompute-method-selective" not in rules
