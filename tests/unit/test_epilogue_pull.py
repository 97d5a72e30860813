"""benchmarks/epilogue_pull.py's parts that decide what it reports: which GPUs are Blackwell (by the catalog entry's
compute capability, not an SM count), the Blackwell-only depth penalty it patches in (exactly a larger gemm_epilogue_s
on those GPUs, nothing elsewhere), and the run each observation reads (the estimates its prediction asks for)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.step import estimate_time
from moeplan.hardware import hardware_names, load_gpu
from tests.scripts import loaded_script


@pytest.fixture(scope="module")
def pull():
    with loaded_script("benchmarks/epilogue_pull.py", "moeplan_epilogue_pull_script") as module:
        yield module


def test_blackwell_is_read_from_the_compute_capability(pull):
    names = hardware_names()
    assert {n for n in names if pull.is_blackwell(load_gpu(n))} == {"b200", "b300", "gb200", "gb300", "b300-efa"}
    for n in names:
        gpu = load_gpu(n)
        assert pull.is_blackwell(gpu) == (gpu.compute_capability >= 10.0), n
    # the SM count says nothing: a Hopper part with Blackwell's SMs is not one, a Blackwell part without its
    # compute capability is not taken for one
    assert not pull.is_blackwell(replace(load_gpu("h100"), sm_count=160))
    assert not pull.is_blackwell(replace(load_gpu("b200"), compute_capability=None))


QWEN = dict(gpus=16, seq_len=4096, gbs=256, ep=16)


def _time(gpu: str, cal=DEFAULT_CALIBRATION, **kw) -> float:
    cfg, spec = api.build_config("qwen3-30b-a3b", gpu=gpu, **{**QWEN, **kw})
    return estimate_time(cfg, spec, cal).step_time_s


@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_the_blackwell_depth_penalty_is_a_larger_epilogue_on_blackwell_only(pull, factor):
    """Under blackwell_depth(f) a Blackwell run's step is its step at f x gemm_epilogue_s (the depth penalty is linear
    in it and nothing else reads it), a Hopper run's its own; outside it every run is as before."""
    scaled = DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": DEFAULT_CALIBRATION.gemm_epilogue_s * factor})
    base = {g: _time(g) for g in ("gb200", "b300", "h100")}
    with pull.blackwell_depth(factor):
        got = {g: _time(g) for g in base}
    assert got["gb200"] == pytest.approx(_time("gb200", scaled), rel=1e-12)
    assert got["b300"] == pytest.approx(_time("b300", scaled), rel=1e-12)
    assert got["h100"] == base["h100"]
    if factor > 1:
        assert got["gb200"] > base["gb200"] and got["b300"] > base["b300"]
    assert {g: _time(g) for g in base} == base  # restored


def test_an_observations_runs_are_the_estimates_it_asks_for(pull):
    C = pull.C
    a, b = C._built("qwen3-30b-a3b", dict(gpu="gb200", precision="mxfp8", dispatcher="hybridep", **QWEN)), \
        C._built("qwen3-30b-a3b", dict(gpu="h100", dispatcher="alltoall", **QWEN))
    ratio = C.Obs("X", "gb200 / h100", 1.0, lambda c: a(c).step_time_s / b(c).step_time_s, "qwen3-30b-a3b")
    runs = pull.runs_of(ratio)
    assert [(g.name, cfg.precision, cfg.dispatcher) for cfg, g in runs] == [("gb200", "mxfp8", "hybridep"),
                                                                          ("h100", "bf16", "alltoall")]
    assert pull.run_of(ratio) == ("gb200", "mxfp8", "hybridep")
    assert pull.run_of(C.Obs("X", "none", 1.0, lambda c: 1.0, "qwen3-30b-a3b")) == ("?", "?", "?")
    assert C.estimate_time is estimate_time  # restored


def test_the_hybridep_copy_trial_slows_hybridep_only(pull):
    import moeplan.engine.timing.layer as layer_mod
    import moeplan.engine.timing.moe as moe_mod
    from functools import partial
    from unittest import mock

    base = {d: _time("h100", dispatcher=d) for d in ("hybridep", "alltoall")}
    trial = partial(pull._ep_kernels_with_copy, moe_mod.ep_kernels, 5e-9)
    with mock.patch.object(moe_mod, "ep_kernels", trial), mock.patch.object(layer_mod, "ep_kernels", trial):
        got = {d: _time("h100", dispatcher=d) for d in base}
    assert got["hybridep"] > base["hybridep"] and got["alltoall"] == base["alltoall"]


def test_the_hybridep_copy_trial_counts_the_expert_tp_copies(pull):
    """The trial's copies are those the flex dispatcher moves over its expert-TP x EP group
    (timing.moe.flex_token_copies): at EP 1 x ETP 2 every token goes to both expert-TP ranks of its one EP rank, 2
    copies (the group has two ranks, so the trial runs there too); at EP 16 x ETP 1 they are the EP ranks hit."""
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
    from moeplan.engine.timing.context import make_ctx
    from moeplan.engine.timing.moe import expected_ranks_hit
    from moeplan.models.spec import MoE

    def extra(**kw):
        cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", **{**QWEN, "dispatcher": "hybridep", **kw})
        ctx = make_ctx(cfg, gpu, CAL)
        moe = next(layer.mlp for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
        d, c, p = pull._ep_kernels_with_copy(lambda _ctx, _moe: (0.0, 0.0, 0.0), 1e-9, ctx, moe)
        assert d == c and p == 0.0
        return d / (1e-9 * ctx.tokens * cfg.rows_factor), moe

    copies, _ = extra(ep=1, etp=2, gpus=8)
    assert copies == pytest.approx(2.0, rel=1e-12)
    copies, moe = extra()
    assert copies == pytest.approx(expected_ranks_hit(moe, 16), rel=1e-12)
    assert extra(ep=1, etp=1, gpus=8)[0] == 0.0
