"""The AWS EFA campaigns (N31 / N32 on p6-b300, N33 on p5.48xlarge, all fitted; N33's DeepEP-over-UCCL-EP rows
reported, not fitted), with the per-call costs of EP across EFA nodes and DeepEP's proxy cost per RDMA message to a
remote node (engine.timing.moe.ep_proxy_call_s, ep_proxy_messages_s): each row as the fit sees it (a ratio to its
campaign sub-group's first row) against the shipped calibration. Rows are printed."""

from __future__ import annotations

import math

import pytest

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION


@pytest.fixture(scope="module")
def efa_obs(calibrate_script):
    obs = [o for o in calibrate_script.n_observations(include_out_of_fit=True) if o.group in ("N31", "N32", "N33")]
    return calibrate_script, obs


def _residuals(obs, group: str) -> list[float]:
    out = []
    for o in obs:
        if o.group == group:
            r = math.log(o.predict(DEFAULT_CALIBRATION) / o.measured)
            print(f"{o.group} {o.label}: measured {o.measured:.3f}, moeplan {r:+.0%}")
            out.append(r)
    return out


# N32's EP32 PP1 DeepEP / NCCL pairs at MBS 4: the known gap test_n32_ep32_pp1_deepep_against_nccl names
N32_EP32_PP1_DEEPEP = ("EP32 PP1 MBS4 UCCL / EP32 PP1 MBS4 NCCL", "EP32 PP1 MBS4 NVSHMEM / EP32 PP1 MBS4 NCCL")


@pytest.mark.parametrize("group", ["N31", "N32"])
def test_p6_b300_campaigns_in_the_fit(efa_obs, group):
    """Fitted with the per-call cost of EP across EFA nodes (a2a_host_call_s, ep_proxy_call_s): before it, MBS 1 ran
    at 0.3-0.5x of MBS 4 measured against moeplan's 0.75-0.9x (RMS of the log residuals ~0.9). N32's two EP32 PP1
    DeepEP / NCCL pairs are the known gap below (strict xfail), not counted here."""
    module, obs = efa_obs
    assert not [o for o in obs if o.group == group and o.why]
    r = _residuals([o for o in obs if o.label not in N32_EP32_PP1_DEEPEP or o.group != "N32"], group)
    rms = math.sqrt(sum(x * x for x in r) / len(r))
    print(f"{group}: RMS {rms:.3f} over {len(r)} rows")
    assert len(r) >= 8 and rms <= 0.20


@pytest.mark.xfail(strict=True, reason="N32's EP32 PP1 (full recompute) is the one EP32 sub-group where DeepEP does not "
                   "lose to NCCL (1.07x over UCCL-EP, 0.94x over NVSHMEM measured; moeplan ~0.75x with DeepEP's proxy "
                   "cost per RDMA message, which N31's EP32 PP2, 0.85x / 0.77x, and N33 support): PP1 and full "
                   "recompute change how many calls run, not how many messages the proxies post per call; no cause "
                   "located (docs/calibration.md, AWS EFA campaigns)")
def test_n32_ep32_pp1_deepep_against_nccl(efa_obs):
    _, obs = efa_obs
    rows = [o for o in obs if o.group == "N32" and o.label in N32_EP32_PP1_DEEPEP]
    assert len(rows) == 2
    r = _residuals(rows, "N32")
    assert all(abs(x) <= 0.15 for x in r)


def test_mbs1_costs_every_dispatcher_on_efa(efa_obs):
    """MBS 1 against MBS 4 (same layout, NCCL at MBS 4 the reference): measured 0.27-0.49x for every dispatcher on
    p6-b300; moeplan within a factor 1.5 of each (it had 1.65-2.95x before the per-call cost)."""
    _, obs = efa_obs
    rows = [o for o in obs if o.group in ("N31", "N32") and "MBS1" in o.label]
    assert len(rows) == 11
    for o in rows:
        assert 1 / 1.5 < o.predict(DEFAULT_CALIBRATION) / o.measured < 1.5, o.label


def test_p5_campaign_in_the_fit(efa_obs):
    """N33 (p5.48xlarge, 4 EFA rails per GPU) enters with the p6-b300 groups: the fixed cost per EP call is paid per
    rail (engine.timing.moe.ep_proxy_call_s), so p5's NCCL MBS 1 / MBS 4 ratios (measured 0.31 / 0.34) land within
    25% (they ran 1.39-1.46x too fast with one cost per call for both systems) and the group within RMS 0.25."""
    module, obs = efa_obs
    fitted = [o for o in obs if not o.why]
    r = _residuals(fitted, "N33")
    rms = math.sqrt(sum(x * x for x in r) / len(r))
    print(f"N33: RMS {rms:.3f} over {len(r)} fitted rows")
    assert len(r) == 8 and rms <= 0.25
    # DeepEP over UCCL-EP on p5 (tests/fit_exclusions.py; 5 ratio rows, the sixth cell was preempted): reported, not fitted
    assert len([o for o in obs if o.group == "N33" and o.why]) == 5
    assert all("UCCL" in o.label for o in obs if o.why)
    assert not [o for o in module.n_observations() if o.group == "N33" and "UCCL" in o.label]
    nccl = [o for o in obs if o.group == "N33" and "MBS1 NCCL" in o.label]
    assert len(nccl) == 2
    for o in nccl:
        assert 1 / 1.25 < o.predict(DEFAULT_CALIBRATION) / o.measured < 1.25, o.label


@pytest.mark.parametrize("group, proxy", [("N31", "UCCL"), ("N31", "NVSHMEM"), ("N33", "NVSHMEM")])
def test_deepep_loses_more_to_nccl_at_ep32_than_at_ep16(efa_obs, group, proxy):
    """DeepEP over the EFA proxies against NCCL's all-to-all at MBS 4, same campaign: measured 0.85 / 0.77 of NCCL's
    speed at EP32 (4 nodes) and 0.94 / 1.06 at EP16 (2 nodes) on p6-b300 (N31, UCCL-EP / NVSHMEM), 0.56 and 0.94 on
    p5 (N33, NVSHMEM). The proxies post every RDMA message (engine.timing.moe.ep_proxy_messages_s), and a 4-node EP32
    group sends each token to ~2.7 remote nodes in messages of 8 tokens against ~1.0 in messages of 20 / 12 at EP16:
    moeplan keeps the order (it had DeepEP relatively faster at EP32, 0.88 against 0.83 on N31 over UCCL-EP, with one
    cost per call)."""
    _, obs = efa_obs

    def ratio(ep: str) -> tuple[float, float]:
        pp = "PP2" if ep == "EP32" else "PP4"
        o = next(o for o in obs if o.group == group and o.label == f"{ep} {pp} MBS4 {proxy} / {ep} {pp} MBS4 NCCL")
        est = o.predict(DEFAULT_CALIBRATION)
        print(f"{group} {o.label}: measured {o.measured:.2f}, moeplan {est:.2f}")
        return o.measured, est

    (m32, e32), (m16, e16) = ratio("EP32"), ratio("EP16")
    assert m32 < m16 and e32 < e16


@pytest.mark.xfail(strict=True, reason="issue 31's target for the EFA groups, N31-N33 residual RMS <= ~0.12: they fit at "
                   "~0.12 / 0.21 / 0.13 with DeepEP's proxy cost per RDMA message (MBS 1 against MBS 4 at EP16 18-31% "
                   "too fast in all three groups, every dispatcher but N33's NVSHMEM; N32's EP32 PP1 DeepEP 1.07x / 0.94x NCCL "
                   "measured, ~0.75x moeplan, where N31's EP32 PP2 loses 0.85x / 0.77x; DeepEP under EP overlap at EP32 "
                   "13-16% too fast) (docs/calibration.md)")
def test_efa_target(efa_obs):
    _, obs = efa_obs
    r = [x for g in ("N31", "N32", "N33") for x in _residuals(obs, g)]
    assert math.sqrt(sum(x * x for x in r) / len(r)) <= 0.12
