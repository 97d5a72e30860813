"""Ring CP's off-diagonal steps run non-causal kernel calls (TE context_parallel.py AttnFuncWithCPAndKVP2P: every
step but the diagonal one calls the kernel with no mask on half the queries or half the keys), and cuDNN's
MLA-shaped backward (q / k 192, v 128) runs them at ~0.56 of its causal rate (tests/data/mla_attention_h200.csv):
``attn_noncausal_bwd_share``. Equal heads 128 show no such gap, so the other families keep 1.0."""

from __future__ import annotations

import statistics

import pytest

from moeplan import api
from moeplan.engine.timing.attention import attention_rate, causal_part, fused_attention_efficiency
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
from moeplan.models.spec import Attention

from ..kernel_tables import LONG, tensor_core_eff

MLA_TABLE, HEADDIM_TABLE = "mla_attention_h200.csv", "attention_headdim_h200.csv"


def _ratios(table: str, family: str, d_qk: int, d_v: int) -> list[float]:
    eff = tensor_core_eff(table)
    return [eff[(family, "bwd", d_qk, d_v, "0", s)] / eff[(family, "bwd", d_qk, d_v, "1", s)] for s in LONG]


def test_mla_noncausal_backward_share_is_the_h200_measurement():
    share = CAL.attn_noncausal_bwd_share["cudnn_mla"]
    assert share == pytest.approx(statistics.median(_ratios(MLA_TABLE, "flash", 192, 128)), abs=0.01)
    assert share < 0.7  # a real gap, not noise


def test_equal_heads_keep_their_causal_backward_rate():
    """d = 128 in both tables (cuDNN, and FlashAttention-2 on sm90): non-causal / causal within 10% of 1, so the
    families without a key in attn_noncausal_bwd_share keep 1.0."""
    for table, family in ((MLA_TABLE, "flash"), (HEADDIM_TABLE, "flash"), (HEADDIM_TABLE, "flash2")):
        assert statistics.median(_ratios(table, family, 128, 128)) == pytest.approx(1.0, abs=0.1), (table, family)
    for kind in ("flash", "flash2", "flash2_sm90"):
        assert kind not in CAL.attn_noncausal_bwd_share
        assert fused_attention_efficiency(128, 128, kind, CAL, causal=False) == fused_attention_efficiency(128, 128, kind, CAL)


def test_noncausal_share_slows_the_backward_only():
    c, n = fused_attention_efficiency(192, 128, "cudnn_mla", CAL), fused_attention_efficiency(192, 128, "cudnn_mla", CAL, causal=False)
    assert n[0] == c[0]
    assert n[1] < c[1] and n[2] < c[2]


def _dsv3(seq: int, cp: int, comm: str):
    return api.build_config("deepseek-v3", gpu="h100", gpus=256, seq_len=seq, gbs=64, mbs=1, tp=1, pp=8, vpp=4,
                            cp=cp, ep=32, precision="fp8", dispatcher="deepep", cp_comm_type=comm)


def test_ring_steps_pay_the_noncausal_rate_and_whole_sequences_do_not():
    """DeepSeek-V3 at 128K CP32 on H100: a2a+p2p rings over 4 nodes (3 of 4 steps' work non-causal) and is slower
    with the measured share; a2a (Ulysses, whole sequences, one causal call) is unchanged."""
    plain = CAL.with_overrides({"attn_noncausal_bwd_share": {"cudnn_mla": 1.0}})
    cfg, gpu = _dsv3(131072, 32, "a2a+p2p")
    mla = next(m for m in cfg.model.distinct_mixers if isinstance(m, Attention))
    share, _ = causal_part(cfg, mla, gpu.nvlink_domain)
    assert share == pytest.approx(0.25)
    ring, ring_plain = attention_rate(cfg, gpu, mla, CAL), attention_rate(cfg, gpu, mla, plain)
    assert ring < 0.85 * ring_plain
    cfg_a2a, _ = _dsv3(131072, 32, "a2a")
    assert attention_rate(cfg_a2a, gpu, mla, CAL) == attention_rate(cfg_a2a, gpu, mla, plain)
