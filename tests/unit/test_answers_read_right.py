"""Answers that read wrong (issue 32): sweep's budget advice, the a2a+p2p error, the report's bubble and waiting."""

from __future__ import annotations

import re

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.limits import run_bound


def test_sweep_of_many_odd_lengths_suggests_no_absurd_budget():
    lengths = [4096 + 8 * i for i in range(40)]
    with pytest.raises(MoeplanError) as exc:
        api.check_gbs_tokens(lengths, 4 * 2**20)
    said = str(exc.value)
    assert f"no budget up to {run_bound('gbs_tokens'):,} tokens" in said
    assert not re.search(r"\d{1,3}(,\d{3}){4,}", said.replace(f"{run_bound('gbs_tokens'):,}", ""))  # no 15+ digits


def test_sweep_still_suggests_a_reasonable_budget():
    with pytest.raises(MoeplanError, match="use 995,328 or 1,007,616 at every length"):
        api.check_gbs_tokens([3072, 4096], 1_000_000)


def test_a2a_p2p_inside_one_nvlink_domain_says_there_is_no_p2p_level():
    with pytest.raises(MoeplanError) as exc:
        api.estimate("deepseek-v3", gpus=64, seq_len=32768, gbs=64, cp=4, pp=8, ep=8, cp_comm_type="a2a+p2p")
    said = str(exc.value)
    assert "no p2p level" in said and "cannot be divided" not in said


def test_a2a_p2p_head_split_names_its_a2a_group():
    with pytest.raises(MoeplanError, match="its a2a group, the 8 CP ranks inside one 8-GPU NVLink domain"):
        api.estimate("qwen3-30b-a3b", gpus=64, seq_len=32768, gbs=64, cp=16, cp_comm_type="a2a+p2p")


def test_report_timeline_relates_the_bubble_to_the_waiting():
    from moeplan.report import _timeline_section

    est, tl = api.estimate_with_timeline("qwen3-30b-a3b", gpus=64, seq_len=4096, gbs=256, pp=4, ep=8)
    html = _timeline_section(tl)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    rows = [cells[i:i + 5] for i in range(0, 5 * tl.pp, 5)]
    bubble_ms = est["time_breakdown_s"]["pp_bubble"] * 1e3
    assert all(r[2] == f"{bubble_ms:.1f} ms" for r in rows)  # the breakdown's pp_bubble on every rank
    slowest = rows[tl.slowest_rank]
    assert slowest[3] == "0 s"  # the slowest rank waits for no one
    assert any(r[3] != "0 s" for r in rows)  # the others wait for it: imbalance, not the bubble
    assert "imbalance across pipeline ranks" in html and "pp_bubble" in html


def test_the_rank_reason_leads_with_the_decision():
    import math

    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.hardware import load_gpu
    from moeplan.plan.ranking import rank_candidates
    from moeplan.plan.space import Candidate

    gpu = load_gpu("h100")
    kw = dict(gpus=256, seq_len=131072, gbs=480, precision="fp8", dispatcher="deepep")
    b = DEFAULT_CALIBRATION.error_band_log
    cands = []
    for lay, tps in ((dict(tp=2, pp=8, vpp=4, cp=16, ep=32), 300.0), (dict(tp=1, pp=8, vpp=4, cp=32, ep=32),
                                                                       300.0 * math.exp(-b))):
        cfg, _ = api.build_config("deepseek-v3", gpu="h100", **kw, **lay)
        cands.append(Candidate(cfg, None, 0.0, tps))  # type: ignore[arg-type]
    order, why = rank_candidates(cands, gpu, b)
    first, second = why[id(order[0])], why[id(order[1])]
    lead = first.split(". ")[0]
    # the decision and the rule that made it (the planner's tie order, #31 item 7), not the arithmetic
    assert lead.startswith("Plan 1 because it matches the measured recipe") and "(rule 1:" in lead
    assert len(lead.split()) < 40 and "band" not in lead
    assert "Tie:" in first and first.index("Tie:") > len(lead)  # the band arithmetic follows it
    assert second.startswith("Tie after plan 1")
