"""The AWS EFA groups (N31-N33) taken apart per EP call by benchmarks/efa_call_split.py: what the measured step leaves
for each dispatch / combine once moeplan's estimate of the rest (compute, NVLink legs, TP, pipeline) is taken off,
against moeplan's fixed part + EFA transfer per call. MBS 1 against MBS 4 of one layout: 4x the bytes per call."""

from __future__ import annotations

import pytest

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.hardware import load_gpu
from moeplan.models import load_model

from ..scripts import loaded_script


@pytest.fixture(scope="module")
def calls():
    with loaded_script("benchmarks/efa_call_split.py", "moeplan_efa_call_split") as module:
        rows = {(d["group"], d["row"]): d for d in (module.split(v) for v in module.efa_rows())}
        for d in rows.values():
            print(f"{d['group']} {d['row']}: est {d['est_call_ms']:.2f} ms, measured {d['meas_call_ms']:.2f} ms a call")
        yield rows


def test_the_split_adds_up(calls):
    """Each probe moves the step by its item alone: probed together (the per-call constants doubled, the scale-out
    efficiency halved), the step grows by the sum of the three items, so rest + calls x (fixed + transfer +
    messages) is the step and the items do not overlap. Checked on one row of each group and dispatcher."""
    from moeplan import api
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.moe import ep_kernels_of
    from tests.measured_variants import n_variants

    assert len(calls) == 35
    seen = set()
    for v in n_variants():
        d = calls.get((v.group, v.label))
        if d is None or (v.group, d["dispatcher"]) in seen:
            continue
        seen.add((v.group, d["dispatcher"]))
        kernels = ep_kernels_of(d["dispatcher"])
        both = cal.with_overrides({"a2a_host_call_s": 2 * cal.a2a_host_call_s, "ep_proxy_call_s": 2 * cal.ep_proxy_call_s,
                                   "ep_proxy_message_s": 2 * cal.ep_proxy_message_s,
                                   "a2a_scaleout_eff": {kernels: cal.a2a_scaleout_eff[kernels] / 2}})
        grown_s = float(api.estimate(v.model, cal=both, **v.kwargs)["step_time_s"]) - d["step_s"]
        items_s = d["calls"] * d["est_call_ms"] / 1e3
        assert grown_s == pytest.approx(items_s, rel=0.05), d["row"]
    assert len(seen) >= 5


@pytest.mark.parametrize("group, model, gpu, ep", [("N31", "qwen3-235b-a22b", "b300-efa", 16),
                                                   ("N31", "qwen3-235b-a22b", "b300-efa", 32),
                                                   ("N33", "qwen3-30b-a3b", "h100-efa", 16),
                                                   ("N33", "qwen3-30b-a3b", "h100-efa", 32)])
def test_only_the_remote_destinations_cross_efa(calls, group, model, gpu, ep):
    """NCCL's all-to-all sends each (token, expert) row to its rank; only the rows for ranks on other nodes cross EFA,
    the node's own share (8 of the EP ranks: half at EP16 over 2 nodes, a quarter at EP32 over 4) goes over NVLink.
    The EFA transfer per call is the remote share alone: tokens (MBS 4 x 4,096 / TP8) x top-8 x hidden x 2 bytes x
    (EP - 8) / EP at the NIC rate x a2a_scaleout_eff."""
    spec, g = load_model(model), load_gpu(gpu)
    pp = 4 if ep == 16 else 2
    d = calls[(group, f"EP{ep} PP{pp} MBS4 NCCL")]
    row_bytes = spec.hidden * 2
    remote_bytes = 4 * 4096 / 8 * spec.first_moe.top_k * row_bytes * (ep - 8) / ep
    rate = g.scaleout_bw_bytes_per_s * DEFAULT_CALIBRATION.a2a_scaleout_eff["alltoall"]
    assert d["transfer_ms"] == pytest.approx(1e3 * remote_bytes / rate, rel=0.02)


@pytest.mark.parametrize("group", ["N31", "N32", "N33"])
def test_measured_ep16_call_does_not_grow_with_its_bytes(calls, group):
    """The measurements' own signature (read through moeplan's rest of the step): NCCL's call at EP16 (2 nodes) takes
    no longer at MBS 4 than at MBS 1 (measured 0.97x / 0.86x / 0.93x on N31 / N32 / N33) with 4x the bytes, while at
    EP32 (4 nodes) it grows (1.55x / 1.74x / 1.12x): the EFA transfer of a 2-node call hides behind its fixed part."""
    lay16, lay32 = ("EP16 PP2", "EP32 PP1") if group == "N32" else ("EP16 PP4", "EP32 PP2")

    def growth(layout: str) -> float:
        return calls[(group, f"{layout} MBS4 NCCL")]["meas_call_ms"] / calls[(group, f"{layout} MBS1 NCCL")]["meas_call_ms"]

    assert growth(lay16) <= 1.0
    assert growth(lay32) >= 1.1


@pytest.mark.xfail(strict=True, reason="moeplan adds the EFA transfer to each call's fixed part: at EP16 MBS 4 NCCL's "
                   "call is estimated 2.67 / 2.67 / 4.46 ms against 2.03 / 1.74 / 3.67 ms measured (N31 / N32 / N33). "
                   "The larger of the two (branch efa4) fits these but was not adopted (CV 0.1059 vs 0.1061, no "
                   "source for DeepEP); no other item differs between the 2- and 4-node rows (benchmarks/"
                   "efa_call_split.py; docs/calibration.md, AWS EFA campaigns)")
@pytest.mark.parametrize("group", ["N31", "N32", "N33"])
def test_ep16_mbs4_call_as_measured(calls, group):
    lay16 = "EP16 PP2" if group == "N32" else "EP16 PP4"
    d = calls[(group, f"{lay16} MBS4 NCCL")]
    assert d["est_call_ms"] == pytest.approx(d["meas_call_ms"], rel=0.15)
