"""TE GroupedLinear's grouped-tensor path (moeplan.te_release.TE_RELEASES, RunConfig.te_grouped_tensor): from TE 2.17
an opt-in path quantizes and multiplies all local experts in one call per linear, so the quantized experts' host
launches (timing.expert_host_s) are counted once instead of once per local expert -- only where the release, the
GPU and the precision take it, and never by default (every calibrated number is the per-expert 2.14 path)."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.cli import main
from moeplan.strategy import parse_strategy, strategy_of, strategy_text
from moeplan.te_release import (
    DEFAULT_TE_VERSION,
    GROUPED_TENSOR_ENV,
    GROUPED_TENSOR_FIRST_VERSION,
    TE_RELEASES,
    grouped_tensor_precisions,
    grouped_tensor_problem,
)
from moeplan.timing import DEFAULT_CALIBRATION, EXPERT_LAUNCHES, expert_host_s

CAL = DEFAULT_CALIBRATION
C = CAL.expert_launch_host_s
NO_GRAPHS: frozenset[str] = frozenset()
HOPPER, B200, GB300, RTX = 90, 100, 103, 120


def test_table_first_release_and_precisions():
    assert GROUPED_TENSOR_FIRST_VERSION == "2.17"
    assert [v for v, r in TE_RELEASES.items() if r.grouped_tensor is None] == ["2.14", "2.15", "2.16"]
    assert TE_RELEASES[DEFAULT_TE_VERSION].grouped_tensor is None
    assert grouped_tensor_precisions("2.17", HOPPER) == {"bf16"}
    assert grouped_tensor_precisions("2.17", B200) == grouped_tensor_precisions("2.17", GB300) == {"bf16", "mxfp8"}
    assert grouped_tensor_precisions("2.18", HOPPER) == {"bf16", "fp8-cs", "fp8"}
    assert grouped_tensor_precisions("2.18", B200) == {"bf16", "fp8-cs", "mxfp8"}
    for v in TE_RELEASES:  # no grouped quantize for delayed scaling in any release; sm120 / unknown: legacy path
        assert "fp8-ds" not in grouped_tensor_precisions(v, HOPPER) | grouped_tensor_precisions(v, B200)
        assert grouped_tensor_precisions(v, RTX) == grouped_tensor_precisions(v, None) == frozenset()


def test_problems_per_release_gpu_and_precision():
    assert "has no grouped-tensor" in grouped_tensor_problem("2.14", B200, "mxfp8")
    assert grouped_tensor_problem("2.17", B200, "mxfp8") is None
    assert grouped_tensor_problem("2.17", HOPPER, "bf16") is None
    assert "falls back" in grouped_tensor_problem("2.17", B200, "fp8-cs")  # current scaling: from 2.18
    assert grouped_tensor_problem("2.18", B200, "fp8-cs") is None
    assert "falls back" in grouped_tensor_problem("2.18", B200, "fp8-ds")
    # FP8 block scaling: Hopper only from 2.18, and TE raises on Blackwell (2.17 just falls back)
    assert grouped_tensor_problem("2.18", HOPPER, "fp8") is None
    assert grouped_tensor_problem("2.18", B200, "fp8").startswith("error:")
    assert not grouped_tensor_problem("2.17", B200, "fp8").startswith("error:")
    # 2.19 wants the token counts on the GPU, which Megatron-Core's TEGroupedMLP does not pass
    assert grouped_tensor_problem("2.19", B200, "mxfp8").startswith("error:")
    assert "CUDA m_splits" in grouped_tensor_problem("2.19", B200, "mxfp8")
    assert "falls back" in grouped_tensor_problem("2.19", B200, "fp8-ds")


def test_grouped_path_launches_once_per_linear():
    per_expert = expert_host_s(32, 1e5, "mxfp8", NO_GRAPHS, CAL)
    once = expert_host_s(32, 1e5, "mxfp8", NO_GRAPHS, CAL, grouped=True)
    assert per_expert == pytest.approx((32 * 4 * C, 32 * 6 * C))  # the legacy path, per local expert
    fwd = EXPERT_LAUNCHES["fwd"]["gemm"] + EXPERT_LAUNCHES["fwd"]["quantize"]
    bwd = EXPERT_LAUNCHES["bwd"]["gemm"] + EXPERT_LAUNCHES["bwd"]["quantize"]
    assert once == pytest.approx((fwd * C, bwd * C))
    assert expert_host_s(8, 1e5, "mxfp8", NO_GRAPHS, CAL, grouped=True) == once  # whatever the local experts
    assert expert_host_s(32, 0, "mxfp8", NO_GRAPHS, CAL, grouped=True) == (0.0, 0.0)  # no rows, no launch
    assert expert_host_s(32, 1e5, "mxfp8", frozenset({"moe"}), CAL, grouped=True) == (0.0, 0.0)


def _cfg(te: str, flag: bool, precision: str = "mxfp8", gpu: str = "b200"):
    cfg, _ = api.build_config("deepseek-v3", gpu=gpu, gpus=256, seq_len=4096, gbs=2048, pp=16, ep=8,
                              precision=precision, dispatcher="deepep", cuda_graphs="attn,moe_router,moe_preprocess",
                              te_version=te, te_grouped_tensor=flag)
    return cfg


def _est(te: str, flag: bool, precision: str = "mxfp8") -> dict:
    cfg = _cfg(te, flag, precision)
    return api.evaluate(cfg, cfg.gpu).as_dict()


def test_run_selects_the_path_only_where_te_takes_it():
    assert not _cfg("2.17", False).experts_grouped_tensor  # opt-in in every release
    assert _cfg("2.17", True).experts_grouped_tensor
    assert not _cfg(DEFAULT_TE_VERSION, True).experts_grouped_tensor  # no such path in 2.14
    assert not _cfg("2.17", True, "fp8-ds").experts_grouped_tensor
    assert not _cfg("2.19", True).experts_grouped_tensor  # raises with Megatron-Core's host splits


def test_default_and_per_expert_estimates_unchanged():
    base = _est(DEFAULT_TE_VERSION, False)
    assert _est(DEFAULT_TE_VERSION, True) == base  # the flag does nothing on TE 2.14
    assert _est("2.17", False) == base  # a newer TE alone still launches per expert
    assert _est("2.17", True, "fp8-ds") == _est("2.17", False, "fp8-ds")


def test_grouped_path_removes_the_per_expert_launches():
    """DeepSeek-V3 on B200 at EP8 (32 local experts, MXFP8): the per-expert launches outlast the GPU work
    (test_expert_launches); counted once per linear they hide behind it, and the step gets shorter."""
    per_expert, grouped = _est("2.17", False), _est("2.17", True)
    bf16 = _est("2.17", False, "bf16")  # the per-layer launch constant alone
    launch = {k: e["time_breakdown_s"]["launch_overhead"] / e["microbatches"] for k, e in
              (("per", per_expert), ("once", grouped), ("bf16", bf16))}
    assert launch["per"] - launch["bf16"] > 0.03 * per_expert["step_time_s"] / per_expert["microbatches"]
    assert launch["once"] == pytest.approx(launch["bf16"])
    assert grouped["step_time_s"] < per_expert["step_time_s"]
    moved = {k: v for k, v in grouped["time_breakdown_s"].items() if v != per_expert["time_breakdown_s"][k]}
    assert set(moved) <= {"launch_overhead", "pp_bubble"}


def test_strategy_and_cli_carry_the_knob(tmp_path, capsys):
    cfg = _cfg("2.17", True)
    assert strategy_of(cfg)["megatron"]["te_grouped_tensor"] is True
    assert parse_strategy(strategy_text(cfg))["te_grouped_tensor"] is True
    args = ["estimate", "deepseek-v3", "--gpu", "b200", "--gpus", "256", "--seq-len", "4096", "--gbs", "2048",
            "--pp", "16", "--ep", "8", "--precision", "mxfp8", "--dispatcher", "deepep",
            "--cuda-graphs", "attn,moe_router,moe_preprocess", "--te-version", "2.17", "--json"]
    assert main(args) == 0
    per_expert = json.loads(capsys.readouterr().out)
    assert main([*args, "--te-grouped-tensor"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert grouped["step_time_s"] < per_expert["step_time_s"]
    assert per_expert["step_time_s"] == pytest.approx(_est("2.17", False)["step_time_s"])
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert GROUPED_TENSOR_ENV in capsys.readouterr().out.replace("\n", "").replace(" ", "")
