"""CLI: models, params, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moeplan.cli import main

from ..conftest import MODELS_DIR


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_catalog(capsys):
    code, out, _ = run_cli(capsys, "models", "--json")
    names = {r["name"] for r in json.loads(out)}
    assert code == 0
    assert {"deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-next-80b-a3b",
            "gpt-oss-120b", "mixtral-8x7b", "glm-4.5"} <= names


def test_params_json_keys_and_values(capsys):
    code, out, _ = run_cli(capsys, "params", "deepseek-v3", "--seq-len", "4k", "--json")
    data = json.loads(out)
    assert code == 0
    assert {"total_params", "active_params", "flops_per_token", "breakdown"} <= data.keys()
    assert data["breakdown"]["mtp"] == 11_610_067_968
    assert data["active_params"] == 37_552_282_624
    assert data["flops_per_token"] == pytest.approx(2.6e11, rel=0.01)


def test_params_from_config_path(capsys):
    code, out, _ = run_cli(capsys, "params", str(MODELS_DIR / "qwen3-30b-a3b.json"), "--json")
    assert code == 0 and json.loads(out)["total_params"] == 30_532_122_624


def test_params_table(capsys):
    code, out, _ = run_cli(capsys, "params", "qwen3-next-80b-a3b")
    assert code == 0 and "linear_attention" in out and "routed_experts" in out


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"model_type": "qwen3_moe", "hidden_size": 20', "malformed JSON"),
        ('{"model_type": "qwen3_moe", "hidden_size": -4}', "'hidden_size' must be positive"),
        ('{"model_type": "llama", "hidden_size": 4}', "supported types"),
        ('[1, 2]', "JSON object"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    code, out, err = run_cli(capsys, "params", str(path))
    assert code == 2 and out == ""
    assert needle in err and str(path) in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_key_names_file_key_and_types(tmp_path, capsys):
    cfg = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
    cfg["num_hidden_layers"] = 0
    path = tmp_path / "m.json"
    path.write_text(json.dumps(cfg))
    code, _, err = run_cli(capsys, "params", str(path))
    assert code == 2 and "m.json" in err and "'num_hidden_layers' must be positive" in err
    cfg["num_hidden_layers"] = 48
    del cfg["num_experts"]
    path.write_text(json.dumps(cfg))
    code, _, err = run_cli(capsys, "params", str(path))
    assert code == 2 and "'num_experts' is missing" in err and "qwen3_moe" in err


def test_unknown_model_is_exit_2(capsys):
    code, out, err = run_cli(capsys, "params", "no-such-model")
    assert code == 2 and out == "" and "unknown model 'no-such-model'" in err


def test_console_script_entry_point():
    proc = subprocess.run([sys.executable, "-m", "moeplan", "params", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_mtp_layers_flag_trains_the_mtp_module(capsys):
    """--mtp-layers N (Megatron-Core mtp_num_layers): Bridge's Qwen3-Next recipes train MTP 1, which its
    config.json does not describe; the module's FLOPs join the count, its layer the last stage (the
    recipe's layout places it: 'tmL'), and the exports carry mtp_num_layers."""
    base = ["estimate", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "64", "--seq-len", "4096", "--gbs", "1024",
            "--mbs", "2", "--pp", "2", "--vpp", "4", "--ep", "32", "--dispatcher", "hybridep", "--json"]
    code, out, _ = run_cli(capsys, *base)
    plain = json.loads(out)
    code2, out2, _ = run_cli(capsys, *base, "--mtp-layers", "1", "--pipeline-layout", "Et*4|(t*7|)*5t*8|tmL")
    mtp = json.loads(out2)
    assert code == code2 == 0
    assert mtp["flops_per_token"] > 1.05 * plain["flops_per_token"]  # one more layer and a second logits GEMM
    code3, _, err = run_cli(capsys, *base, "--pipeline-layout", "Et*4|(t*7|)*5t*8|tmL")
    assert code3 == 2 and "MTP" in err and "Traceback" not in err  # the layout's 'm' needs the module
    with pytest.raises(SystemExit) as bad:  # argparse's usage error: exit code 2
        run_cli(capsys, *base, "--mtp-layers", "-1")
    assert bad.value.code == 2 and ">= 0" in capsys.readouterr().err
    code5, out5, _ = run_cli(capsys, "plan", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "32", "--seq-len",
                             "8192", "--gbs", "256", "--mtp-layers", "1", "--top", "1", "--json")
    assert code5 == 0 and "model.mtp_num_layers=1" in json.loads(out5)[0]["overrides"]


def test_params_and_models_mean_the_same_total(capsys):
    """`params --json` and `models --json` both give total_params without the MTP modules (DeepSeek-V3's published
    671B) and total_params_with_mtp with them; before, params' total_params included MTP (682.6B) and models' did not."""
    _, out, _ = run_cli(capsys, "models", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    for name in ("deepseek-v3", "glm-4.5", "qwen3-30b-a3b"):
        _, out, _ = run_cli(capsys, "params", name, "--json")
        data = json.loads(out)
        assert data["total_params"] == rows[name]["total_params"], name
        assert data["total_params_with_mtp"] == rows[name]["total_params_with_mtp"] == \
            data["total_params"] + data["mtp_params"], name
    assert rows["deepseek-v3"]["total_params"] == 671_026_404_352  # ../shared/models/README.md: main model
    assert rows["deepseek-v3"]["total_params_with_mtp"] == 671_026_404_352 + 11_610_067_968
    assert rows["qwen3-30b-a3b"]["total_params_with_mtp"] == rows["qwen3-30b-a3b"]["total_params"]  # no MTP


def test_estimate_help_example_fits_and_is_representative(capsys, monkeypatch):
    """The example in `moeplan estimate --help` is a run that fits its GPU and whose step is not dominated by
    exposed communication (it showed 120.8 GiB on an 80 GB H100 with CP communication 71% of the step)."""
    import shlex

    monkeypatch.setenv("COLUMNS", "1000")  # one line: argparse wraps at hyphens ("--cp-" / "comm-type")
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    argv = shlex.split(text.split("example: moeplan ", 1)[1])
    assert argv[0] == "estimate"
    assert main([*argv, "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["fits"] and est["memory_gib"]["total"] < est["capacity_gib"]
    steps = est["time_breakdown_s"]
    exposed = sum(v for k, v in steps.items() if k.endswith("_comm") or k == "pp_bubble")
    assert exposed < 0.25 * est["step_time_s"]


def test_unknown_cp_comm_type_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:  # the parser's choices refuse it (RunConfig would too)
        main(["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--cp-comm-type", "bogus"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and not out and len(err.strip().splitlines()) == 1 and "'bogus'" in err


@pytest.mark.parametrize("command", ["estimate", "plan", "check"])
def test_trace_help_states_the_timelines_detail_cap(capsys, command):
    """--trace's help names the cap moeplan.engine.timeline.trace_detail applies (vocab.TRACE_DETAIL_MICROBATCHES)."""
    from moeplan.engine import timeline
    from moeplan.base.vocab import TRACE_DETAIL_MICROBATCHES

    assert timeline.TRACE_DETAIL_MICROBATCHES is TRACE_DETAIL_MICROBATCHES  # the one the trace applies
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    n = TRACE_DETAIL_MICROBATCHES
    assert f"Beyond {n} micro-batches only the first and the last {n // 2} carry" in text
