"""--calibration profiles: efficiencies (shares of a peak rate) must be in (0, 1]; a profile fitted on
another GPU than the run's gives a one-line warning on stderr, and the run goes on."""

from __future__ import annotations

import json

import pytest

from moeplan.cli import main

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
