"""Ranking over the shared groups N01-N41 (tests/measured_variants.n_ranked_pairs): pairs of rows that answer the
same question with different knobs or layouts, >= 10% apart measured, in the measured order. Together with the older
groups' pairs (tests/validation/test_ranking.py) the issue's target is >= 90%. Misses are printed."""

from __future__ import annotations

from moeplan import api
from tests.measured_variants import Variant, moe_layer_s, n_ranked_pairs, ranked_pairs, variants

EFA = ("N31", "N32", "N33")  # AWS EFA campaigns: EP calls posted by host threads (docs/calibration.md)


def _throughput(v: Variant) -> float:
    if v.extra.get("obs") == "layer":
        return 1.0 / moe_layer_s(v.group, **v.kwargs)
    return float(api.estimate(v.model, **v.kwargs)["tokens_per_s_per_gpu"])


def _wrong(pairs: list[tuple[Variant, Variant]]) -> list[str]:
    cache: dict[int, float] = {}

    def t(v: Variant) -> float:
        if id(v) not in cache:
            cache[id(v)] = _throughput(v)
        return cache[id(v)]

    return [f"{lo.group}: {lo.label} < {hi.label} (measured {lo.measured():.4g} < {hi.measured():.4g})"
            for lo, hi in pairs if not t(hi) > t(lo)]


def test_pairs_outside_the_efa_campaigns():
    pairs = [p for p in n_ranked_pairs() if p[0].group not in EFA]
    wrong = _wrong(pairs)
    print(f"\n{len(pairs) - len(wrong)} of {len(pairs)} in order; wrong:\n" + "\n".join(wrong))
    assert len(pairs) >= 20 and len(pairs) - len(wrong) >= 0.9 * len(pairs), wrong


def test_all_shared_pairs_reach_ninety_percent():
    """Every shared pair, the AWS EFA campaigns included: with the fixed cost per EP call across EFA nodes
    (engine.timing.moe.ep_proxy_call_s) MBS 1 costs every dispatcher there and DeepEP's proxies cost more per call than
    NCCL's all-to-all (106 of 122 in order before it, 14 of the 16 misses in N31-N33); what stays is DeepEP against
    NCCL at EP32 on p5 (N33, outside the fit: docs/calibration.md)."""
    pairs = ranked_pairs(variants()) + n_ranked_pairs()
    wrong = _wrong(pairs)
    print(f"\n{len(pairs) - len(wrong)} of {len(pairs)} in order; wrong:\n" + "\n".join(wrong))
    assert len(pairs) - len(wrong) >= 0.9 * len(pairs)
