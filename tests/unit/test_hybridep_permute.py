"""HybridEP's permute / unpermute kernels (timing.moe.hybridep_permute_s): the constants are the least-squares fit of
the measured B200 kernels (tests/data/hybridep_permute_b200.csv), the cost scales with the routing-map scan (received
copies x local experts), not with the hidden size, and only HybridEP pays it."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from moeplan import api
from moeplan.engine.timing import moe as moe_timing
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.models.spec import MoE

DATA = Path(__file__).resolve().parents[1] / "data" / "hybridep_permute_b200.csv"


def _rows() -> list[dict[str, str]]:
    with DATA.open(encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _case(r: dict[str, str]) -> tuple[MoE, int, float]:
    ranks, local = int(r["ranks"]), int(r["local_experts"])
    moe = MoE(num_experts=ranks * local, top_k=int(r["topk"]), expert_ffn_hidden=int(r["hidden"]))
    return moe, ranks, float(r["tokens_per_rank"])


def test_each_measured_pair_within_12_percent():
    """Permute + unpermute as the model charges them against each measured configuration (E 16 / 32, top-8 / 36)."""
    for r in _rows():
        moe, ranks, tokens = _case(r)
        measured = (float(r["permute_us"]) + float(r["unpermute_us"])) * 1e-6
        assert moe_timing.hybridep_permute_s(tokens, moe, ranks) == pytest.approx(measured, rel=0.12)


def test_the_constants_are_the_fit_of_the_table():
    """Permute: one time per received copy and local expert scanned (geometric mean of the rows); unpermute: a time
    per received copy and one per expert row, least squares on the rows' relative errors (numpy-free normal
    equations); the module's constants equal them to their printed digits."""
    rows = [_case(r) + (float(r["permute_us"]) * 1e-6, float(r["unpermute_us"]) * 1e-6) for r in _rows()]
    per_scan = math.exp(sum(math.log(p / (t * moe_timing.expected_ranks_hit(m, ep) * m.num_experts / ep))
                            for m, ep, t, p, _ in rows) / len(rows))
    assert moe_timing.HYBRIDEP_PERMUTE_S_PER_COPY_EXPERT == pytest.approx(per_scan, rel=2e-3)
    # unpermute u = a x copies + b x rows, weighted by 1 / u (relative error)
    xs = [(t * moe_timing.expected_ranks_hit(m, ep) / u, t * m.top_k / u) for m, ep, t, _, u in rows]
    s11, s12, s22 = (sum(x[0] * x[0] for x in xs), sum(x[0] * x[1] for x in xs), sum(x[1] * x[1] for x in xs))
    b1, b2 = sum(x[0] for x in xs), sum(x[1] for x in xs)
    det = s11 * s22 - s12 * s12
    a, b = (b1 * s22 - b2 * s12) / det, (s11 * b2 - s12 * b1) / det
    assert moe_timing.HYBRIDEP_UNPERMUTE_S_PER_COPY == pytest.approx(a, rel=3e-3)
    assert moe_timing.HYBRIDEP_UNPERMUTE_S_PER_ROW == pytest.approx(b, rel=3e-3)


def test_the_scan_not_the_row_width_sets_it():
    """Same routing, 4x the hidden size: the same seconds (the kernels' time is the routing-map scan); twice the local
    experts at the same copies: the permute's share doubles."""
    moe = MoE(num_experts=128, top_k=8, expert_ffn_hidden=768)
    wide = MoE(num_experts=128, top_k=8, expert_ffn_hidden=3072)
    assert moe_timing.hybridep_permute_s(16384, moe, 16) == moe_timing.hybridep_permute_s(16384, wide, 16)
    assert moe_timing.hybridep_permute_s(16384, moe, 1) == 0.0


def _perm(dispatcher: str) -> float:
    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="gb200", gpus=16, seq_len=4096, gbs=256, precision="bf16",
                                dispatcher=dispatcher, ep=16)
    ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
    return moe_timing.ep_kernels(ctx, next(la.mlp for la in cfg.model.layers if isinstance(la.mlp, MoE)))[2]


def test_only_hybridep_pays_it():
    """Qwen3-30B-A3B at EP16 on GB200 (8 local experts, 4,096 tokens a micro-batch): HybridEP's permute pair ~0.1 ms
    a direction (4,096 x 6.5 copies x (8 x 0.20 + 1.84 ns) + 32,768 rows x 0.50 ns); DeepEP keeps its one HBM
    permute pass, much less at hidden 2,048."""
    hybrid, deep = _perm("hybridep"), _perm("deepep")
    assert 0.08e-3 < hybrid < 0.14e-3
    assert deep < 0.5 * hybrid
