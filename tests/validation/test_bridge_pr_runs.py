"""Runs measured in Megatron Bridge pull requests, out of the fit: moeplan estimates them and orders them as
measured, or a strict xfail names why not (tests/data/bridge_pr_runs.csv, each pair as its PR gives it).

PR #4458 moved DeepSeek-V3's B300 MXFP8 recipe from the published 26.06 layout (PP8 VPP1 EP8 MBS2, partial CUDA
graphs, no EP overlap: the layout of the published-ranks row below 0.9) to PP8 VPP2 EP8 MBS1 with EP overlap and
full-iteration graphs, 894.1 -> 1161.4 TFLOP/s/GPU on the author's runs: the direction the planner takes from the
published layout. The new run also puts attention and the output projection in FP8, which moeplan does not model,
so its gain is not compared, only its level and the order.

PR #1760 turned EP A2A overlap off on Qwen3-235B-A22B's B200 recipe "due to CPU overhead" (and VPP off for MXFP8):
BF16 17.2 -> 16.0 s, MXFP8 20.1 -> 16.9 s per step. moeplan orders both the other way (overlap hides the all-to-all
it costs); see PR_1760_GAP."""

from __future__ import annotations

import pytest

from moeplan import api

from ..reference_runs import bridge_pr_runs, estimate_kwargs

RUNS = bridge_pr_runs()
PR_1760_GAP = (
    "EP A2A overlap's host cost on an x86 B200 host (Bridge PR #1760: disabled 'due to CPU overhead'; issue #3399: "
    "on B300 'moe_a2a_overlap and VP degraded perf') is not in moeplan's schedule model, whose per-layer overlap cost "
    "(ep_overlap_layer_s) is fitted on rows where the overlap gains (G11: H100 HybridEP +17.5%; MB01: B200 DeepEP "
    "EP32): a plausible cause is that the merged schedule ties each layer's backward launches to the forward's host "
    "sync for the received-token counts (alltoall's cuda_sync_point), so the backward no longer runs ahead of the "
    "GPU; no shared row times the host, so it is named, not costed (docs/calibration.md, known gaps)")


def _pair(name: str) -> tuple[dict[str, str], dict[str, str]]:
    rows = {r["side"]: r for r in RUNS if r["pair"] == name}
    return rows["before"], rows["after"]


def _estimate(run: dict[str, str]) -> dict:
    kw = estimate_kwargs(run)
    return api.estimate(run["model"], **kw)


def test_the_pr_rows_are_read_as_the_prs_give_them():
    before, after = _pair("PR 4458")
    assert (before["vpp"], before["mbs"], before["ep_overlap"], before["tflops_per_gpu"]) == ("1", "2", "0", "894.1")
    assert (after["vpp"], after["mbs"], after["ep_overlap"], after["tflops_per_gpu"]) == ("2", "1", "1", "1161.4")
    for name, steps in (("PR 1760 bf16", ("17.2", "16.0")), ("PR 1760 mxfp8", ("20.1", "16.9"))):
        before, after = _pair(name)
        assert (before["measured_step_time_s"], after["measured_step_time_s"]) == steps
        assert (before["ep_overlap"], after["ep_overlap"], before["dispatcher"]) == ("1", "0", "alltoall")


@pytest.mark.xfail(strict=True, reason="-11% at issue 31's last refit (1,032 against 1,161 TFLOP/s): once dense layers stopped "
                   "paying MoE's host-sync launch time, N41's GEMM-bound 4K point (Llama-2-7B, NeMo 24.03) pulls "
                   "gemm_epilogue_s 1.27e-10 -> 1.55e-10, which deepens the K at half rate on Blackwell's faster "
                   "tensor cores (docs/calibration.md, known gaps); N41 as ratios instead keeps this row inside 10% "
                   "but takes the fit's error 0.136 -> 0.141")
def test_pr_4458_b300_recipe_is_estimated_within_10_percent():
    _, after = _pair("PR 4458")
    assert _estimate(after)["tflops_per_gpu"] == pytest.approx(float(after["tflops_per_gpu"]), rel=0.10)


def test_pr_4458_is_ordered_as_measured():
    before, after = _pair("PR 4458")
    assert float(after["tflops_per_gpu"]) > float(before["tflops_per_gpu"])
    assert _estimate(after)["tflops_per_gpu"] > _estimate(before)["tflops_per_gpu"]


@pytest.mark.xfail(strict=True, reason=PR_1760_GAP)
@pytest.mark.parametrize("name", ["PR 1760 bf16", "PR 1760 mxfp8"])
def test_pr_1760_overlap_off_is_ordered_as_measured(name):
    before, after = _pair(name)
    assert float(after["measured_step_time_s"]) < float(before["measured_step_time_s"])
    assert _estimate(after)["step_time_s"] < _estimate(before)["step_time_s"]


@pytest.mark.parametrize("name", ["PR 1760 bf16", "PR 1760 mxfp8"])
def test_pr_1760_runs_without_overlap_are_estimated_within_30_percent(name):
    """The runs after the change (no EP overlap) measure the rest of the model: within 30% of their step."""
    _, after = _pair(name)
    assert _estimate(after)["step_time_s"] == pytest.approx(float(after["measured_step_time_s"]), rel=0.30)
