"""--calibration profiles: efficiencies (shares of a peak rate) must be in (0, 1]; a profile fitted on
another GPU than the run's gives a one-line warning on stderr, and the run goes on."""

from __future__ import annotations

import json

import pytest
import yaml

from moeplan.calibrate.fit import PROFILE_KEYS, load_profile, profile_yaml
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, SHARE_CONSTANTS

EST = ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--ep", "8", "--json"]


@pytest.mark.parametrize("constants, name", [("{grouped_gemm_eff: 7}", "grouped_gemm_eff"),
                                             ("{a2a_eff: {alltoall: 1.5}}", "a2a_eff.alltoall"),
                                             ("{tp_hidden: 1.2}", "tp_hidden")])
def test_share_above_one_is_refused(tmp_path, capsys, constants, name):
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"constants: {constants}\n")
    assert main([*EST, "--calibration", str(prof)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"'{name}'" in err and "(0, 1]" in err


def test_other_constants_above_one_and_share_of_one_are_kept(tmp_path, capsys):
    prof = tmp_path / "profile.yaml"
    prof.write_text("constants: {hbm_eff: 1.0, attn_half_tokens: 300, ep_sms: {deepep: 24}, gdn_chunk_step_s: 2.0}\n")
    assert main([*EST, "--calibration", str(prof)]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] == str(prof)


def test_profile_from_another_gpu_warns_once(tmp_path, capsys):
    prof = tmp_path / "profile.yaml"
    prof.write_text("gpu: gb200\nconstants: {grouped_gemm_eff: 0.7}\n")
    assert main([*EST, "--gpu", "h100", "--calibration", str(prof)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["calibration"] == str(prof)
    assert err.count("\n") == 1 and err.startswith("moeplan: warning:") and "gb200" in err and "h100" in err
    assert main(["plan", *EST[1:], "--gpu", "h100", "--top", "1", "--calibration", str(prof)]) == 0
    assert "gb200" in capsys.readouterr().err
    assert main([*EST, "--gpu", "GB200", "--calibration", str(prof)]) == 0  # same GPU (any spelling): no warning
    assert capsys.readouterr().err == ""


def test_profile_from_another_gpu_warns_for_a_run_files_gpu(tmp_path, capsys):
    """check (and explain) of a run file whose '# moeplan:' comment names the GPU warn as --gpu does."""
    assert main(["plan", *EST[1:-1], "--gpu", "h100", "--top", "1", "--format", "yaml"]) == 0
    run = tmp_path / "run.yaml"
    run.write_text(capsys.readouterr().out)
    assert "gpu=h100" in run.read_text().splitlines()[0]
    prof = tmp_path / "profile.yaml"
    prof.write_text("gpu: gb200\nconstants: {grouped_gemm_eff: 0.7}\n")
    for cmd in (["check", str(run)], ["explain", str(run), "--seq-len", "8k"]):
        assert main([*cmd, "--json", "--calibration", str(prof)]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["calibration"] == str(prof)
        assert err.count("\n") == 1 and err.startswith("moeplan: warning:") and "gb200" in err and "h100" in err
    same = tmp_path / "same.yaml"
    same.write_text("gpu: H100\nconstants: {grouped_gemm_eff: 0.7}\n")
    assert main(["check", str(run), "--json", "--calibration", str(same)]) == 0  # the file's GPU (any spelling): no warning
    assert capsys.readouterr().err == ""
    assert main(["check", str(run), "--json", "--gpu", "h100", "--calibration", str(prof)]) == 0  # --gpu: warned once, as before
    assert capsys.readouterr().err.count("warning:") == 1


@pytest.mark.parametrize("overrides, name", [({"grouped_gemm_eff": 1.5}, "grouped_gemm_eff"),
                                             ({"tp_hidden": 1.01}, "tp_hidden"),
                                             ({"a2a_eff": {"alltoall": 0.5, "allgather": 1.5}}, "a2a_eff.allgather")])
def test_with_overrides_refuses_a_share_above_one(overrides, name):
    """The Python API checks shares as a profile does: one line naming the constant and (0, 1]."""
    with pytest.raises(MoeplanError) as exc:
        DEFAULT_CALIBRATION.with_overrides(overrides)
    msg = str(exc.value)
    assert msg.startswith("calibration: ") and f"'{name}'" in msg and "(0, 1]" in msg and "\n" not in msg


def test_with_overrides_keeps_shares_up_to_one_and_non_shares_above_one():
    cal = DEFAULT_CALIBRATION.with_overrides({"grouped_gemm_eff": 1.0, "a2a_eff": {"alltoall": 0.5},
                                              "attn_half_tokens": 300, "ep_sms": {"deepep": 24}})
    assert cal.grouped_gemm_eff == 1.0 and cal.a2a_eff["alltoall"] == 0.5 and cal.attn_half_tokens == 300.0
    assert cal.a2a_eff["allgather"] == DEFAULT_CALIBRATION.a2a_eff["allgather"]
    assert {"grouped_gemm_eff", "a2a_eff", "ep_link_share", "tp_hidden"} <= set(SHARE_CONSTANTS)
    assert "attn_half_tokens" not in SHARE_CONSTANTS and "ep_sms" not in SHARE_CONSTANTS


def test_profile_share_error_names_the_file(tmp_path):
    """Through load_profile, with_overrides' origin is the profile's path: the message is the one it always gave."""
    prof = tmp_path / "profile.yaml"
    prof.write_text("constants: {a2a_eff: {alltoall: 1.5}}\n")
    with pytest.raises(MoeplanError) as exc:
        load_profile(prof)
    assert str(exc.value) == f"{prof}: constant 'a2a_eff.alltoall' is a share of a peak rate and must be in (0, 1], got 1.5"


def test_profile_yaml_writes_exactly_profile_keys_in_order(tmp_path):
    """profile_yaml's top-level keys are PROFILE_KEYS (what load_profile accepts), in that order."""
    result = {"moeplan_version": "0.0", "gpu": "h100", "constants": {"grouped_gemm_eff": 0.7, "a2a_eff.alltoall": 0.6},
              "memory": {"reserve_gib": 2.5}, "not_moved": {"hbm_eff": "no run's step time depends on it"},
              "covered_features": [],
              "fit": {"rms_log_error_before": 0.1234567, "degrees_of_freedom": 1},
              "runs": [{"log": "a.log", "model": "qwen3-30b-a3b", "gpus": 16, "layout": "EP8", "seq_len": 4096,
                        "gbs": 64, "measured_step_time_s": 1.23456, "measured_tflops_per_gpu": 300.123,
                        "measured_peak_allocated_gib": None, "default_tflops_per_gpu": 310.0,
                        "calibrated_tflops_per_gpu": 300.0}]}
    text = profile_yaml(result)
    assert tuple(yaml.safe_load(text)) == PROFILE_KEYS
    prof = tmp_path / "profile.yaml"
    prof.write_text(text)
    profile = load_profile(prof)
    assert profile.calibration.a2a_eff["alltoall"] == 0.6 and profile.reserve_gib == 2.5 and profile.runs == 1


def test_reserve_not_below_the_gpus_memory_is_refused(tmp_path, capsys):
    """A reserve of the GPU's whole memory or more makes every plan 'not fit' for a reason no layout causes."""
    prof = tmp_path / "profile.yaml"
    prof.write_text("gpu: h100\nconstants: {}\nmemory: {reserve_gib: 500}\n")
    with pytest.raises(MoeplanError) as exc:
        load_profile(prof)
    msg = str(exc.value)
    assert msg.startswith(f"{prof}: memory.reserve_gib 500 is not below the 79.65 GiB") and "h100" in msg
    assert "\n" not in msg
    assert main(["plan", *EST[1:], "--top", "1", "--calibration", str(prof)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "reserve_gib 500" in err
    prof.write_text("gpu: h100\nconstants: {}\nmemory: {reserve_gib: 79.6474609375}\n")  # exactly the capacity
    with pytest.raises(MoeplanError, match="not below"):
        load_profile(prof)
    for text in ("gpu: h100\nconstants: {}\nmemory: {reserve_gib: 6.5}\n",  # below: kept
                 "constants: {}\nmemory: {reserve_gib: 500}\n",  # no GPU named: the planner judges it
                 "gpu: my-own-gpu\nconstants: {}\nmemory: {reserve_gib: 500}\n"):  # not resolvable: the planner judges
        prof.write_text(text)
        assert load_profile(prof).reserve_gib in (6.5, 500.0)
