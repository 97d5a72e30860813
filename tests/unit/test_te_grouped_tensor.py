"""TE GroupedLinear's grouped-tensor path (moeplan.base.te_release.TE_RELEASES, RunConfig.te_grouped_tensor): from TE 2.17
an opt-in path quantizes and multiplies all local experts in one call per linear, so the quantized experts' host
launches (timing.expert_host_s) are counted once instead of once per local expert -- only where the release, the
GPU and the precision take it, and never by default (every calibrated number is the per-expert 2.14 path)."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.lint.checker import load_run
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.megatron.export import env_settings, to_yaml
from moeplan.lint.rules import lint
from moeplan.run.strategy import parse_strategy, strategy_of, strategy_text
from moeplan.base.te_release import (
    DEFAULT_TE_VERSION,
    FUSED_GROUPED_MLP_ENV,
    GROUPED_TENSOR_ENV,
    GROUPED_TENSOR_FIRST_VERSION,
    TE_RELEASES,
    grouped_tensor_precisions,
    expert_pad_rows,
    grouped_tensor_problem,
    op_fuser_grouped,
)
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import EXPERT_LAUNCHES
from moeplan.engine.timing.moe import expert_host_s

CAL = DEFAULT_CALIBRATION
C = CAL.expert_launch_host_s
NO_GRAPHS: frozenset[str] = frozenset()
HOPPER, B200, GB300, RTX = 90, 100, 103, 120


def test_table_first_release_and_precisions():
    assert GROUPED_TENSOR_FIRST_VERSION == "2.17"
    assert [v for v, r in TE_RELEASES.items() if r.grouped_tensor is None] == ["1.3", "1.11", "2.14", "2.15", "2.16"]
    assert TE_RELEASES[DEFAULT_TE_VERSION].grouped_tensor is None
    assert grouped_tensor_precisions("2.17", HOPPER) == {"bf16"}
    assert grouped_tensor_precisions("2.17", B200) == grouped_tensor_precisions("2.17", GB300) == {"bf16", "mxfp8"}
    assert grouped_tensor_precisions("2.18", HOPPER) == {"bf16", "fp8-cs", "fp8"}
    assert grouped_tensor_precisions("2.18", B200) == {"bf16", "fp8-cs", "mxfp8"}
    for v in TE_RELEASES:  # no grouped quantize for delayed scaling in any release; sm120 / unknown: legacy path
        assert "fp8-ds" not in grouped_tensor_precisions(v, HOPPER) | grouped_tensor_precisions(v, B200)
        assert grouped_tensor_precisions(v, RTX) == grouped_tensor_precisions(v, None) == frozenset()


def test_problems_per_release_gpu_and_precision():
    assert "has no grouped-tensor" in grouped_tensor_problem("2.14", B200, "fp8-cs")
    assert grouped_tensor_problem("2.17", HOPPER, "bf16") is None
    assert grouped_tensor_problem("2.17", B200, "bf16") is None
    assert "falls back" in grouped_tensor_problem("2.17", B200, "fp8-cs")  # current scaling: from 2.18
    assert grouped_tensor_problem("2.18", B200, "fp8-cs") is None
    assert grouped_tensor_problem("2.18", HOPPER, "fp8-cs") is None
    assert "falls back" in grouped_tensor_problem("2.18", B200, "fp8-ds")
    # MXFP8 and FP8 block scaling quantize in 128-row units; Megatron-Core pads experts to 32 / 16 rows
    assert expert_pad_rows("mxfp8") == 32 and expert_pad_rows("fp8") == expert_pad_rows("fp8-cs") == 16
    for v in ("2.17", "2.18"):
        assert grouped_tensor_problem(v, B200, "mxfp8").startswith("error:")
        assert "multiples of 128" in grouped_tensor_problem(v, B200, "mxfp8")
    assert "multiples of 128" in grouped_tensor_problem("2.18", HOPPER, "fp8")
    # FP8 block scaling on Blackwell: TE raises from 2.18 (2.17 just falls back)
    assert "Hopper-only" in grouped_tensor_problem("2.18", B200, "fp8")
    assert not grouped_tensor_problem("2.17", B200, "fp8").startswith("error:")
    # 2.19 wants the token counts on the GPU, which Megatron-Core's TEGroupedMLP does not pass
    assert "CUDA m_splits" in grouped_tensor_problem("2.19", B200, "fp8-cs")
    assert grouped_tensor_problem("2.19", B200, "fp8-cs").startswith("error:")
    assert "falls back" in grouped_tensor_problem("2.19", B200, "fp8-ds")


def test_grouped_path_launches_once_per_linear():
    per_expert = expert_host_s(32, 1e5, "fp8-cs", NO_GRAPHS, CAL)
    once = expert_host_s(32, 1e5, "mxfp8", NO_GRAPHS, CAL, grouped=True)
    assert per_expert == pytest.approx((32 * 4 * C, 32 * 6 * C))  # the legacy path, per local expert
    assert expert_host_s(32, 1e5, "fp8-cs", NO_GRAPHS, CAL, grouped=True) == once  # one group_quantize per linear
    fwd = EXPERT_LAUNCHES["fwd"]["gemm"] + EXPERT_LAUNCHES["fwd"]["quantize"]
    bwd = EXPERT_LAUNCHES["bwd"]["gemm"] + EXPERT_LAUNCHES["bwd"]["quantize"]
    assert once == pytest.approx((fwd * C, bwd * C))
    assert expert_host_s(8, 1e5, "mxfp8", NO_GRAPHS, CAL, grouped=True) == once  # whatever the local experts
    assert expert_host_s(32, 0, "mxfp8", NO_GRAPHS, CAL, grouped=True) == (0.0, 0.0)  # no rows, no launch
    assert expert_host_s(32, 1e5, "mxfp8", frozenset({"moe"}), CAL, grouped=True) == (0.0, 0.0)


def _cfg(te: str, flag: bool, precision: str = "fp8-cs", gpu: str = "b200"):
    """The run with the variable set as a run file sets it (``moeplan check`` reads it so), also where TE raises,
    which build_config refuses for estimate and plan."""
    cfg, _ = api.build_config("deepseek-v3", gpu=gpu, gpus=256, seq_len=4096, gbs=2048, pp=16, ep=8,
                              precision=precision, dispatcher="deepep", cuda_graphs="attn,moe_router,moe_preprocess",
                              te_version=te)
    return cfg.with_(te_grouped_tensor=flag)


# what an estimate's JSON says of the run's software, beside what it estimates
SOFTWARE_KEYS = ("te_version", "te_grouped_tensor", "experts_grouped_tensor")


def _numbers(e: dict) -> dict:
    """An estimate's JSON without the keys that name the run's TE settings: what the comparisons compare."""
    return {k: v for k, v in e.items() if k not in SOFTWARE_KEYS}


def _est(te: str, flag: bool, precision: str = "fp8-cs") -> dict:
    cfg = _cfg(te, flag, precision)
    return _numbers(api.evaluate(cfg, cfg.gpu).as_dict())


def test_run_selects_the_path_only_where_te_takes_it():
    assert not _cfg("2.18", False).experts_grouped_tensor  # opt-in in every release
    assert _cfg("2.18", True).experts_grouped_tensor
    assert not _cfg(DEFAULT_TE_VERSION, True).experts_grouped_tensor  # no such path in 2.14
    assert not _cfg("2.17", True).experts_grouped_tensor  # no FP8 current scaling before 2.18
    assert not _cfg("2.18", True, "fp8-ds").experts_grouped_tensor
    assert not _cfg("2.18", True, "mxfp8").experts_grouped_tensor  # raises: 32-row padding, 128-row quantize
    assert not _cfg("2.19", True).experts_grouped_tensor  # raises with Megatron-Core's host splits


def test_default_and_per_expert_estimates_unchanged():
    base = _est(DEFAULT_TE_VERSION, False)
    assert _est(DEFAULT_TE_VERSION, True) == base  # the flag does nothing on TE 2.14
    assert _est("2.18", False) == base  # a newer TE alone still launches per expert
    assert _est("2.18", True, "mxfp8") == _est(DEFAULT_TE_VERSION, False, "mxfp8")


def test_grouped_path_removes_the_per_expert_launches():
    """DeepSeek-V3 on B200 at EP8 (32 local experts, FP8 current scaling): the per-expert launches outlast the GPU
    work (test_expert_launches); counted once per linear they hide behind it, and the step gets shorter."""
    per_expert, grouped = _est("2.18", False), _est("2.18", True)
    bf16 = _est("2.18", False, "bf16")  # the per-layer launch constant alone
    launch = {k: e["time_breakdown_s"]["launch_overhead"] / e["microbatches"] for k, e in
              (("per", per_expert), ("once", grouped), ("bf16", bf16))}
    assert launch["per"] - launch["bf16"] > 0.03 * per_expert["step_time_s"] / per_expert["microbatches"]
    assert launch["once"] == pytest.approx(launch["bf16"])
    assert grouped["step_time_s"] < per_expert["step_time_s"]
    moved = {k: v for k, v in grouped["time_breakdown_s"].items() if v != per_expert["time_breakdown_s"][k]}
    assert set(moved) <= {"launch_overhead", "pp_bubble"}


def test_strategy_and_cli_carry_the_knob(tmp_path, capsys):
    cfg = _cfg("2.18", True)
    assert strategy_of(cfg)["megatron"]["te_grouped_tensor"] is True
    assert parse_strategy(strategy_text(cfg))["te_grouped_tensor"] is True
    args = ["estimate", "deepseek-v3", "--gpu", "b200", "--gpus", "256", "--seq-len", "4096", "--gbs", "2048",
            "--pp", "16", "--ep", "8", "--precision", "fp8-cs", "--dispatcher", "deepep",
            "--cuda-graphs", "attn,moe_router,moe_preprocess", "--te-version", "2.18", "--json"]
    assert main(args) == 0
    per_expert = json.loads(capsys.readouterr().out)
    assert main([*args, "--te-grouped-tensor"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert grouped["step_time_s"] < per_expert["step_time_s"]
    assert per_expert["step_time_s"] == pytest.approx(_est("2.18", False)["step_time_s"])
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert GROUPED_TENSOR_ENV in capsys.readouterr().out.replace("\n", "").replace(" ", "")


def _lint(cfg) -> list:
    return [f for f in lint(cfg, cfg.gpu) if f.rule == "te-grouped-tensor"]


def test_lint_suggests_the_path_where_it_gains_and_flags_it_where_te_ignores_or_raises():
    info, = _lint(_cfg(DEFAULT_TE_VERSION, False))  # the recipes' TE: the first release that runs it
    assert info.severity == "info" and info.numbers["te_version"] == "2.18" and "32 local experts" in info.message
    assert info.numbers["alt_tokens_per_s"] > info.numbers["tokens_per_s"] * 1.03
    assert info.numbers["alt_launch_overhead_s"] < info.numbers["launch_overhead_s"]
    warn, = _lint(_cfg("2.18", False))  # the run's TE has it: only the environment variable is missing
    assert warn.severity == "warning" and f"{GROUPED_TENSOR_ENV}=1" in warn.message
    assert _lint(_cfg("2.18", True)) == []
    assert _lint(_cfg("2.18", False, "bf16")) == []  # BF16 experts' launches hide in the per-layer constant
    assert _lint(_cfg("2.18", False, "mxfp8")) == []  # the path raises for MXFP8 with Megatron-Core's padding
    noop, = _lint(_cfg(DEFAULT_TE_VERSION, True))
    assert noop.severity == "warning" and "changes nothing" in noop.message
    for te, prec, why in (("2.19", "fp8-cs", "CUDA m_splits"), ("2.18", "mxfp8", "multiples of 128")):
        err, = _lint(_cfg(te, True, prec))
        assert err.severity == "error" and why in err.message
    assert _lint(_cfg("2.19", False)) == []  # 2.19 cannot run it with Megatron-Core's host splits


def test_export_carries_the_environment_and_check_reads_it_back(tmp_path):
    cfg = _cfg("2.18", True)
    assert env_settings(cfg) == {GROUPED_TENSOR_ENV: "1"} and env_settings(_cfg("2.18", False)) == {}
    text = to_yaml(cfg)
    assert f" {GROUPED_TENSOR_ENV}=1" in text.splitlines()[0]
    path = tmp_path / "run.yaml"
    path.write_text(text)
    back, _, _ = load_run(str(path))
    assert back.te_grouped_tensor and back.te_version == "2.18" and back.experts_grouped_tensor
    plain = tmp_path / "plain.yaml"
    plain.write_text(to_yaml(_cfg("2.18", False)))
    assert not load_run(str(plain))[0].te_grouped_tensor
    assert load_run(str(plain), te_grouped_tensor=True)[0].te_grouped_tensor
    # TE reads the variable as an integer: 0 is off, any other integer on, anything else is no setting it knows
    for value, on in (("0", False), ("2", True)):
        f = tmp_path / f"v{value}.yaml"
        f.write_text(text.replace(f"{GROUPED_TENSOR_ENV}=1", f"{GROUPED_TENSOR_ENV}={value}", 1))
        assert load_run(str(f))[0].te_grouped_tensor is on
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(f"{GROUPED_TENSOR_ENV}=1", f"{GROUPED_TENSOR_ENV}=false", 1))
    with pytest.raises(MoeplanError, match="reads an integer"):
        load_run(str(bad))


def _fused(te: str, flag: bool = False, precision: str = "mxfp8"):
    # the sync-free bundle (rank capacity factor, HybridEP) puts the experts on TE's op fuser (ETP 1); partial
    # graphs leave the experts' launches to the host; Nemotron-3 Super at EP8 (64 local experts of ~350 rows) shows
    # them where DeepSeek-V3's 32 of ~1,000 rows hide them behind their GEMMs (MXFP8's split quantizes: one launch each)
    cfg, _ = api.build_config("nemotron-3-super-120b", gpu="b300", gpus=64, seq_len=8192, gbs=512, ep=8,
                              precision=precision, dispatcher="hybridep", rank_capacity_factor=1.5,
                              cuda_graphs="attn,mamba,moe_router,moe_preprocess", mcore_version="0.19", te_version=te,
                              te_grouped_tensor=flag, mtp_layers=2)
    return cfg


def test_op_fuser_takes_its_grouped_flow_by_default_from_te_2_16():
    assert op_fuser_grouped("2.16", B200, "mxfp8") and not op_fuser_grouped("2.16", HOPPER, "bf16")
    assert not op_fuser_grouped("2.15", B200, "mxfp8") and not op_fuser_grouped(DEFAULT_TE_VERSION, B200, "mxfp8")
    assert op_fuser_grouped("2.18", HOPPER, "fp8-cs") and not op_fuser_grouped("2.19", B200, "fp8-ds")
    old, new = _fused(DEFAULT_TE_VERSION), _fused("2.16")
    assert old.experts_op_fused and new.experts_op_fused
    assert not old.experts_grouped_tensor and new.experts_grouped_tensor  # no variable needed
    e_old, e_new = (_numbers(api.evaluate(c, c.gpu).as_dict()) for c in (old, new))
    assert e_new["time_breakdown_s"]["launch_overhead"] < e_old["time_breakdown_s"]["launch_overhead"]
    assert e_old == _numbers(api.evaluate(_fused("2.15"), old.gpu).as_dict())  # 2.14 / 2.15: per expert, as calibrated
    noop, = _lint(_fused("2.18", True))  # the variable selects the module path, which the op fuser bypasses
    assert noop.severity == "warning" and "op fuser" in noop.message
    assert _lint(_fused("2.18")) == []


def test_estimate_and_plan_refuse_the_variable_where_te_raises(tmp_path, capsys):
    """estimate / plan with --te-grouped-tensor where TE raises (TE 2.18 MXFP8 on Megatron-Core's 32-row padding, TE
    2.19's device splits) is a one-line input error, exit code 2, nothing written: the per-expert path moeplan would
    cost is one the job never reaches. Where TE only falls back or ignores it, the estimate runs (and says what ran);
    op-fused experts do not read the variable; explain's remedy search drops it where plan refuses it; check lints the
    file instead."""
    base = ["deepseek-v3", "--gpu", "b200", "--gpus", "256", "--seq-len", "4096", "--gbs", "2048"]
    layout = ["--pp", "16", "--ep", "8", "--dispatcher", "deepep"]
    out = tmp_path / "trace.json"
    for te, prec, why in (("2.18", "mxfp8", "multiples of 128"), ("2.19", "fp8-cs", "CUDA m_splits")):
        assert main(["estimate", *base, *layout, "--precision", prec, "--te-version", te, "--te-grouped-tensor",
                     "--json", "--trace", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and why in err and "Traceback" not in err
        assert not out.exists()
        with pytest.raises(MoeplanError, match="drop it"):
            api.plan("deepseek-v3", gpu="b200", gpus=256, seq_len=4096, gbs=2048, precision=prec, te_version=te,
                     te_grouped_tensor=True, top=1)
    # falls back (TE 2.17 has no FP8 current scaling on the path): estimated, and the JSON says the path did not run
    e = api.estimate("deepseek-v3", gpu="b200", gpus=256, seq_len=4096, gbs=2048, pp=16, ep=8, dispatcher="deepep",
                     precision="fp8-cs", te_version="2.17", te_grouped_tensor=True)
    assert e["te_version"] == "2.17" and e["te_grouped_tensor"] is True and e["experts_grouped_tensor"] is False
    ok = api.estimate("deepseek-v3", gpu="b200", gpus=256, seq_len=4096, gbs=2048, pp=16, ep=8, dispatcher="deepep",
                      precision="fp8-cs", te_version="2.18", te_grouped_tensor=True)
    assert ok["experts_grouped_tensor"] is True and ok["mcore_version"]
    # a run file that sets it where TE raises: check reports an error finding, explain still finds a remedy
    cfg = _cfg("2.18", True, "mxfp8")
    assert any(f.severity == "error" for f in _lint(cfg))
    remedy = api.search_like(cfg)
    assert remedy.result.plans and not remedy.result.plans[0].config.te_grouped_tensor


# Megatron-Core 0.19 on B200: the search has op-fused experts (the sync-free full-iteration bundle, ETP 1) beside
# experts on TEGroupedMLP's GroupedLinear module; TE 2.18 raises on the module for MXFP8 (32-row padding)
_MIXED = dict(gpu="b200", gpus=256, seq_len=4096, gbs=2048, precision="mxfp8", te_version="2.18", mcore_version="0.19")
_MIXED_CLI = ["plan", "deepseek-v3", "--gpu", "b200", "--gpus", "256", "--seq-len", "4096", "--gbs", "2048",
              "--precision", "mxfp8", "--te-version", "2.18", "--te-grouped-tensor"]


def test_plan_drops_only_the_runs_where_te_raises(capsys):
    """plan --te-grouped-tensor where TE raises on GroupedLinear's module path: the runs whose experts take that path
    are dropped, those on TE's op fuser (which does not read the variable) are planned with it set, and the plan's
    rationale and the answer's notes say why; the CLI answers (exit 0) instead of refusing."""
    plain = api.search_plans("deepseek-v3", top=10, **_MIXED)
    assert any(not p.config.experts_op_fused for p in plain.plans)  # without the flag, module-path runs are planned
    assert grouped_tensor_problem("2.18", B200, "mxfp8").startswith("error:")  # TE raises on the module path
    flagged = api.search_plans("deepseek-v3", top=10, te_grouped_tensor=True, **_MIXED)
    assert flagged.plans
    for p in flagged.plans:
        assert p.config.te_grouped_tensor and p.config.experts_op_fused and p.config.grouped_tensor_raises is None
        assert p.config.experts_grouped_tensor  # the op fuser's own grouped flow (TE 2.16+), no variable needed
        why, = (r for r in p.rationale if r.topic == "te_grouped_tensor")
        assert "op fuser" in why.text and GROUPED_TENSOR_ENV in why.text
    assert any("multiples of 128" in n and "op fuser" in n for n in flagged.result.notes)
    assert main([*_MIXED_CLI, "--mcore-version", "0.19", "--top", "2", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans
    for p in plans:
        assert p["te_grouped_tensor"] is True and p["experts_grouped_tensor"] is True and p["rank_capacity_factor"]
        # and, MXFP8 SwiGLU experts on sm100 with TE 2.18, the CuTe DSL fused grouped MLP's (RunConfig.experts_fused_mlp)
        assert p["env"] == {GROUPED_TENSOR_ENV: "1", FUSED_GROUPED_MLP_ENV: "1"}
        assert any(r["topic"] == "te_grouped_tensor" for r in p["rationale"])


def test_explain_remedy_keeps_the_variable_as_plan_does():
    """explain's remedy search (api.search_like) passes the run's --te-grouped-tensor through, as plan does: where TE
    raises on the module path but the search has op-fused runs, the remedy is plan's best with the variable set."""
    cfg, _ = api.build_config("deepseek-v3", pp=16, ep=8, dispatcher="deepep", **_MIXED)
    cfg = cfg.with_(te_grouped_tensor=True)
    assert cfg.grouped_tensor_raises is not None  # the run itself raises (moeplan check reports it)
    remedy = api.search_like(cfg, top=1).best
    planned = api.search_plans("deepseek-v3", top=1, te_grouped_tensor=True, **_MIXED).best
    assert remedy.config.te_grouped_tensor and remedy.config.experts_op_fused
    assert remedy.config == planned.config
    assert remedy.estimate.time.tokens_per_s_per_gpu == planned.estimate.time.tokens_per_s_per_gpu


def test_plan_refuses_the_variable_where_te_raises_on_every_run(capsys, monkeypatch):
    """Where no run of the search puts the experts on the op fuser (Megatron-Core 0.17 has no sync-free bundle; a
    pinned dispatcher other than HybridEP, ETP 2 or no CUDA graphs rule out the full-iteration graph), TE raises on
    every one: the same one-line refusal, exit code 2; also where the search found layouts that fit, but none with
    op-fused experts (here forced: the full-iteration runs' experts put back on the module path)."""
    for extra in (["--mcore-version", "0.17"], ["--mcore-version", "0.19", "--dispatcher", "deepep"],
                  ["--mcore-version", "0.19", "--etp", "2"], ["--mcore-version", "0.19", "--no-cuda-graphs"]):
        assert main([*_MIXED_CLI, *extra, "--json"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "multiples of 128" in err and "drop it" in err and "Traceback" not in err
    with pytest.raises(MoeplanError, match="drop it"):
        api.plan("deepseek-v3", te_grouped_tensor=True, top=1, **(_MIXED | {"mcore_version": "0.17"}))
    from moeplan.run.config import RunConfig

    monkeypatch.setattr(RunConfig, "experts_op_fused", property(lambda self: False))
    assert main([*_MIXED_CLI, "--mcore-version", "0.19", "--top", "1", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "none of the best fitting layouts" in err and "Traceback" not in err


def test_refusal_is_typed_and_the_remedy_search_catches_the_type(monkeypatch):
    """The planner refuses --te-grouped-tensor with errors.GroupedTensorRefused, and explain's remedy search
    (api.search_like) falls back on that type: it read the refusal's wording (str(exc).startswith(...)), so a
    reworded refusal made explain fail instead of searching without the variable."""
    from moeplan.plan import planner
    from moeplan.base.errors import GroupedTensorRefused

    with pytest.raises(GroupedTensorRefused, match="drop it"):
        api.plan("deepseek-v3", te_grouped_tensor=True, top=1, **(_MIXED | {"mcore_version": "0.17"}))
    monkeypatch.setattr(planner, "grouped_tensor_refusal", lambda raises, where="": f"reworded: {raises}{where}")
    with pytest.raises(GroupedTensorRefused, match="reworded"):
        api.plan("deepseek-v3", te_grouped_tensor=True, top=1, **(_MIXED | {"mcore_version": "0.17"}))
    remedy = api.search_like(_cfg("2.18", True, "mxfp8"), top=1)  # the planner refuses the flag: searched without it
    assert remedy.result.plans and not remedy.result.plans[0].config.te_grouped_tensor
