"""G14, DeepSeek-V3's long-context CP series on H100 (TP1 PP8 VPP4 EP32, CP = seq / 4096, ~300-320 TFLOP/s flat),
taken apart by benchmarks/g14_cp_series.py: what carries the long points, and where the measurement sits between the
two CP communication types its runs may have used (the source does not say which)."""

from __future__ import annotations

import pytest

from ..measured_variants import tokens_per_gpu_per_step
from ..scripts import loaded_script

# The source's values are rounded to ~10 TFLOP/s (~300, ~310, ~320): 3%.
ROUNDING = 0.03


@pytest.fixture(scope="module")
def series():
    with loaded_script("benchmarks/g14_cp_series.py", "moeplan_g14_cp_series") as module:
        yield module


def test_rest_of_the_step_per_token_does_not_depend_on_length(series):
    """Every G14 row holds 4,096 tokens per GPU (CP = seq / 4096): the work outside attention and CP communication
    (GEMMs, experts, EP all-to-all, optimizer offload) per token is the same at 4K and at 256K, so the series' shape
    is attention's and CP communication's alone."""
    per_token = []
    for v in series.g14_rows():
        d = series.decompose(v)
        per_token.append(d["rest_s"] / tokens_per_gpu_per_step(v.kwargs))
    assert max(per_token) / min(per_token) < 1.05, per_token


def test_attention_and_cp_carry_the_long_points(series):
    """Attention with its CP communication is under 15% of the 4K step and over 75% of the 256K step."""
    rows = series.g14_rows()
    assert series.decompose(rows[0])["attention_share"] < 0.15
    assert series.decompose(rows[-1])["attention_share"] > 0.75


def test_long_points_lie_between_ulysses_and_hierarchical_cp(series):
    """Where CP spans nodes (64K CP16 .. 256K CP64), each measured point lies between the estimate with a2a (Ulysses:
    whole sequences, one causal kernel call; what the planner chooses) and with a2a+p2p (a2a inside the node, a ring
    across nodes whose off-diagonal steps run cuDNN's MLA backward non-causal at 0.56 of its causal rate), within the
    source's rounding: the two types bracket the measurement, a2a above it from 128K on, a2a+p2p below."""
    miss = []
    for v in series.g14_rows():
        if v.kwargs["cp"] <= 8:
            continue
        lo, hi = sorted(series.decompose(v, t)["tflops"] for t in ("a2a", "a2a+p2p"))
        if not lo * (1 - ROUNDING) <= v.measured() <= hi * (1 + ROUNDING):
            miss.append(f"{v.label}: measured {v.measured()}, a2a / a2a+p2p {lo}-{hi}")
    assert not miss, miss


G14_SLOPE_GAP = ("G14: with the planner's a2a (one causal call over the whole sequence at ~410 TFLOP/s) the estimate "
                 "rises 14% from 64K to 256K where the measurement falls 3%; with a2a+p2p it falls 10%. Neither type "
                 "reproduces the flat series, and the source does not say which ran (docs/calibration.md, known gaps)")


@pytest.mark.xfail(strict=True, reason=G14_SLOPE_GAP)
def test_planner_choice_is_as_flat_as_measured(series):
    """The 256K / 64K estimate ratio under the planner's cp_comm_type within 5% of the measured (300 / 310)."""
    rows = {v.kwargs["seq_len"]: v for v in series.g14_rows()}
    a, b = rows[65536], rows[262144]
    est = series.decompose(b)["tflops"] / series.decompose(a)["tflops"]
    assert est == pytest.approx(b.measured() / a.measured(), rel=0.05)
