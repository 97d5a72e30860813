"""The timing constants are data (moeplan/hardware/calibration.yaml), overridable per call."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.engine.timing.calibration import CALIBRATION_FILE, DEFAULT_CALIBRATION, Calibration

from ..conftest import ROOT


def test_defaults_come_from_the_data_file():
    data = yaml.safe_load((ROOT / "src" / "moeplan" / "hardware" / CALIBRATION_FILE).read_text())["constants"]
    assert set(data) == {f.name for f in fields(Calibration)}
    for name, value in data.items():
        value = {k: float(v) for k, v in value.items()} if isinstance(value, dict) else float(value)
        assert getattr(DEFAULT_CALIBRATION, name) == value
        assert getattr(Calibration(), name) == value


def test_overrides_change_the_estimate_and_are_validated():
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=16, dispatcher="alltoall")
    base = api.estimate("qwen3-30b-a3b", **kw)["step_time_s"]
    slow = DEFAULT_CALIBRATION.with_overrides({"a2a_eff": {"alltoall": DEFAULT_CALIBRATION.a2a_eff["alltoall"] / 2}})
    assert slow.a2a_eff["allgather"] == DEFAULT_CALIBRATION.a2a_eff["allgather"]  # dicts merge key by key
    assert api.estimate("qwen3-30b-a3b", cal=slow, **kw)["step_time_s"] > base
    assert api.estimate("qwen3-30b-a3b", **kw)["step_time_s"] == base  # the default is untouched
    with pytest.raises(MoeplanError, match="unknown calibration constant"):
        DEFAULT_CALIBRATION.with_overrides({"attn_efficiency": 0.5})
    with pytest.raises(MoeplanError, match="positive"):
        DEFAULT_CALIBRATION.with_overrides({"hbm_eff": -1})


def test_plan_uses_the_calibration_it_is_given():
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=256, top=1, fixed={"ep": 16, "tp": 1, "pp": 1, "cp": 1})
    fast = api.plan("qwen3-30b-a3b", **kw)["plans"][0]["tokens_per_s_per_gpu"]
    cal = DEFAULT_CALIBRATION.with_overrides({"grouped_gemm_eff": DEFAULT_CALIBRATION.grouped_gemm_eff / 2})
    slow = api.plan("qwen3-30b-a3b", cal=cal, **kw)["plans"][0]["tokens_per_s_per_gpu"]
    assert slow < fast


def test_renamed_constants_still_read_under_their_old_names():
    """A user profile written before a constant gained its unit suffix still applies (ep_sm_bw ->
    ep_sm_bw_bytes_per_s); giving both names is an error, not a silent pick."""
    from moeplan.engine.timing.calibration import RENAMED_CONSTANTS

    key = "deepep_nvl8_dispatch"
    value = DEFAULT_CALIBRATION.ep_sm_bw_bytes_per_s[key] / 2
    for old, new in RENAMED_CONSTANTS.items():
        assert new in {f.name for f in fields(Calibration)} and old not in {f.name for f in fields(Calibration)}
    cal = DEFAULT_CALIBRATION.with_overrides({"ep_sm_bw": {key: value}})
    assert cal.ep_sm_bw_bytes_per_s[key] == value
    assert cal.ep_sm_bw_bytes_per_s == DEFAULT_CALIBRATION.with_overrides(
        {"ep_sm_bw_bytes_per_s": {key: value}}).ep_sm_bw_bytes_per_s
    with pytest.raises(MoeplanError, match="twice"):
        DEFAULT_CALIBRATION.with_overrides({"ep_sm_bw": {key: value}, "ep_sm_bw_bytes_per_s": {key: value}})
