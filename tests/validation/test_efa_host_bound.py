"""The AWS EFA campaigns' micro-batch 1 against 4 (N31 / N32 on p6-b300, N33 on p5.48xlarge; NCCL all-to-all), read
through the host timeline (engine.timing.host: a MoE layer takes max(host, GPU) per micro-batch). Measured, the MBS 1
step per layer and micro-batch is the same at EP16 and EP32 and across PP 1 / 2 / 4 (11.1-11.4 ms on N31, 15.1-15.6 ms
with full recompute on N32, 17.7-18.2 ms on N33): a TP8 MoE layer of 512 tokens per rank is issued slower than its
kernels run. Rows are printed."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from tests.measured_variants import n_variants

# (group, layout at EP16 over 2 nodes, layout at EP32 over 4)
LAYOUTS = {"N31": ("EP16 PP4", "EP32 PP2"), "N32": ("EP16 PP2", "EP32 PP1"), "N33": ("EP16 PP4", "EP32 PP2")}


@pytest.fixture(scope="module")
def rows():
    return {(v.group, v.label): v for v in n_variants() if v.group in LAYOUTS}


def _mbs1_over_mbs4(rows, group: str, layout: str) -> tuple[float, float]:
    """(measured, estimated) MBS 1 step over the MBS 4 step of one layout, NCCL all-to-all (same tokens per step)."""
    one, four = rows[(group, f"{layout} MBS1 NCCL")], rows[(group, f"{layout} MBS4 NCCL")]
    step = {v.label: float(api.estimate(v.model, cal=DEFAULT_CALIBRATION, **v.kwargs)["step_time_s"])
            for v in (one, four)}
    measured = float(four.measured()) / float(one.measured())
    est = step[one.label] / step[four.label]
    print(f"{group} {layout} MBS1 / MBS4 step: measured {measured:.2f}, moeplan {est:.2f} ({est / measured - 1:+.0%})")
    return measured, est


@pytest.mark.parametrize("group", sorted(LAYOUTS))
def test_ep16_mbs1_against_mbs4(rows, group):
    """EP16 over 2 nodes: measured 2.80 / 3.08 / 3.25x; moeplan within 10% (it had 2.30 / 2.37 / 2.74x, 16-23% short,
    with the EFA per-call constants alone standing for the host)."""
    measured, est = _mbs1_over_mbs4(rows, group, LAYOUTS[group][0])
    assert est == pytest.approx(measured, rel=0.10)


@pytest.mark.parametrize("group", sorted(LAYOUTS))
def test_mbs1_step_per_layer_does_not_follow_ep(rows, group):
    """The MBS 1 step per layer and micro-batch at EP32 over the one at EP16 (their PP differ: micro-batches per DP
    rank x layers per stage, bubble included): measured 0.97-0.98x; moeplan within 10%."""
    per = {}
    for layout in LAYOUTS[group]:
        v = rows[(group, f"{layout} MBS1 NCCL")]
        cfg, _ = api.build_config(v.model, **v.kwargs)
        par = cfg.parallel
        slots = (cfg.batch.microbatches(par.dp) + (par.pp - 1) / par.vpp) * len(cfg.model.layers) / par.pp
        est = api.estimate(v.model, cal=DEFAULT_CALIBRATION, **v.kwargs)
        step = float(est["step_time_s"])
        measured_step = step * float(est["tflops_per_gpu"]) / float(v.measured())  # same FLOPs per step
        per[layout] = (measured_step / slots, step / slots)
    (m16, e16), (m32, e32) = (per[layout] for layout in LAYOUTS[group])
    print(f"{group} MBS1 ms per layer and micro-batch: measured {1e3 * m16:.1f} / {1e3 * m32:.1f}, "
          f"moeplan {1e3 * e16:.1f} / {1e3 * e32:.1f} (EP16 / EP32)")
    assert 0.9 < m32 / m16 < 1.1
    assert e32 / e16 == pytest.approx(m32 / m16, rel=0.10)


@pytest.mark.xfail(strict=True, reason="at EP32 over 4 nodes the MBS 4 step costs 1.33x (N31) / 1.55x (N32) the "
                   "EP16 one measured, more than NCCL's remote bytes give: with the MBS 1 steps host-bound, MBS 1 "
                   "over MBS 4 reads +25% / +43% (docs/calibration.md, AWS EFA campaigns)")
@pytest.mark.parametrize("group", ["N31", "N32"])
def test_ep32_mbs1_against_mbs4_on_p6_b300(rows, group):
    measured, est = _mbs1_over_mbs4(rows, group, LAYOUTS[group][1])
    assert est == pytest.approx(measured, rel=0.10)
