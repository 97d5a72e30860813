"""Selective recompute modules that do not apply (one the model lacks, one the target Megatron-Core lacks):
plan and estimate refuse them with one line and exit code 2, for the reason `moeplan check` gives."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.cli import main
from moeplan.base.errors import MoeplanError

QWEN = ["qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64"]
MLA_REASON = "recompute module mla_up_proj needs multi-latent attention; qwen3-30b-a3b does not use it"
GDN_REASON = "gdn_norm_out not accepted by Megatron-Core 0.16"


def _refused(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    return err


@pytest.mark.parametrize("argv", [
    ["plan", *QWEN, "--recompute", "selective:mla_up_proj", "--format", "yaml"],
    ["estimate", *QWEN, "--ep", "8", "--recompute", "selective:mla_up_proj,layernorm"],
])
def test_mla_up_proj_without_mla_is_refused_as_check_reports_it(capsys, tmp_path, argv):
    assert MLA_REASON in _refused(capsys, argv)
    # check's finding for the same setting, in a file: the same reason
    run = tmp_path / "run.overrides"
    run.write_text("model.expert_model_parallel_size=8\nmodel.seq_length=4096\ntrain.global_batch_size=64\n"
                   "model.recompute_granularity=selective\nmodel.recompute_modules=[mla_up_proj]\n")
    main(["check", str(run), "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    f = next(f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "mcore-recompute-mla-up-proj")
    assert f["severity"] == "error" and MLA_REASON in f["message"]


@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_gdn_norm_out_before_019_is_refused_by_both(capsys, command):
    argv = [command, "qwen3-next-80b-a3b", "--gpus", "32", "--seq-len", "4k", "--gbs", "64",
            "--recompute", "selective:gdn_norm_out"] + (["--ep", "32"] if command == "estimate" else [])
    assert GDN_REASON in _refused(capsys, argv)
    assert main([*argv, "--mcore-version", "0.19", "--json"]) == 0
    capsys.readouterr()


def test_api_refuses_and_keeps_mla_up_proj_for_mla():
    with pytest.raises(MoeplanError, match="mla_up_proj needs multi-latent attention"):
        api.estimate_run("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=64, ep=8, recompute="selective:mla_up_proj")
    with pytest.raises(MoeplanError, match="mla_up_proj needs multi-latent attention"):
        api.search_plans("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=64, fixed={"recompute": "selective:mla_up_proj"})
    api.build_config("deepseek-v2-lite", gpus=16, seq_len=4096, gbs=64, ep=8, recompute="selective:mla_up_proj")
