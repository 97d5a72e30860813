"""F6: the Python API checks gpu, cal, the numbers, cuda_graphs / optimizer_offload (scopes and a fraction for
estimate, bools for plan), fixed, hold, seq_lens and calibrate's warmup_iters where they enter: a one-line
MoeplanError naming the argument, not an AttributeError / TypeError / ValueError from deep inside. docs/commands/plan.md (Python API) lists
moeplan.lint.checker.check beside them: it takes the same checks (review finding 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.base.errors import MoeplanError
from moeplan.hardware import load_gpu
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

from ..conftest import ROOT

M = "qwen3-30b-a3b"
EST = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16)
PLAN = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, top=1)
SWEEP = dict(gpu="h100", gpus=16, seq_lens=[4096], gbs_tokens=4 << 20)
LOG = ROOT / "examples" / "qwen3_30b_a3b_16xh100_megatron_lm.log"
RUN = ROOT / "examples" / "deepseek_v3_128k_h100.yaml"  # a Megatron Bridge file check reads (model and GPUs given)


def _refused(fn: Callable[..., Any], *args: Any, names: str, **kwargs: Any) -> str:
    """``fn`` raises one MoeplanError line that names ``names`` (any other exception fails the test)."""
    with pytest.raises(MoeplanError) as exc:
        fn(*args, **kwargs)
    msg = str(exc.value)
    assert "\n" not in msg and names in msg, msg
    return msg


# every public function that takes build_config's run keywords (sweep: with a held layout), then those that plan
RUN_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "estimate": lambda **kw: api.estimate(M, **{**EST, **kw}),
    "estimate_run": lambda **kw: api.estimate_run(M, **{**EST, **kw}),
    "estimate_with_timeline": lambda **kw: api.estimate_with_timeline(M, **{**EST, **kw}),
    "build_config": lambda **kw: api.build_config(M, **{**EST, **kw}),
    "sweep_held": lambda **kw: api.sweep(M, **{**SWEEP, **kw}, hold={"ep": 16}),
}
SEARCH_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "plan": lambda **kw: api.plan(M, **{**PLAN, **kw}),
    "search_plans": lambda **kw: api.search_plans(M, **{**PLAN, **kw}),
    "sweep": lambda **kw: api.sweep(M, **{**SWEEP, **kw}),
}
ALL_FUNCTIONS = RUN_FUNCTIONS | SEARCH_FUNCTIONS


def _check(**kw: Any) -> Any:
    """moeplan.lint.checker.check of a real file (so a refusal is the argument's, not a missing file's)."""
    return checker.check(str(RUN), **{"model": "deepseek-v3", "gpus": 1024, **kw})


@pytest.mark.parametrize("fn", list(ALL_FUNCTIONS))
@pytest.mark.parametrize("gpu", [None, 100, "", ["h100"]])
def test_gpu_must_be_a_name_or_a_spec(fn: str, gpu: Any) -> None:
    assert "GPUSpec" in _refused(ALL_FUNCTIONS[fn], gpu=gpu, names="gpu")


CAL_FUNCTIONS = ALL_FUNCTIONS | {"checker.check": _check}


@pytest.mark.parametrize("fn", list(CAL_FUNCTIONS))
@pytest.mark.parametrize("cal", ["p1.yaml", Path("p1.yaml"), None, {"hbm_eff": 0.8}])
def test_cal_must_be_a_calibration_and_a_path_names_the_loader(fn: str, cal: Any) -> None:
    assert "load_profile" in _refused(CAL_FUNCTIONS[fn], cal=cal, names="cal")  # what the CLI's --calibration uses


@pytest.mark.parametrize("fn", list(RUN_FUNCTIONS))
@pytest.mark.parametrize("kw,name", [
    ({"optimizer_offload": "0.5"}, "optimizer_offload"), ({"optimizer_offload": True}, "optimizer_offload"),
    ({"moe_imbalance": "1.2"}, "moe_imbalance"), ({"reserve_gib": "5"}, "reserve_gib"),
    ({"capacity_factor": "1.0"}, "capacity_factor"), ({"rank_capacity_factor": "2"}, "rank_capacity_factor"),
    ({"cuda_graphs": True}, "cuda_graphs"), ({"cuda_graphs": 1}, "cuda_graphs"),
    ({"offload_modules": 3}, "offload_modules"), ({"ep_overlap": "false"}, "ep_overlap"),
    ({"delay_wgrad": "yes"}, "delay_wgrad"), ({"precision": None}, "precision"),
    ({"pipeline_layout": 5}, "pipeline_layout"), ({"hardware_file": 5}, "hardware_file"),
])
def test_estimate_knobs_are_checked(fn: str, kw: dict[str, Any], name: str) -> None:
    _refused(RUN_FUNCTIONS[fn], **kw, names=name)


PLAN_SWITCHES = [
    ({"cuda_graphs": "attn"}, "cuda_graphs"), ({"optimizer_offload": 0.5}, "optimizer_offload"),
    ({"moe_imbalance": "1.2"}, "moe_imbalance"), ({"reserve_gib": None}, "reserve_gib"),
    ({"headroom": "0.1"}, "headroom"), ({"grad_fp32": "no"}, "grad_fp32"), ({"precision": None}, "precision"),
]


# a planning sweep hands search_plans only the keywords of api._PLAN_KEYS
SEARCH_CASES = [(fn, kw, name) for fn in SEARCH_FUNCTIONS for kw, name in PLAN_SWITCHES
                if fn != "sweep" or name in api._PLAN_KEYS]


@pytest.mark.parametrize("fn,kw,name", SEARCH_CASES)
def test_plan_switches_are_checked(fn: str, kw: dict[str, Any], name: str) -> None:
    _refused(SEARCH_FUNCTIONS[fn], **kw, names=name)


def test_cuda_graphs_takes_what_each_function_documents() -> None:
    """estimate: CUDA graph scopes (a str or a list); plan: whether the search tries graphs (a bool). The message for
    the other's type says which is which."""
    est = api.estimate(M, **EST, cuda_graphs="attn,moe_router")
    assert api.estimate(M, **EST, cuda_graphs=["attn", "moe_router"])["cuda_graphs"] == est["cuda_graphs"]
    assert "plan" in _refused(api.estimate, M, **EST, cuda_graphs=True, names="cuda_graphs")
    assert "estimate" in _refused(api.plan, M, **PLAN, cuda_graphs="attn", names="cuda_graphs")
    assert api.plan(M, **PLAN, cuda_graphs=False, optimizer_offload=False)["plans"]


@pytest.mark.parametrize("fixed", [[("tp", 2)], "tp=2", {2: "tp"}])
def test_fixed_must_be_a_mapping(fixed: Any) -> None:
    _refused(api.plan, M, **PLAN, fixed=fixed, names="fixed")


@pytest.mark.parametrize("fixed,name", [({"recompute": 3}, "recompute"), ({"dispatcher": 3}, "dispatcher"),
                                        ({"dispatcher": "nccl"}, "dispatcher")])
def test_fixed_values_are_checked(fixed: dict[str, Any], name: str) -> None:
    _refused(api.plan, M, **PLAN, fixed=fixed, names=name)


def test_sweep_needs_a_length_and_a_mapping_to_hold() -> None:
    _refused(api.sweep, M, **{**SWEEP, "seq_lens": []}, names="seq_lens")
    _refused(api.sweep_points, M, **{**SWEEP, "seq_lens": ()}, names="seq_lens")
    _refused(api.sweep, M, **SWEEP, hold=[("ep", 16)], names="hold")


def test_timeline_and_its_kin_take_a_built_config() -> None:
    cfg, gpu = api.build_config(M, **EST)
    _refused(api.timeline, M, "h100", names="cfg")
    _refused(api.timeline, cfg, "h100", names="gpu")
    _refused(api.timeline, cfg, gpu, None, names="cal")
    _refused(api.recommended_dispatcher, cfg, gpu, "p1.yaml", names="cal")
    _refused(api.search_like, M, names="cfg")
    assert api.timeline(cfg, gpu, DEFAULT_CALIBRATION) is not None
    assert api.estimate(M, **{**EST, "gpu": load_gpu("h100")})["gpu"] == "h100"  # a GPUSpec is taken as it is


@pytest.mark.parametrize("kw,name", [
    ({"warmup_iters": -1}, "warmup_iters"), ({"warmup_iters": 2.0}, "warmup_iters"),
    ({"warmup_iters": "2"}, "warmup_iters"), ({"gpu": 100}, "gpu"), ({"model": 5}, "model"),
    ({"hardware_file": 5}, "hardware_file"),
])
def test_calibrate_checks_its_arguments_as_the_cli_does(kw: dict[str, Any], name: str) -> None:
    """The CLI refuses --warmup -1 (nonnegative_int); api.calibrate took it and dropped the wrong iterations."""
    _refused(api.calibrate, str(LOG), **{"gpu": "h100", **kw}, names=name)


@pytest.mark.parametrize("kw,name", [
    ({"te_grouped_tensor": "false"}, "te_grouped_tensor"), ({"te_grouped_tensor": None}, "te_grouped_tensor"),
    ({"run_mcore": "no"}, "run_mcore"), ({"headroom": "0.1"}, "headroom"), ({"headroom": None}, "headroom"),
    ({"moe_imbalance": "1.2"}, "moe_imbalance"), ({"reserve_gib": "2"}, "reserve_gib"),
    ({"gpus": "1024"}, "gpus"), ({"gpus": 0}, "gpus"), ({"gpus": 8.0}, "gpus"), ({"gpu": 100}, "gpu"),
    ({"gpu": ""}, "gpu"), ({"hardware_file": 5}, "hardware_file"), ({"model": 5}, "model"),
])
def test_check_takes_the_api_boundary_checks(kw: dict[str, Any], name: str) -> None:
    """checker.check read te_grouped_tensor='false' as True and run_mcore='no' as True, and raised a raw TypeError /
    AttributeError for the rest."""
    _refused(_check, **kw, names=name)


HEADROOM_ENTRIES: dict[str, Callable[..., Any]] = {"checker.check": _check, **SEARCH_FUNCTIONS}


@pytest.mark.parametrize("fn", list(HEADROOM_ENTRIES))
@pytest.mark.parametrize("headroom", [1.0, -0.1, float("nan"), float("inf")])
def test_headroom_is_one_rule_everywhere(fn: str, headroom: float) -> None:
    """One rule (argcheck.headroom), one message, for plan and check alike: a number in [0, 1)."""
    assert "in [0, 1)" in _refused(HEADROOM_ENTRIES[fn], headroom=headroom, names="headroom")


def test_check_takes_none_for_what_the_file_decides() -> None:
    """None: the file's GPU (its '# moeplan:' comment, else the default), RunConfig's imbalance and reserve."""
    res = _check(gpu=None, hardware_file=None, moe_imbalance=None, reserve_gib=None, headroom=0,
                 te_grouped_tensor=False)
    assert res.estimate is not None and res.gpu.name == "h100"
