"""FLOPs per token: Megatron-Core's convention, checked against published runs."""

from __future__ import annotations

import csv

import pytest

from moeplan.engine.flops import flops_per_token, padded_vocab
from moeplan.models import load_model, read_config

from ..conftest import MODELS_DIR, REFERENCE_DIR
from ..measured_variants import tflops_to_flops_per_token


def _rows():
    with open(REFERENCE_DIR / "published_runs.csv", newline="", encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh) if r["tokens_per_s_per_gpu"] and r["tflops_per_gpu"]]


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['model']}-{r['system']}-{r['gpus']}")
def test_flops_per_token_matches_published_ratio(row):
    """tflops_per_gpu / tokens_per_s_per_gpu is Megatron's FLOPs per token: within 2%."""
    published = tflops_to_flops_per_token(float(row["tflops_per_gpu"]), float(row["tokens_per_s_per_gpu"]))
    spec = read_config(MODELS_DIR / f"{row['model']}.json")
    ours = flops_per_token(spec, int(row["seq_len"]), tp=int(row["tp"])).total_flops
    assert ours == pytest.approx(published, rel=0.02)


def test_attention_term_linear_in_seq_len_gemm_constant():
    spec = load_model("qwen3-235b-a22b")
    f1, f2, f4 = (flops_per_token(spec, s) for s in (8192, 16384, 32768))
    assert f1.gemm_flops == f2.gemm_flops == f4.gemm_flops
    assert f2.attention_flops == pytest.approx(2 * f1.attention_flops)
    assert f4.attention_flops == pytest.approx(4 * f1.attention_flops)
    # and the attention share grows with S
    assert f1.attention_share < f2.attention_share < f4.attention_share


def test_gated_deltanet_cost_per_token_constant_in_seq_len():
    spec = load_model("qwen3-next-80b-a3b")
    a, b = flops_per_token(spec, 4096), flops_per_token(spec, 262144)
    assert a.linear_attention_flops > 0
    assert a.linear_attention_flops == b.linear_attention_flops
    # only the 12 full-attention layers grow with S
    per_full_layer = (b.attention_flops - a.attention_flops) / 12
    assert per_full_layer == pytest.approx(3 * 2 * 2 * 16 * 256 * (262144 - 4096) / 2)


def test_sliding_window_layers_do_not_grow_past_the_window():
    spec = load_model("gpt-oss-120b")
    a, b = flops_per_token(spec, 8192), flops_per_token(spec, 16384)
    full_layers = sliding_layers = 18
    q, w = 64 * 64, 128
    full = 3 * 2 * 2 * q * (16384 - 8192) / 2 * full_layers
    window = 3 * 2 * 2 * q * ((w - w * w / (2 * 16384)) - (w - w * w / (2 * 8192))) * sliding_layers
    assert b.attention_flops - a.attention_flops == pytest.approx(full + window)
    assert window < 1e-3 * full  # a sliding-window layer costs almost nothing more at longer S


def test_padded_vocab():
    assert padded_vocab(151936, 1) == 151936
    assert padded_vocab(151936, 2) == 152064
    assert padded_vocab(129280, 8) == 130048


@pytest.mark.parametrize("seq", [8192, 32768, 65536])
def test_qwen3_next_flops_follow_megatron_bridge_gdn_convention(seq):
    """The convention the measured Qwen3-Next TFLOP/s use: Megatron Bridge's calculator with its
    Gated DeltaNet branch (src/megatron/bridge/training/utils/flop_utils.py, transformer_flops,
    experimental_attention_variant 'gated_delta_net', since 2026-03-23/31; Megatron-LM training.py has
    the same branch since the GDN support of 2026-01). GDN context parallel reached Megatron-LM main on
    2026-04-13, after it, so the CP 4 / CP 16 rows were counted this way. Written out per token here
    (no MTP: moeplan's catalog entry has none)."""
    spec = load_model("qwen3-next-80b-a3b")
    h, qk, v, nv, conv = 2048, 16 * 128, 32 * 128, 32, 4
    q, kv = 16 * 256, 2 * 256
    gdn = 3 * 2 * (h * (2 * qk + 2 * v + 2 * nv) + conv * (2 * qk + v) + nv * 128 ** 2 * 4 + h * v)
    attn = 3 * 2 * (h * (q + 2 * kv + q) + q * h + q * seq / 2 * 2)
    mlp = 3 * 2 * h * (512 * 10 * 3 + 512 * 3)
    logits = 3 * 2 * h * 151936
    bridge = 36 * gdn + 12 * attn + 48 * mlp + logits
    assert flops_per_token(spec, seq).total_flops == pytest.approx(bridge, rel=1e-9)


def _bridge_rows(model):
    from ..reference_runs import bridge_runs
    return [r for r in bridge_runs() if r["model"] == model]


def test_gpt_oss_bridge_flop_conventions():
    """The gpt-oss perf-summary rows' TFLOP/s / tokens/s: from 26.06 (Bridge v0.5.0 flop_utils.py: swa_context
    for window_size / window_attn_skip_freq, gated_linear_multiplier 3/2 for any gated unit) it is moeplan's count;
    26.04.01 (v0.4.2 flop_utils.py transformer_flops: ``3 / 2 if gated_linear_unit and activation_func == F.silu
    else 1``, no window term) counted gpt-oss's quick-GELU experts as two matrices and every layer as full causal
    attention: 0.83x moeplan's count. Why the out-of-sample check compares tokens/s."""
    import dataclasses

    from moeplan.models.spec import Layer

    spec = load_model("gpt-oss-120b")
    ours = flops_per_token(spec, 4096).total_flops
    v042 = dataclasses.replace(spec, layers=tuple(
        Layer(dataclasses.replace(l.mixer, sliding_window=None), dataclasses.replace(l.mlp, gated=False))
        for l in spec.layers))
    theirs_v042 = flops_per_token(v042, 4096).total_flops
    for r in _bridge_rows("gpt-oss-120b"):
        published = tflops_to_flops_per_token(float(r["tflops_per_gpu"]), float(r["tokens_per_s_per_gpu"]))
        expected = theirs_v042 if r["release"] == "26.04.01" else ours
        assert published == pytest.approx(expected, rel=0.005), r["release"]
    assert theirs_v042 / ours == pytest.approx(0.83, abs=0.005)
