"""The Python API's boundary: wrong argument types and values are one-line MoeplanErrors naming the argument
(moeplan.base.argcheck), not TypeError/ZeroDivisionError from deep inside; cp_comm_type is checked and reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.base.errors import MoeplanError
from moeplan.megatron import export
from moeplan.base.vocab import CP_COMM_TYPES

M = "qwen3-30b-a3b"
EST = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16)
PLAN = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, top=1)


def _refused(fn, *args, names: str, **kwargs) -> str:
    with pytest.raises(MoeplanError) as exc:
        fn(*args, **kwargs)
    msg = str(exc.value)
    assert "\n" not in msg and names in msg, msg
    return msg


@pytest.mark.parametrize("bad", ["ring", "", "P2P", None, "all_gather"])
def test_estimate_refuses_unknown_cp_comm_type(bad):
    msg = _refused(api.estimate, M, **EST, cp=2, cp_comm_type=bad, names="cp_comm_type")
    assert all(c in msg for c in CP_COMM_TYPES)


@pytest.mark.parametrize("kind", [c for c in CP_COMM_TYPES if c != "a2a+p2p"])  # a2a+p2p: hierarchical CP
def test_estimate_dict_says_the_cp_comm_type_used(kind):
    assert api.estimate(M, **{**EST, "ep": 8}, cp=2, cp_comm_type=kind)["cp_comm_type"] == kind
    assert api.estimate(M, **{**EST, "ep": 8}, cp=2, cp_comm_type="auto")["cp_comm_type"] in CP_COMM_TYPES


@pytest.mark.parametrize("kw,name", [
    ({"gpus": "16"}, "gpus"), ({"seq_len": "4k"}, "seq_len"), ({"gbs": None}, "gbs"), ({"gpus": 16.0}, "gpus"),
    ({"gpus": True}, "gpus"), ({"gpus": 0}, "gpus"), ({"seq_len": -5}, "seq_len"),
])
def test_plan_refuses_bad_counts(kw, name):
    msg = _refused(api.plan, M, **{**PLAN, **kw}, names=name)
    if name == "seq_len" and isinstance(kw[name], str):
        assert "131072" in msg  # says to pass an int


@pytest.mark.parametrize("model", [None, 123, ["qwen3-30b-a3b"]])
def test_model_must_be_a_name_or_path(model):
    _refused(api.plan, model, **PLAN, names="model")
    _refused(api.estimate, model, **EST, names="model")
    _refused(api.params_report, model, names="model")


@pytest.mark.parametrize("kw,name", [
    ({"tp": "2"}, "tp"), ({"tp": 0}, "tp"), ({"vpp": 0}, "vpp"), ({"gpus": 16.0}, "gpus"), ({"mbs": 1.0}, "mbs"),
    ({"recompute": 123}, "recompute"),
])
def test_estimate_refuses_bad_arguments(kw, name):
    _refused(api.estimate, M, **{**EST, **kw}, names=name)


def test_plan_refuses_bad_fixed_counts():
    _refused(api.plan, M, **PLAN, fixed={"tp": "2"}, names="tp")



@pytest.mark.parametrize("seq_lens", [["4k"], 4096, "4096", [4096.0], [0]])
def test_sweep_refuses_bad_seq_lens(seq_lens):
    _refused(api.sweep, M, gpu="h100", gpus=16, seq_lens=seq_lens, gbs_tokens=4096 * 1024, names="seq_lens")


def test_sweep_accepts_any_iterable_of_ints():
    rows = api.sweep(M, gpu="h100", gpus=16, seq_lens=(s for s in [4096]), gbs_tokens=4096 * 1024)
    assert [r["seq_len"] for r in rows] == [4096]


@pytest.mark.parametrize("kw,name", [({"tp": 0}, "tp"), ({"tp": -2}, "tp"), ({"seq_len": 0}, "seq_len"),
                                     ({"seq_len": -5}, "seq_len"), ({"tp": "2"}, "tp")])
def test_params_report_refuses_non_positive(kw, name):
    _refused(api.params_report, "deepseek-v3", **kw, names=name)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    cfg, _ = api.build_config(M, **EST)
    path = tmp_path_factory.mktemp("cfg") / "run.yaml"
    path.write_text(export.to_yaml(cfg, cfg.mcore_version))
    return path


@pytest.mark.parametrize("gpus", [0, -4, "1024", 16.0, True])
def test_check_refuses_bad_gpu_count(run_file, gpus):
    msg = _refused(checker.check, str(run_file), gpus=gpus, names="gpus")
    assert "not in the file" not in msg


@pytest.mark.parametrize("path", [None, 123])
def test_check_refuses_a_path_that_is_not_one(path):
    _refused(checker.check, path, gpus=16, names="path")


def test_check_takes_a_path_object(run_file):
    assert checker.check(run_file, gpus=16).estimate is not None


def test_calibrate_takes_one_log_alone(tmp_path):
    log = str(tmp_path / "missing.log")
    with pytest.raises(MoeplanError) as one:
        api.calibrate(log)
    with pytest.raises(MoeplanError) as listed:
        api.calibrate([log])
    assert str(one.value) == str(listed.value) and log in str(one.value)
    with pytest.raises(MoeplanError) as as_path:
        api.calibrate(Path(log))
    assert str(as_path.value) == str(listed.value)


def test_api_imports_only_what_it_uses():
    """moeplan.api keeps its documented re-exports (list_models, Estimate) but no unused import (catalog_names)."""
    from moeplan.engine.listing import list_models

    assert api.list_models is list_models and api.Estimate is not None
    assert not hasattr(api, "catalog_names")
