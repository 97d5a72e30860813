"""A config.json that makes no sense is refused like the model code would refuse it (issue 11):
one line naming the file and the key, exit 2, nothing on stdout."""

from __future__ import annotations

import json

import pytest

from moeplan.cli import main
from moeplan.models import load_model
from moeplan.models.catalog import catalog_names
from moeplan.models.hf import INT32_MAX

from ..conftest import MODELS_DIR


def _run(tmp_path, capsys, base: str, change: dict, command: tuple[str, ...] = ("params",)):
    cfg = json.loads((MODELS_DIR / f"{base}.json").read_text())
    cfg.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code = main([*command, str(path)])
    out, err = capsys.readouterr()
    return code, out, err, path


@pytest.mark.parametrize("base,change,needle", [
    ("qwen3-235b-a22b", {"num_experts_per_tok": 256}, "'num_experts_per_tok' (256) exceeds num_experts (128)"),
    ("mixtral-8x7b", {"num_experts_per_tok": 9}, "'num_experts_per_tok' (9) exceeds num_local_experts (8)"),
    ("deepseek-v3", {"num_experts_per_tok": 300}, "'num_experts_per_tok' (300) exceeds n_routed_experts (256)"),
    ("qwen3-235b-a22b", {"num_attention_heads": 63}, "'num_attention_heads' (63) is not divisible by num_key_value_heads (4)"),
    ("qwen3-235b-a22b", {"num_key_value_heads": 128}, "'num_attention_heads' (64) is not divisible by num_key_value_heads (128)"),
    ("qwen3-235b-a22b", {"vocab_size": 10**30}, "'vocab_size' is 1e+30, past the int32 range"),
    ("qwen3-235b-a22b", {"vocab_size": 1e30}, "'vocab_size' must be an integer"),
    ("qwen3-235b-a22b", {"hidden_size": INT32_MAX + 1}, "'hidden_size' is 2.15e+09, past the int32 range"),
    ("qwen3-235b-a22b", {"mlp_only_layers": [94]}, "'mlp_only_layers' names layer 94, outside 0..93"),
    ("mixtral-8x7b", {"hidden_size": 4100}, "'hidden_size' (4100) is not divisible by num_attention_heads (32)"),
    ("deepseek-v3", {"n_group": 7}, "'n_routed_experts' (256) is not divisible by n_group (7)"),
    ("deepseek-v3", {"topk_group": 9}, "'topk_group' (9) exceeds n_group (8)"),
    ("deepseek-v3", {"topk_group": 1, "num_experts_per_tok": 40},
     "'num_experts_per_tok' (40) exceeds the 32 experts in topk_group (1) groups of 32"),
])
def test_nonsense_architecture_is_one_line_exit_2(tmp_path, capsys, base, change, needle):
    code, out, err, path = _run(tmp_path, capsys, base, change)
    assert code == 2 and out == "", err
    assert needle in err and str(path) in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_planning_commands_refuse_it_too(tmp_path, capsys):
    cfg = json.loads((MODELS_DIR / "qwen3-235b-a22b.json").read_text())
    cfg["num_experts_per_tok"] = 256
    path = tmp_path / "m.json"
    path.write_text(json.dumps(cfg))
    code = main(["plan", str(path), "--gpus", "64", "--seq-len", "32k", "--gbs", "64"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "exceeds num_experts" in err and err.count("\n") == 1


def test_gated_deltanet_value_heads_divide_by_key_heads():
    from importlib import resources

    from moeplan.base.errors import MoeplanError
    from moeplan.models.hf import spec_from_dict

    cfg = json.loads(resources.files("moeplan.models.data").joinpath("qwen3-next-80b-a3b.json").read_text())
    spec_from_dict(cfg, "x", "x.json")  # the real one reads
    cfg["linear_num_value_heads"] = 33
    with pytest.raises(MoeplanError, match=r"'linear_num_value_heads' \(33\) is not divisible by linear_num_key_heads \(16\)"):
        spec_from_dict(cfg, "x", "x.json")


def test_every_catalog_model_passes():
    for name in catalog_names():
        assert load_model(name).num_layers > 0


def test_imbalance_is_capped_where_every_token_lands_on_one_rank():
    """--moe-imbalance is tokens on the busiest expert rank over the mean; it cannot exceed
    EP x min(top-k, local experts) / top-k (every token at each local expert of one rank): a larger
    value costs that many rows, not more (1e300 used to give an infinite step and non-JSON output)."""
    from moeplan import api

    kw = dict(gpus=16, seq_len=4096, gbs=16, ep=16)
    cap = api.estimate("qwen3-30b-a3b", moe_imbalance=16.0, **kw)  # 128 experts / EP16 = 8 local = top-8
    huge = api.estimate("qwen3-30b-a3b", moe_imbalance=1e300, **kw)
    assert huge["step_time_s"] == cap["step_time_s"] and huge["memory_gib"] == cap["memory_gib"]
    assert api.estimate("qwen3-30b-a3b", moe_imbalance=8.0, **kw)["step_time_s"] < cap["step_time_s"]
    cfg, _ = api.build_config("qwen3-30b-a3b", moe_imbalance=1.5, gpus=16, seq_len=4096, gbs=16, ep=1)
    assert cfg.rows_factor == 1.0  # EP 1: the one rank holds every row, whatever the skew


@pytest.mark.parametrize("bad", ["bogus", "", "P2P", "all_gather", "auto", None])
def test_run_config_refuses_an_unknown_cp_comm_type(bad):
    """RunConfig checks cp_comm_type as it checks its other choice fields (one owner: vocab.CP_COMM_TYPES);
    'auto' is the API's argument (the planner's pick), never a run's value."""
    from dataclasses import replace

    from moeplan import api
    from moeplan.base.errors import MoeplanError
    from moeplan.base.vocab import CP_COMM_TYPES

    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=16, ep=16)
    with pytest.raises(MoeplanError) as exc:
        replace(cfg, cp_comm_type=bad)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"cp_comm_type '{bad}' unknown; choose one of ")
    assert msg.endswith(", ".join(CP_COMM_TYPES))


@pytest.mark.parametrize("argv", [
    ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024", "--reserve-gib", "500"],
    ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024", "--ep", "16", "--reserve-gib", "80"]])
def test_a_reserve_the_gpu_cannot_hold_is_bad_input(argv, capsys):
    """A reserve of the whole GPU or more was a plan that 'fits nowhere' blaming the layouts (exit 1)."""
    from moeplan.cli import main

    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1 and "is not less than the h100's 79.6 GiB" in err
